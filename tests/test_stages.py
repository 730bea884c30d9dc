"""Loading stages: reverse complement, seeded flips, compact batches, Eden model inputs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.format import encode_record
from bionemo_wds.load.epochs import EpochState
from bionemo_wds.load.model_inputs import model_inputs_gather, tensors, to_model_inputs
from bionemo_wds.load.stages import collate_compact, decode_sample, reverse_complement, shuffle, untuple
from bionemo_wds.seeds import flips
from bionemo_wds.tokenizer import COMPLEMENT, reverse_complement_bases
from bionemo_wds.tokenizer import BOS_ID, EOS_ID, PAD_ID, SEP_ID

# U (RNA) complements to A, which complements to T: double RC is the identity on DNA codes only.
IUPAC_DNA = "ACGTRYSWKMBDHVNacgtryswkmbdhvn"


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=IUPAC_DNA, min_size=0, max_size=300))
def test_reverse_complement_twice_is_identity(seq):
    arr = np.frombuffer(seq.encode(), dtype=np.uint8)
    assert reverse_complement_bases(reverse_complement_bases(arr)).tobytes() == seq.encode()


def test_reverse_complement_values():
    got = reverse_complement_bases(np.frombuffer(b"ACGTNRYKMBDHVSWacgtn", dtype=np.uint8)).tobytes()
    assert got == b"nacgtWSBDHVKMRYNACGT"
    assert bytes(COMPLEMENT[[ord("U"), ord("u")]]) == b"Aa"


def _samples(n):
    return [{"key": f"s{i}/0", "seq_id": f"s{i}", "start": 0, "bases": np.frombuffer(b"AACG", np.uint8),
             "tag": b"", "rc": False} for i in range(n)]


def test_flip_probability_edges_and_rate():
    keys = [f"contig{i}/{j}" for i in range(50) for j in range(40)]
    assert not any(flips(k, 0.0, 1, 0) for k in keys)
    assert all(flips(k, 1.0, 1, 0) for k in keys)
    rate = np.mean([flips(k, 0.5, 1, 0) for k in keys])
    assert 0.45 < rate < 0.55
    # a pure function of (key, seed, epoch): same answer twice, different across epochs
    assert [flips(k, 0.5, 1, 0) for k in keys] == [flips(k, 0.5, 1, 0) for k in keys]
    assert [flips(k, 0.5, 1, 0) for k in keys] != [flips(k, 0.5, 1, 1) for k in keys]


def test_reverse_complement_stage_flips_bases_not_tags():
    samples = [{**s, "tag": b"|d__X|"} for s in _samples(200)]
    out = list(reverse_complement(p=1.0, seed=3, epoch=EpochState(0))(iter(samples)))
    assert all(o["bases"].tobytes() == b"CGTT" and o["rc"] and o["tag"] == b"|d__X|" for o in out)
    out = list(reverse_complement(p=0.0, seed=3, epoch=EpochState(0))(iter(_samples(200))))
    assert all(o["bases"].tobytes() == b"AACG" and not o["rc"] for o in out)


def test_shuffle_is_seeded_and_a_permutation():
    def run(seed, epoch):
        return [s["key"] for s in shuffle(bufsize=64, initial=16, seed=seed, epoch=EpochState(epoch))(iter(_samples(500)))]

    a = run(1, 0)
    assert sorted(a) == sorted(s["key"] for s in _samples(500))
    assert a == run(1, 0)
    assert a != run(1, 1) and a != run(2, 0)
    assert a != [s["key"] for s in _samples(500)]


def test_untuple_and_decode():
    rec = encode_record([b"ACGT", b"GG"], ["c1", "c2"], [5, 0], [1, 0], ["", "|t|"])
    samples = list(decode_sample()(untuple(iter([(rec,)]))))
    assert [s["key"] for s in samples] == ["c1/1", "c2/0"]
    assert samples[0]["bases"].tobytes() == b"ACGT" and samples[1]["tag"] == b"|t|"
    assert samples[0]["start"] == 5


@pytest.mark.parametrize("form", ["numpy", "cpu_tensors", "device_path"])
def test_to_model_inputs_hand_computed(form):
    tagged = {"key": "a/0", "seq_id": "a", "start": 0, "bases": np.frombuffer(b"ACG", np.uint8), "tag": b"|x|", "rc": False}
    plain = {"key": "b/0", "seq_id": "b", "start": 7, "bases": np.frombuffer(b"TTAC", np.uint8), "tag": b"", "rc": True}
    batch = collate_compact([tagged, plain], window=5, max_tag=3)
    assert batch["bases"].dtype == np.uint8 and batch["bases"].shape == (2, 5)
    if form != "numpy":
        batch = tensors(batch)
    # the accelerator path (whole-batch gather/where) must agree with the CPU path exactly
    convert = model_inputs_gather if form == "device_path" else None

    def run(control_tags, seq_length=10):
        if convert is None:
            return to_model_inputs(batch, seq_length=seq_length, control_tags=control_tags)
        return convert(batch, seq_length, control_tags)

    out = run(True)
    P, B, S, E = PAD_ID, BOS_ID, SEP_ID, EOS_ID
    A, C, G, T, bar, x = 65, 67, 71, 84, ord("|"), ord("x")
    tokens = [[B, bar, x, bar, S, A, C, G, E, P],
              [B, S, T, T, A, C, E, P, P, P]]
    assert out["tokens"].tolist() == tokens
    assert out["labels"].tolist() == [row[1:] + [P] for row in tokens]
    assert out["loss_mask"].tolist() == [[0, 0, 0, 0, 1, 1, 1, 0, 0, 0],
                                         [0, 1, 1, 1, 1, 0, 0, 0, 0, 0]]
    assert out["loss_mask"].dtype == torch.float32 and out["tokens"].dtype == torch.int64
    assert out["position_ids"].tolist() == [list(range(10))] * 2
    if convert is None:
        assert out["keys"] == ["a/0", "b/0"] and out["rc"].tolist() == [False, True]
    # without control tags: BOS + bases + EOS
    out = run(False)
    assert out["tokens"].tolist() == [[B, A, C, G, E, P, P, P, P, P], [B, T, T, A, C, E, P, P, P, P]]
    assert out["loss_mask"].tolist()[0] == [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    with pytest.raises(ValueError, match="seq_length is 6"):
        run(True, seq_length=6)


def test_to_model_inputs_uniform_fast_path_matches_row_path():
    rng = np.random.default_rng(0)
    samples = [{"key": f"k{i}/0", "seq_id": f"k{i}", "start": 0, "rc": False, "tag": b"|ab|",
                "bases": rng.choice(np.frombuffer(b"ACGT", np.uint8), 50)} for i in range(6)]
    full = to_model_inputs(collate_compact(samples, window=50, max_tag=4), seq_length=60)
    rowwise = model_inputs_gather(tensors(collate_compact(samples, window=50, max_tag=4)), 60, True)
    for key in ("tokens", "labels", "loss_mask", "position_ids"):
        assert torch.equal(full[key], rowwise[key]), key
