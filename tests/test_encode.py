"""`bionemo_wds.encode`: in-memory sequences to the exact model inputs the training path yields.

Windows read from prepared shards of real lambda pieces (lineage tags, soft-masked stretches) are
encoded again from their FASTA slices and compared row by row with the data module's model inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import LAMBDA, LINEAGES, shard_windows, write_fasta

from bionemo_wds import encode
from bionemo_wds.core.tokenizer import BOS_ID, EOS_ID, PAD_ID, SEP_ID
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import read_manifest
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.windows import window_counts, window_table

SEQ_LENGTH = 384
MODEL_INPUTS = ("tokens", "labels", "loss_mask", "position_ids")


@pytest.fixture(scope="module", params=["lineage", "none"])
def dataset(request, lambda_lineage_fa, tmp_path_factory) -> tuple[Path, dict[str, str], dict[str, str]]:
    """(root, seq_id -> bases, seq_id -> tag) of the lambda pieces prepared with or without lineage tags."""
    fasta, seqs, tags = lambda_lineage_fa
    out = tmp_path_factory.mktemp(f"encode_{request.param}") / "out"
    opts = PrepareOptions(seq_length=SEQ_LENGTH, stride=150, tags=request.param, samples_per_shard=64, progress=False)
    prepare([fasta], out, opts)
    return out, seqs, (tags if request.param == "lineage" else {})


@pytest.mark.parametrize(
    ("control_tags", "fold_case", "weight"), [(True, True, 0.1), (False, True, 0.1), (True, False, None)]
)
def test_encode_equals_the_training_path_row_by_row(dataset, control_tags, fold_case, weight):
    """Every train and val window: encode(FASTA slice, its tag) == dm.model_inputs(batch) for that row."""
    root, seqs, tags = dataset
    options = {"control_tags": control_tags, "fold_case": fold_case, "soft_mask_weight": weight}
    dm = GenomicWebDataModule(str(root), micro_batch_size=8, rc_prob=0.0, seed=5, **options)
    dm.setup("fit")
    rows = soft = tagged = 0
    for loader in (dm.train_dataloader(), dm.val_dataloader()):
        for b in loader:
            assert not b["rc"].any()
            inputs = dm.model_inputs(b)
            real = [i for i, key in enumerate(b["keys"]) if key]  # val pads its last batch with fillers
            slices = []
            for i in real:
                start, n = int(b["start"][i]), int(b["lengths"][i])
                slices.append(seqs[b["seq_id"][i]][start : start + n])
            row_tags = [tags[b["seq_id"][i]] for i in real] if tags else None
            enc = encode(slices, dm.seq_length, tags=row_tags, **options)
            assert enc["tokens"].shape == (len(real), dm.seq_length)  # each slice fits one window
            for name in MODEL_INPUTS:
                assert enc[name].dtype == inputs[name].dtype, name
                assert torch.equal(enc[name], inputs[name][real]), name
            assert enc["start"].tolist() == [0] * len(real) and enc["sequence"].tolist() == list(range(len(real)))
            assert enc["lengths"].tolist() == [len(s) for s in slices]
            rows += len(real)
            soft += sum(s != s.upper() for s in slices)
            tagged += bool(row_tags) and control_tags
    assert rows > 150 and soft > 20
    assert tagged or not (tags and control_tags)


@pytest.mark.parametrize(
    ("seq_length", "stride", "tail"), [(1024, None, "end"), (1024, 500, "end"), (1024, 700, "drop"), (256, 200, "end")]
)
def test_a_long_sequence_is_windowed_by_the_window_table(lambda_seq, seq_length, stride, tail):
    """The whole lambda genome: row count, starts and lengths follow window_table; each row's bases are the slice."""
    window = seq_length - 3
    step = stride or window
    out = encode(lambda_seq, seq_length, stride=stride, tail=tail)
    table = window_table(np.array([0]), np.array([len(lambda_seq)]), window, step, tail)
    (count,) = window_counts(np.array([len(lambda_seq)]), window, step, tail)
    assert out["tokens"].shape == (count, seq_length) == (len(table), seq_length)
    assert out["start"].tolist() == table.start.tolist()
    assert out["lengths"].tolist() == table.length.tolist()
    assert out["keys"] == [f"0/{i}" for i in range(count)]
    assert out["sequence"].tolist() == [0] * count
    for row, (start, n) in enumerate(zip(table.start.tolist(), table.length.tolist())):
        tokens = out["tokens"][row]
        assert tokens[:2].tolist() == [BOS_ID, SEP_ID]  # an empty tag
        assert bytes(tokens[2 : 2 + n].tolist()) == lambda_seq[start : start + n].encode()
        assert int(tokens[2 + n]) == EOS_ID and (tokens[3 + n :] == PAD_ID).all()
    covered = np.zeros(len(lambda_seq), bool)
    for start, n in zip(table.start.tolist(), table.length.tolist()):
        covered[start : start + n] = True
    assert covered.all() == (tail == "end")


def test_encode_windows_are_the_prepared_shards_windows(tmp_path, lambda_seq):
    """Windows of the lambda genome from encode() and from prepare (same seq_length, stride): same starts and bases."""
    prepare([LAMBDA], tmp_path / "out", PrepareOptions(seq_length=256, stride=200, split=(1, 0, 0), progress=False))
    shards = sorted((window, start, bases) for _, start, window, bases, _ in shard_windows(tmp_path / "out")["train"])
    out = encode(lambda_seq, 256, stride=200)
    encoded = [
        (i, start, bytes(out["tokens"][i, 2 : 2 + n].tolist()))
        for i, (start, n) in enumerate(zip(out["start"].tolist(), out["lengths"].tolist()))
    ]
    assert encoded == shards


def test_a_lineage_tag_gets_the_windows_prepare_gives_it(tmp_path, lambda_seq):
    """A lineage with ranks shorter than None (o__;f__): encode leaves the same room for dropout as
    prepare, so the windows of a long sequence start where the dataset's do and hold the same bases."""
    tag = LINEAGES[4]
    fasta = write_fasta(tmp_path / "lambda.fa", {"lambda": lambda_seq}, {"lambda": tag})
    opts = PrepareOptions(seq_length=512, stride=300, split=(1, 0, 0), tags="lineage", progress=False)
    prepare([fasta], tmp_path / "out", opts)
    assert read_manifest(tmp_path / "out").params.max_tag_bytes > len(tag)  # room for o__None;f__None
    shards = sorted((window, start, bases) for _, start, window, bases, _ in shard_windows(tmp_path / "out")["train"])
    out = encode(lambda_seq, 512, tags=tag, stride=300)
    p = len(tag) + 2
    encoded = [
        (i, start, bytes(out["tokens"][i, p : p + n].tolist()))
        for i, (start, n) in enumerate(zip(out["start"].tolist(), out["lengths"].tolist()))
    ]
    assert encoded == shards


def test_several_sequences_with_tags_share_one_window_length(lambda_seq, klebsiella_seqs):
    """Tags per sequence: windows hold seq_length - 3 - longest tag bases; every row has its own tag."""
    contig = min(klebsiella_seqs.values(), key=len)
    seqs, tags = [lambda_seq[:3000], contig], [LINEAGES[3], LINEAGES[0]]
    out = encode(seqs, 512, tags=tags)
    window = 512 - 3 - max(len(t) for t in tags)
    counts = window_counts(np.array([3000, len(contig)]), window, window)
    assert out["sequence"].tolist() == [0] * counts[0] + [1] * counts[1]
    for row, (index, start, n) in enumerate(zip(out["sequence"], out["start"].tolist(), out["lengths"].tolist())):
        tag = tags[int(index)].encode()
        tokens = out["tokens"][row]
        assert bytes(tokens[1 : 1 + len(tag)].tolist()) == tag and int(tokens[1 + len(tag)]) == SEP_ID
        p = len(tag) + 2
        assert bytes(tokens[p : p + n].tolist()) == seqs[int(index)][start : start + n].upper().encode()
        assert not out["loss_mask"][row, : p - 1].any() and (out["loss_mask"][row, p - 1 : p - 1 + n] == 1).all()
    # one tag for all sequences, and a wrong number of tags
    same = encode(seqs, 512, tags=LINEAGES[0])
    assert all(bytes(r[1 : 1 + len(LINEAGES[0])].tolist()) == LINEAGES[0].encode() for r in same["tokens"])
    with pytest.raises(BadInputError, match="3 tags for 2 sequences"):
        encode(seqs, 512, tags=[LINEAGES[0]] * 3)


@pytest.mark.parametrize("bad", ["X", "-", "*", "é"])
def test_a_bad_character_is_named_with_its_sequence_and_position(lambda_seq, bad):
    """BadInputError names the sequence index and the 0-based position of the first bad character."""
    broken = lambda_seq[:500] + bad + lambda_seq[501:900]
    with pytest.raises(BadInputError, match=r"sequence #1 has .* at position 500\b"):
        encode([lambda_seq[:300], broken, lambda_seq[:50]], 256)
    with pytest.raises(BadInputError, match=r"sequence #0 is empty"):
        encode(["", lambda_seq[:10]], 256)


def test_soft_mask_weights_via_encode(lambda_seq):
    """Lower-case bases: upper-case ids (or kept with fold_case=False), weight w where the label is lower case."""
    seq = lambda_seq[:600] + lambda_seq[600:900].lower() + lambda_seq[900:2000]
    lower = np.array([c.islower() for c in seq])
    for fold_case in (True, False):
        out = encode(seq, 512, soft_mask_weight=0.25, fold_case=fold_case)
        unweighted = encode(seq, 512, fold_case=fold_case)
        for row, (start, n) in enumerate(zip(out["start"].tolist(), out["lengths"].tolist())):
            text = seq[start : start + n]
            assert bytes(out["tokens"][row, 2 : 2 + n].tolist()) == (text.upper() if fold_case else text).encode()
            expected = np.where(lower[start : start + n], np.float32(0.25), np.float32(1.0))
            assert np.array_equal(out["loss_mask"][row, 1 : 1 + n].numpy(), expected)
            assert (unweighted["loss_mask"][row, 1 : 1 + n] == 1).all()
            assert not out["loss_mask"][row, 1 + n :].any() and out["loss_mask"][row, 0] == 0
        assert torch.equal(out["tokens"], unweighted["tokens"])
    assert (encode(seq, 512, soft_mask_weight=0.25)["loss_mask"] == 0.25).sum() == 300
