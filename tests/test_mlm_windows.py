"""The masked-LM ``hf`` batch of window rows in one pass (`mlm_windows.masked_window_inputs`, the path
`SampleOptions.model_inputs` takes on a CPU): every key and cell equal to the general path's (the
causal ``hf`` layout, then `mlm.apply_masks` over it), with degenerate and soft-masked bases, tags,
short rows and every label rule; and None wherever the general path must run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.core.tokenizer import PAD_ID
from bionemo_wds.load.batch import mlm_native
from bionemo_wds.load.batch.hf import IGNORE_INDEX
from bionemo_wds.load.batch.labels import LabelRules
from bionemo_wds.load.batch.mlm import apply_masks, mask_tokens, row_salts
from bionemo_wds.load.batch.mlm_rule import MaskingRule, Vocabulary
from bionemo_wds.load.batch.mlm_windows import masked_window_inputs
from bionemo_wds.load.batch.model_inputs import to_model_inputs

needs_kernel = pytest.mark.skipif(mlm_native.mlm_lay is None, reason="the C extension is not built (no C compiler)")

#: Byte ids with a mask token (the benchmark's masked-LM vocabulary): int16 codes.
MASKED_BYTES = Vocabulary("bytes-with-mask", 256, PAD_ID, 5, frozenset(range(256)) - frozenset(b"ACGTNacgtn"))


def window_batch(genome: str, rows: int, width: int, tag: int, rng: np.random.Generator) -> dict:
    """A compact batch of `rows` windows of lambda phage: some soft-masked (lower case) stretches, some
    N and other IUPAC letters, rows shorter than `width` (PAD after), one tag length for every row."""
    bases = np.full((rows, width), PAD_ID, dtype=np.uint8)
    lengths = rng.integers(max(1, width // 2), width + 1, rows)
    lengths[0] = width
    for r, n in enumerate(lengths):
        start = int(rng.integers(0, len(genome) - width))
        row = np.frombuffer(genome[start : start + n].encode("ascii"), dtype=np.uint8).copy()
        if rng.random() < 0.5:
            a = int(rng.integers(0, n))
            row[a : a + int(rng.integers(1, 40))] |= 0x20  # soft-masked
        for at in rng.integers(0, n, int(rng.integers(0, 4))):
            row[at] = rng.choice(list(b"NnRY"))
        bases[r, :n] = row
    tags = np.frombuffer(b"d__Viruses;k__" * 4, dtype=np.uint8)[: max(tag, 0)]
    return {
        "bases": bases,
        "lengths": lengths.astype(np.int32),
        "tags": np.tile(tags, (rows, 1)),
        "tag_lengths": np.full(rows, tag, dtype=np.int32),
        "keys": [f"lambda/{r}" for r in range(rows)],
    }


def general_path(
    batch: dict, seq_length: int, control_tags: bool, case: tuple, rules: LabelRules, codes, megatron: bool = False
) -> dict:
    """The causal hf layout, then the masks laid over it (the path for every other batch)."""
    out = to_model_inputs(batch, seq_length, control_tags, *case, rules, "hf")
    first = batch["tag_lengths"].astype(np.int64) + 2 if control_tags else np.ones(len(codes), dtype=np.int64)
    return apply_masks(out, torch.from_numpy(codes), torch.from_numpy(first), megatron)


@needs_kernel
@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 6),
    width=st.integers(1, 300),
    tag=st.integers(0, 20),
    control_tags=st.booleans(),
    fold_case=st.booleans(),
    weight=st.sampled_from([None, 0.0, 1.0]),
    mask_degenerate=st.booleans(),
    uppercase=st.booleans(),
    spare=st.integers(1, 4),
    p=st.floats(0.05, 0.9),
    replace=st.sampled_from(["bert", "mask"]),
    megatron=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_one_pass_equals_the_general_path(
    lambda_seq,
    rows,
    width,
    tag,
    control_tags,
    fold_case,
    weight,
    mask_degenerate,
    uppercase,
    spare,
    p,
    replace,
    megatron,
    seed,
):
    """Either batch format (hf; Megatron's: the unmasked tokens as labels and a loss mask)."""
    rng = np.random.default_rng(seed)
    batch = window_batch(lambda_seq, rows, width, tag, rng)
    seq_length = width + (tag + 2 if control_tags else 1) + spare
    rules = LabelRules(mask_degenerate_bases=mask_degenerate, uppercase_labels=uppercase)
    rule = MaskingRule.of(MASKED_BYTES, p, replace)
    codes = mask_tokens(batch["bases"], batch["lengths"], row_salts(batch["keys"], seed), rule, specials=True)
    case = (fold_case, weight)
    want = general_path(batch, seq_length, control_tags, case, rules, codes, megatron)
    got = masked_window_inputs(batch, seq_length, control_tags, *case, rules, codes, megatron)
    assert got is not None and sorted(got) == sorted(want)
    for key in want:
        assert torch.equal(got[key], want[key]), key
    predicted = got["loss_mask"].sum() if megatron else (got["labels"] != IGNORE_INDEX).sum()
    assert predicted <= (codes != -1).sum()


@needs_kernel
def test_a_benchmark_sized_batch_equals_the_general_path(lambda_seq):
    """8 rows of 8,192 bases (the benchmark's batch), BERT's rule: about 15% of the bases predicted."""
    rng = np.random.default_rng(3)
    batch = window_batch(lambda_seq, 8, 8192, 0, rng)
    rule = MaskingRule.of(MASKED_BYTES)
    codes = mask_tokens(batch["bases"], batch["lengths"], row_salts(batch["keys"], 11), rule, specials=True)
    want = general_path(batch, 8194, False, (True, None), LabelRules(), codes)
    got = masked_window_inputs(batch, 8194, False, True, None, LabelRules(), codes)
    for key in want:
        assert torch.equal(got[key], want[key]), key
    assert 0.13 < int((got["labels"] != IGNORE_INDEX).sum()) / int(batch["lengths"].sum()) < 0.17


def test_where_the_one_pass_does_not_apply_it_says_none(lambda_seq, monkeypatch):
    """Rows of different tag lengths, a minimum share of real bases, codes that are not over the bases,
    and no C extension: None, and the general path runs."""
    rng = np.random.default_rng(5)
    batch = window_batch(lambda_seq, 3, 100, 4, rng)
    rule = MaskingRule.of(MASKED_BYTES)
    codes = mask_tokens(batch["bases"], batch["lengths"], row_salts(batch["keys"], 1), rule, specials=True)
    args = (batch, 110, True, True, None)
    uneven = dict(batch, tag_lengths=np.array([4, 3, 4], dtype=np.int32))
    assert masked_window_inputs(uneven, *args[1:], LabelRules(), codes) is None
    assert masked_window_inputs(*args, LabelRules(min_real_fraction=0.5), codes) is None
    assert masked_window_inputs(*args, LabelRules(), codes[:, :50]) is None
    assert masked_window_inputs(*args, LabelRules(), None) is None  # not a masked-LM batch
    monkeypatch.setattr(mlm_native, "mlm_lay", None)
    assert masked_window_inputs(*args, LabelRules(), codes) is None
