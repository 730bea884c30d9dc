"""The masked-LM kernels in C (`batch.mlm_kernel`, `batch.mlm_lay`): every draw and every laid cell equal to the numpy
code it replaces (`mlm.numpy_mask_tokens`, `mlm.lay_masks`), for every rule, id type and vocabulary;
and without the kernel, the numpy path with a warning that says so."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.load.batch import mlm_native
from bionemo_wds.load.batch.mlm import apply_masks, lay_on_cpu, mask_tokens, numpy_mask_tokens
from bionemo_wds.load.batch.mlm_rule import IGNORE_INDEX, MLM_NONE, MaskingRule, Vocabulary, id_dtype
from bionemo_wds.load.tokenize.registry import resolve_tokenizer

needs_kernel = pytest.mark.skipif(
    mlm_native.mlm_kernel is None or mlm_native.mlm_lay is None, reason="the C extensions are not built (no C compiler)"
)

#: The vocabularies the rules are drawn over: bytes with a mask token (the benchmark's), and families.
VOCABS = {
    "bytes": Vocabulary("bytes-with-mask", 256, 1, 5, frozenset(range(256)) - frozenset(b"ACGTNacgtn")),
    "caduceus": resolve_tokenizer("caduceus"),
    "nt": resolve_tokenizer("nt"),
    "dnabert6": resolve_tokenizer("dnabert6"),
    "dnabert3": resolve_tokenizer("dnabert3"),
}


def rules() -> st.SearchStrategy[tuple[str, MaskingRule]]:
    """A vocabulary's name and a masking rule over it (any probability, both replacements, the span
    where the vocabulary takes it)."""

    def rule(name: str, p: float, replace: str, span: bool | None) -> tuple[str, MaskingRule]:
        vocab = VOCABS[name]
        return name, MaskingRule.of(vocab, p, replace, span if vocab.overlapping else None)

    return st.builds(
        rule,
        st.sampled_from(sorted(VOCABS)),
        st.floats(0.001, 0.999),
        st.sampled_from(["bert", "mask"]),
        st.sampled_from([None, True, False]),
    )


@needs_kernel
@settings(max_examples=150, deadline=None)
@given(
    named=rules(),
    rows=st.integers(0, 6),
    width=st.integers(0, 300),
    id_type=st.sampled_from(["native", "uint8", "int16", "int32", "int64"]),
    specials=st.booleans(),
    by_length=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_kernels_draws_equal_numpys(named, rows, width, id_type, specials, by_length, seed):
    """Candidates as a matrix, or as one length a row (any int, negative or past the width too)."""
    name, rule = named
    rng = np.random.default_rng(seed)
    vocab = VOCABS[name]
    dtype = id_dtype(vocab.vocab_size) if id_type == "native" else np.dtype(id_type)
    top = min(vocab.vocab_size, np.iinfo(dtype).max + 1)
    ids = rng.integers(0, top, (rows, width)).astype(dtype)
    for r in range(rows):  # a tokenizer's rows end in padding, which the kernel skips undrawn
        if rule.pad_id < top and rng.random() < 0.5:
            ids[r, int(rng.integers(0, width + 1)) :] = rule.pad_id
    candidates = rng.random((rows, width)) < rng.random()
    if by_length:
        candidates = rng.integers(-2, width + 3, rows)
    salts = rng.integers(0, 2**63, rows, dtype=np.uint64) * np.uint64(2) + np.uint64(seed & 1)
    expected = numpy_mask_tokens(ids, candidates, salts, rule, specials)
    got = mask_tokens(ids, candidates, salts, rule, specials)
    assert got.dtype == expected.dtype
    np.testing.assert_array_equal(got, expected)
    previous = mlm_native.mlm_kernel.vector_path(False)  # the portable pass, as on a CPU without AVX2
    try:
        np.testing.assert_array_equal(mask_tokens(ids, candidates, salts, rule, specials), expected)
    finally:
        mlm_native.mlm_kernel.vector_path(previous)


@needs_kernel
def test_a_full_batch_of_bases_draws_what_numpy_draws(lambda_seq):
    """The benchmark's batch: 8 rows of 8,192 bases of lambda phage, BERT's rule, specials left out."""
    bases = np.frombuffer(lambda_seq.encode("ascii"), dtype=np.uint8)
    ids = np.stack([bases[i * 4000 : i * 4000 + 8192] for i in range(8)])
    rule = MaskingRule.of(VOCABS["bytes"])
    candidates = np.ones(ids.shape, dtype=bool)
    salts = np.arange(8, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    expected = numpy_mask_tokens(ids, candidates, salts, rule, True)
    np.testing.assert_array_equal(mask_tokens(ids, candidates, salts, rule, True), expected)
    assert 0.13 < (expected != MLM_NONE).mean() < 0.17


def numpy_lay(ids, labels, codes, starts, megatron):
    """`lay_on_cpu` with the kernel turned off: numpy's `lay_masks` (its warning silenced)."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(mlm_native, "mlm_kernel", None)
        m.setattr(mlm_native, "warn_missing_kernel", lambda: None)
        return lay_on_cpu(ids, labels, codes, starts, megatron)


@needs_kernel
@settings(max_examples=100, deadline=None)
@given(
    rows=st.integers(0, 5),
    seq_length=st.integers(0, 64),
    width=st.integers(0, 70),
    code_type=st.sampled_from(["int8", "int16", "int32"]),
    megatron=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_kernel_lays_masks_as_numpy_does(rows, seq_length, width, code_type, megatron, seed):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, 100, (rows, seq_length)).astype(np.int64)
    labels = np.where(rng.random((rows, seq_length)) < 0.2, IGNORE_INDEX, ids)
    codes = rng.integers(-2, 100, (rows, width)).astype(code_type)
    codes[rng.random((rows, width)) < 0.6] = MLM_NONE
    starts = rng.integers(0, seq_length + 2, rows).astype(np.int64)
    ids_np, labels_np = ids.copy(), labels.copy()
    weights_np, unmasked_np = numpy_lay(ids_np, labels_np, codes, starts, megatron)
    weights, unmasked = lay_on_cpu(ids, labels, codes, starts, megatron)
    np.testing.assert_array_equal(ids, ids_np)
    np.testing.assert_array_equal(labels, labels_np)
    np.testing.assert_array_equal(weights, weights_np)
    np.testing.assert_array_equal(unmasked, unmasked_np)  # Megatron's labels: the tokens before masking


def test_without_the_kernel_numpy_draws_and_lays_the_same_masks_and_says_so(monkeypatch):
    """Where the extension is not built: the same masks by numpy, and one warning naming the kernel."""
    rng = np.random.default_rng(7)
    rule = MaskingRule.of(VOCABS["caduceus"])
    ids = rng.integers(7, 12, (4, 500)).astype(np.int8)
    candidates = np.ones(ids.shape, dtype=bool)
    salts = rng.integers(0, 2**63, 4, dtype=np.uint64)
    inputs = {
        "input_ids": torch.from_numpy(ids.astype(np.int64)),
        "labels": torch.from_numpy(ids.astype(np.int64)),
        "position_ids": torch.arange(500).expand(4, 500),
    }
    with_kernel = mask_tokens(ids, candidates, salts, rule, True)
    laid = apply_masks({k: v.clone() for k, v in inputs.items()}, torch.from_numpy(with_kernel), torch.zeros(4), False)
    monkeypatch.setattr(mlm_native, "mlm_kernel", None)
    mlm_native.warn_missing_kernel.cache_clear()
    with pytest.warns(RuntimeWarning, match="mlm_kernel and mlm_lay .* are not built"):
        without = mask_tokens(ids, candidates, salts, rule, True)
    np.testing.assert_array_equal(without, with_kernel)
    again = apply_masks({k: v.clone() for k, v in inputs.items()}, torch.from_numpy(without), torch.zeros(4), False)
    for key in laid:
        assert torch.equal(laid[key], again[key]), key
    mlm_native.warn_missing_kernel.cache_clear()


@needs_kernel
def test_the_kernel_refuses_buffers_that_disagree_with_the_shape_it_is_told():
    """A buffer smaller than rows x width (or no random id to draw) is a ValueError, never a read past it."""
    kernel = mlm_native.mlm_kernel
    out = np.empty((1, 4), dtype=np.int16)
    table, salts = np.zeros(256, dtype=np.uint8), np.zeros(1, dtype=np.uint64)
    args = [out, 2, np.zeros((1, 4), np.uint8), 1, np.ones((1, 4), np.uint8), b"", salts, 1, 4, 100, 1, table]
    with pytest.raises(ValueError, match="ids holds 2 bytes, 4 needed"):
        kernel.draw(out, 2, np.zeros((1, 2), np.uint8), 1, *args[4:], np.arange(3), 5, True, 0.8, 0.9, True, 1)
    with pytest.raises(ValueError, match="random_ids is empty"):
        kernel.draw(*args, np.zeros(0, np.int64), 5, True, 0.8, 0.9, True, 1)
    with pytest.raises(ValueError, match="lengths holds 4 bytes, 8 needed"):
        kernel.draw(*args[:5], np.zeros(1, np.int32), *args[6:], np.arange(3), 5, True, 0.8, 0.9, True, 1)
    ids = np.zeros((2, 8), dtype=np.int64)
    with pytest.raises(ValueError, match="labels holds"):
        mlm_native.mlm_lay.lay(
            ids,
            np.zeros((1, 8), np.int64),
            np.zeros((2, 3), np.int16),
            2,
            np.zeros(2, np.int64),
            2,
            8,
            3,
            np.zeros(0, np.float32),
            np.zeros(0, np.int64),
        )
    with pytest.raises(ValueError, match="unmasked holds 0 bytes"):  # Megatron's labels need room
        mlm_native.mlm_lay.lay(
            ids,
            ids.copy(),
            np.zeros((2, 3), np.int16),
            2,
            np.zeros(2, np.int64),
            2,
            8,
            3,
            np.zeros((2, 8), np.float32),
            np.zeros(0, np.int64),
        )


@needs_kernel
@pytest.mark.parametrize("dtype", ["uint8", "int16", "int32", "int64"])
def test_rows_ending_in_padding_draw_every_cell_before_it(dtype):
    """The kernel skips a row's trailing padding undrawn (scanned back 32 bytes at a time): with every
    length of padding, for each id type, the draws of a near-certain rule equal numpy's, so not one
    cell before the padding is lost and none inside it is drawn."""
    vocab = VOCABS["nt"] if dtype != "uint8" else VOCABS["caduceus"]
    rule = MaskingRule.of(vocab, 0.999, "mask")
    width = 100
    first = min(rule.random_ids)
    ids = np.full((width + 1, width), first, dtype=dtype)
    for r in range(width + 1):
        ids[r, r:] = rule.pad_id  # row r: r ordinary ids, then padding
    lengths = np.full(width + 1, width, dtype=np.int64)
    salts = np.arange(width + 1, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    expected = numpy_mask_tokens(ids, lengths, salts, rule, True)
    np.testing.assert_array_equal(mask_tokens(ids, lengths, salts, rule, True), expected)
    assert (expected[ids == rule.pad_id] == MLM_NONE).all() and (expected[ids != rule.pad_id] != MLM_NONE).mean() > 0.99
