"""Packed rows of bytes expanded by the C kernel (`packed_native`, the path `packed.packed_inputs_cpu`
takes for the usual packed batch): every key and cell equal to the numpy path's, for tags or none,
degenerate bases masked or not, rows full or padded; the kernel refuses rows whose documents do not
fit and buffers smaller than it is told."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.load.batch import packed_native
from bionemo_wds.load.batch.labels import LabelRules
from bionemo_wds.load.batch.packed import PackedDocument, compact_packed, packed_model_inputs

needs_kernel = pytest.mark.skipif(packed_native.packed_kernel is None, reason="the C extension is not built")


def numpy_path(batch: dict, rules: LabelRules) -> dict:
    """`packed_model_inputs` with the kernel turned off: numpy's passes."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(packed_native, "packed_kernel", None)
        return packed_model_inputs(batch, rules=rules)


def assert_same(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for key, value in want.items():
        assert got[key].dtype == value.dtype and torch.equal(got[key], value), key


def genome_rows(genome: str, rows: int, docs: int, size: int, seq_length: int, control_tags: bool, seed: int):
    """Rows of up to `docs` pieces of lambda phage (some with an N or another IUPAC letter), each with
    a lineage tag, as many as fit in `seq_length`."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(rows):
        row, used = [], 0
        for d in range(int(rng.integers(0, docs + 1))):
            n = int(rng.integers(1, size + 1))
            start = int(rng.integers(0, len(genome) - n))
            bases = np.frombuffer(genome[start : start + n].encode("ascii"), dtype=np.uint8).copy()
            if rng.random() < 0.3:
                bases[int(rng.integers(0, n))] = rng.choice(list(b"NRYW"))
            tag = b"d__Viruses;p__Uroviricota"[: int(rng.integers(0, 26))]
            need = n + (len(tag) + 3 if control_tags else 2)
            if used + need > seq_length:
                break
            used += need
            row.append(PackedDocument(bases, tag, bool(rng.random() < 0.5), "lambda", start, f"lambda/{r}/{d}"))
        out.append(row)
    return out


@needs_kernel
@settings(max_examples=80, deadline=None)
@given(
    rows=st.integers(1, 5),
    docs=st.integers(0, 6),
    size=st.integers(1, 80),
    spare=st.integers(0, 40),
    control_tags=st.booleans(),
    mask_degenerate=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_kernel_expands_as_numpy_does(lambda_seq, rows, docs, size, spare, control_tags, mask_degenerate, seed):
    seq_length = docs * (size + 28) // 2 + spare + 1
    batch = compact_packed(
        genome_rows(lambda_seq, rows, docs, size, seq_length, control_tags, seed), seq_length, control_tags
    )
    rules = LabelRules(mask_degenerate_bases=mask_degenerate)
    got = packed_model_inputs(batch, rules=rules)
    assert_same(got, numpy_path(batch, rules))
    sizes, prefix = batch["doc_tokens"], batch["doc_prefix"]
    assert packed_native.native_packed_inputs(batch["tokens"], sizes, prefix, mask_degenerate) is not None


@needs_kernel
def test_a_benchmark_sized_batch_expands_as_numpy_does(lambda_seq):
    """8 rows of 8,192 tokens, full of lambda phage documents of up to 3 kb."""
    batch = compact_packed(genome_rows(lambda_seq, 8, 40, 3000, 8192, True, 3), 8192, True)
    assert_same(packed_model_inputs(batch), numpy_path(batch, LabelRules()))


@needs_kernel
@pytest.mark.parametrize("mask_degenerate", [True, False])
def test_every_byte_as_a_label_is_trained_as_the_label_tables_say(mask_degenerate):
    """The kernel's label rules (compares) against `labels.TRAINED_TABLES` (numpy's table), every byte."""
    every = PackedDocument(np.arange(256, dtype=np.uint8), b"", False, "all", 0, "all")
    batch = compact_packed([[every]], 260, False)
    rules = LabelRules(mask_degenerate_bases=mask_degenerate)
    assert_same(packed_model_inputs(batch, rules=rules), numpy_path(batch, rules))


@needs_kernel
def test_the_kernel_refuses_what_does_not_fit():
    kernel = packed_native.packed_kernel
    raw = np.ones((1, 8), np.uint8)
    out = [np.empty((1, 8), np.int64), np.empty((1, 8), np.int64), np.empty((1, 8), np.float32)]
    positions = np.empty((1, 8), np.int64)
    sizes, prefix = np.array([[5, 4]], np.int64), np.array([[1, 1]], np.int64)
    with pytest.raises(ValueError, match="packed sample 0: its documents take more than 8 tokens"):
        kernel.packed_inputs(raw, sizes, prefix, 1, 8, 2, True, *out, positions)
    with pytest.raises(ValueError, match="position_ids holds 32 bytes, 64 needed"):
        kernel.packed_inputs(raw, sizes[:, :1], prefix[:, :1], 1, 8, 1, True, *out, positions[:, :4])
