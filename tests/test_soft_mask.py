"""Soft-masked bases end to end: lower case kept in the shards, upper-case ids for the model, a
reduced loss weight where the label is lower case, on both strands and on both model-input paths.

The input is the real lambda genome with planted lower-case stretches (at the sequence start and
end, inside a window, across window boundaries, one whole window, a single base); every training
window of an epoch is checked column by column against the FASTA.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import LAMBDA, LINEAGES, read_fasta, write_fasta
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.compat.stages import collate_compact
from bionemo_wds.core.tokenizer import BOS_ID, EOS_ID, PAD_ID, SEP_ID
from bionemo_wds.format import read_manifest
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.load.batch.model_inputs import model_inputs_cpu, model_inputs_gather, to_model_inputs
from bionemo_wds.load.batch.to_torch import tensors
from bionemo_wds.prepare import PrepareOptions, prepare

WEIGHT = 0.1
#: Soft-masked stretches [start, end) of the lambda genome. Windows start every 200 bases: (0, 40) is
#: at the sequence start, (150, 260) and (1190, 1420) cross window boundaries, (10000, 10600) covers
#: whole windows, (5000, 5001) is one base and (48430, 48502) runs to the sequence end.
LOWER = [(0, 40), (150, 260), (610, 615), (1190, 1420), (5000, 5001), (10000, 10600), (48430, 48502)]
#: A short second record for the tagged dataset: shorter than a window, with its own (shorter) tag,
#: so batches mix tag lengths (the per-row path of `model_inputs_cpu`).
SHORT = (23000, 23150)
#: dataset variant -> (seq_length, tags rule); stride 200 for both.
VARIANTS = {"plain": (256, "none"), "lineage": (384, "lineage")}
STRIDE = 200
RC_TABLE = str.maketrans("ACGTacgt", "TGCAtgca")

(LAMBDA_SEQ,) = read_fasta(LAMBDA).values()


def masked_lambda() -> str:
    chars = list(LAMBDA_SEQ)
    for lo, hi in LOWER:
        chars[lo:hi] = [c.lower() for c in chars[lo:hi]]
    return "".join(chars)


MASKED = masked_lambda()


def reverse_complement(text: str) -> str:
    """Reverse complement keeping case (a <-> t, c <-> g): the reference for rc rows."""
    return text.translate(RC_TABLE)[::-1]


def reference_row(bases: str, tag: bytes, seq_length: int, fold_case: bool, weight: float | None, control_tags=True):
    """tokens, labels, loss_mask of one row, built the plain way from the bases' text."""
    prefix = [BOS_ID, *tag, SEP_ID] if control_tags else [BOS_ID]
    ids = list((bases.upper() if fold_case else bases).encode())
    tokens = prefix + ids + [EOS_ID]
    tokens += [PAD_ID] * (seq_length - len(tokens))
    labels = [*tokens[1:], PAD_ID]
    mask = [0.0] * seq_length
    for k, base in enumerate(bases):
        mask[len(prefix) - 1 + k] = float(weight) if (weight is not None and base.islower()) else 1.0
    return torch.tensor(tokens), torch.tensor(labels), torch.tensor(mask, dtype=torch.float32)


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def masked_dataset(request, tmp_path_factory) -> tuple[Path, dict[str, str], dict[str, bytes]]:
    """(root, seq_id -> FASTA bases, seq_id -> tag) of the soft-masked lambda prepared with case="keep"."""
    seq_length, tags = VARIANTS[request.param]
    tmp = tmp_path_factory.mktemp(f"soft_mask_{request.param}")
    seqs = {"lam": MASKED}
    descriptions = {}
    if tags == "lineage":
        seqs["lam_short"] = MASKED[SHORT[0] : SHORT[1]].lower()
        descriptions = {"lam": LINEAGES[0], "lam_short": LINEAGES[3]}
    fasta = write_fasta(tmp / "masked.fa", seqs, descriptions)
    opts = PrepareOptions(
        seq_length=seq_length,
        stride=STRIDE,
        split=(1, 0, 0),
        tags=tags,
        case="keep",
        samples_per_shard=64,
        progress=False,
        workers=1,
    )
    prepare([fasta], tmp / "out", opts)
    return tmp / "out", seqs, {k: v.encode() for k, v in descriptions.items()}


def epoch_batches(root: Path, **kw) -> tuple[GenomicWebDataModule, list[dict]]:
    dm = GenomicWebDataModule(str(root), **{"micro_batch_size": 8, "rc_prob": 0.5, "seed": 3, **kw})
    dm.setup("fit")
    dm.set_epoch(0)
    return dm, list(dm.train_dataloader())


def test_planted_runs_cover_the_intended_places():
    """The fixture's lower case is where LOWER says, on top of the real genome."""
    assert MASKED.upper() == LAMBDA_SEQ
    lower = np.frombuffer(MASKED.encode(), np.uint8) >= ord("a")
    assert int(lower.sum()) == sum(hi - lo for lo, hi in LOWER)
    assert lower[0] and lower[-1] and not lower[40] and lower[5000] and not lower[4999] and not lower[5001]


@pytest.mark.parametrize(("fold_case", "weight"), [(True, WEIGHT), (False, WEIGHT), (True, None), (False, None)])
def test_every_training_window_matches_the_fasta_column_by_column(masked_dataset, fold_case, weight):
    """Tokens, labels and loss_mask of every window of an epoch equal the FASTA slice's (RC'd for rc rows)."""
    root, seqs, tags = masked_dataset
    dm, batches = epoch_batches(root, fold_case=fold_case, soft_mask_weight=weight)
    seq_length = dm.seq_length
    seen, rc_rows, fwd_rows, soft_rows, mixed_rows = set(), 0, 0, 0, 0
    for b in batches:
        inputs = dm.model_inputs(b)
        for i, key in enumerate(b["keys"]):
            start, n = int(b["start"][i]), int(b["lengths"][i])
            forward = seqs[b["seq_id"][i]][start : start + n]
            assert n == len(forward)
            expected = reverse_complement(forward) if b["rc"][i] else forward
            tokens, labels, mask = reference_row(expected, tags.get(b["seq_id"][i], b""), seq_length, fold_case, weight)
            assert torch.equal(inputs["tokens"][i], tokens), key
            assert torch.equal(inputs["labels"][i], labels), key
            assert torch.equal(inputs["loss_mask"][i], mask), key
            assert torch.equal(inputs["position_ids"][i], torch.arange(seq_length))
            # the batch's bases are the stored ones, case kept, on the row's strand
            assert b["bases"][i, :n].numpy().tobytes() == expected.encode()
            lower = np.array([c.islower() for c in expected])
            if b["rc"][i]:
                rc_rows += 1
                # the weight pattern of an rc row is the forward pattern reversed
                assert (lower == np.array([c.islower() for c in forward])[::-1]).all()
            else:
                fwd_rows += 1
            soft_rows += bool(lower.any())
            mixed_rows += bool(lower.any() and not lower.all())
            seen.add(key)
    n_train = read_manifest(root).splits["train"].n_samples
    assert len(seen) == n_train // 8 * 8
    assert rc_rows > 10 and fwd_rows > 10
    assert soft_rows >= 6 and mixed_rows >= 4


def test_lower_case_labels_weigh_the_soft_mask_weight_and_nothing_else(masked_dataset):
    """Summed over an epoch: loss weights are only 0, 0.1 and 1, and 0.1 exactly as often as lower-case labels."""
    root, _, _ = masked_dataset
    dm, batches = epoch_batches(root, soft_mask_weight=WEIGHT)
    lower_labels = soft = full = 0
    for b in batches:
        inputs = dm.model_inputs(b)
        mask, labels = inputs["loss_mask"], inputs["labels"]
        assert set(mask.unique().tolist()) <= {0.0, float(np.float32(WEIGHT)), 1.0}
        assert int(labels[mask > 0].max()) < ord("a")  # fold_case: no lower-case base id (tags keep theirs)
        lower_labels += int((b["bases"] >= ord("a")).sum())  # padding (PAD) is never lower case
        soft += int(torch.isclose(mask, torch.tensor(WEIGHT)).sum())
        full += int((mask == 1.0).sum())
    assert soft == lower_labels > 0
    assert full + soft == sum(int(b["lengths"].sum()) for b in batches)


def test_cpu_and_gather_paths_agree_on_real_batches(masked_dataset):
    """model_inputs_cpu and model_inputs_gather give identical tensors on every batch, both layouts."""
    root, _, tags = masked_dataset
    dm, batches = epoch_batches(root)
    seq_length = dm.seq_length
    layouts = set()
    for b in batches:
        layouts.add(len(set(b["tag_lengths"].tolist())) == 1)
        for control_tags in (True, False):
            for fold_case, weight in ((True, WEIGHT), (False, WEIGHT), (True, None), (False, 0.0)):
                cpu = model_inputs_cpu(b, seq_length, control_tags, fold_case, weight)
                gather = model_inputs_gather(b, seq_length, control_tags, fold_case, weight)
                for name in ("tokens", "labels", "loss_mask", "position_ids"):
                    assert cpu[name].dtype == gather[name].dtype, name
                    assert torch.equal(cpu[name], gather[name]), (name, control_tags, fold_case, weight)
    # the tagged dataset mixes tag lengths in one batch (the per-row path) and not in others
    assert layouts == ({True, False} if tags else {True})


def _row_text(start: int, length: int, lower_from: int, lower_len: int, rc: bool) -> str:
    text = LAMBDA_SEQ[start : start + length]
    text = text[:lower_from] + text[lower_from : lower_from + lower_len].lower() + text[lower_from + lower_len :]
    return reverse_complement(text) if rc else text


ROWS = st.lists(
    st.tuples(
        st.integers(0, len(LAMBDA_SEQ) - 200),  # start in the genome
        st.integers(0, 120),  # bases (0: a filler row)
        st.integers(0, 120),  # lower-case run: first base
        st.integers(0, 120),  # ... and length
        st.booleans(),  # reverse-complemented
        st.sampled_from(["", *LINEAGES]),  # tag
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=150, deadline=None)
@given(
    ROWS,
    st.booleans(),
    st.booleans(),
    st.sampled_from([None, 0.0, WEIGHT, 1.0]),
    st.integers(0, 40),
)
def test_both_paths_equal_the_reference_on_real_bases(rows, control_tags, fold_case, weight, spare):
    """Any batch of real lambda slices with lower-case runs and tags: cpu == gather == the plain reference."""
    texts = [_row_text(s, n, lo, ln, rc) for s, n, lo, ln, rc, _ in rows]
    samples = [
        {
            "bases": np.frombuffer(text.encode(), np.uint8),
            "tag": row[5].encode(),
            "key": f"row{i}/0",
            "seq_id": f"row{i}",
            "start": 0,
            "rc": row[4],
        }
        for i, (text, row) in enumerate(zip(texts, rows))
    ]
    max_tag = max(len(t) for *_, t in rows)
    batch = collate_compact(samples, 120, max_tag)
    seq_length = 120 + (max_tag + 3 if control_tags else 2) + spare
    cpu = model_inputs_cpu(batch, seq_length, control_tags, fold_case, weight)
    gather = model_inputs_gather(tensors(batch), seq_length, control_tags, fold_case, weight)
    for i, (text, row) in enumerate(zip(texts, rows)):
        tag = row[5].encode() if control_tags else b""
        tokens, labels, mask = reference_row(text, tag, seq_length, fold_case, weight, control_tags)
        for out in (cpu, gather):
            assert torch.equal(out["tokens"][i], tokens)
            assert torch.equal(out["labels"][i], labels)
            assert torch.equal(out["loss_mask"][i], mask)
    assert torch.equal(cpu["position_ids"], gather["position_ids"])


def test_to_model_inputs_refuses_a_weight_outside_0_1():
    """soft_mask_weight must be None or in [0, 1], in the function and in the data module."""
    sample = {"bases": np.frombuffer(LAMBDA_SEQ[:4].lower().encode(), np.uint8), "tag": b"", "key": "a/0"}
    batch = collate_compact([{**sample, "seq_id": "a", "start": 0, "rc": False}], 4, 0)
    for bad in (-0.1, 1.5, "0.1"):
        with pytest.raises(ValueError, match="soft_mask_weight"):
            to_model_inputs(batch, 16, soft_mask_weight=bad)
    with pytest.raises(ValueError, match="soft_mask_weight"):
        GenomicWebDataModule("/nonexistent", soft_mask_weight=2.0)


def test_soft_mask_weight_on_an_upper_case_dataset_warns_and_weighs_every_base_1(tmp_path):
    """case="upper" stores no lower case: soft_mask_weight warns it has no effect and every base weighs 1."""
    fasta = write_fasta(tmp_path / "masked.fa", {"lam": MASKED})
    opts = PrepareOptions(seq_length=256, stride=STRIDE, split=(1, 0, 0), case="upper", progress=False)
    prepare([fasta], tmp_path / "out", opts)
    dm = GenomicWebDataModule(str(tmp_path / "out"), micro_batch_size=8, soft_mask_weight=WEIGHT)
    with pytest.warns(UserWarning, match="has no effect"):
        dm.setup("fit")
    for b in dm.train_dataloader():
        assert int(b["bases"].max()) < ord("a")
        mask = dm.model_inputs(b)["loss_mask"]
        assert set(mask.unique().tolist()) == {0.0, 1.0}
