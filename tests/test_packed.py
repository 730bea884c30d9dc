"""Packed batches (`load.batch.packed`): the compact packed layout and the model inputs it expands to.

The reference is the unpacked layout (`model_inputs.to_model_inputs` of a `compact.compact_batch`):
every document of a packed row must read exactly as that document alone, laid out unpacked, so
labels never cross a document boundary and positions restart in each document; the boundary forms
(``seq_lens``, ``cu_seqlens``, `flat_cu_seqlens`, `document_mask`) are checked against the
documents they come from.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.core.tokenizer import BOS_ID, EOS_ID, PAD_ID, SEP_ID
from bionemo_wds.load.batch.compact import compact_batch
from bionemo_wds.load.batch.model_inputs import to_model_inputs
from bionemo_wds.load.batch.packed import (
    PackedDocument,
    compact_packed,
    document_mask,
    flat_cu_seqlens,
    packed_model_inputs,
    unpack_lengths,
)
from bionemo_wds.load.batch.packed_columns import CU_SEQLENS_PAD
from bionemo_wds.load.batch.to_torch import tensors
from bionemo_wds.load.plan.samples import PackedSamples, SequenceTable

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
MODEL_KEYS = ("tokens", "labels", "loss_mask", "position_ids")


def doc(bases: str, tag: bytes = b"", rc: bool = False, key: str = "k") -> PackedDocument:
    return PackedDocument(np.frombuffer(bases.encode(), dtype=np.uint8).copy(), tag, rc, "seq", 7, key)


def doc_tokens(d: PackedDocument, control_tags: bool) -> int:
    return len(d.bases) + (len(d.tag) + 3 if control_tags else 2)


def unpacked(d: PackedDocument, seq_length: int, control_tags: bool, fold_case: bool, weight: float | None) -> dict:
    """The document alone in the unpacked layout (the reference)."""
    batch = compact_batch([d.bases], [d.rc], [d.tag], [d.rc], [d.start], [d.seq_id], [d.key])
    return to_model_inputs(batch, seq_length, control_tags, fold_case, weight)


def segments(rows: list[list[PackedDocument]], seq_length: int, control_tags: bool) -> list[list[int]]:
    """Tokens of each document of each row, then the row's padding when there is any."""
    out = []
    for row in rows:
        lens = [doc_tokens(d, control_tags) for d in row]
        pad = seq_length - sum(lens)
        out.append(lens + ([pad] if pad else []))
    return out


def assert_equal(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert a.dtype == b.dtype, f"{what}: {a.dtype} != {b.dtype}"
    assert torch.equal(a.cpu(), b.cpu()), what


# --- a small batch worked by hand --------------------------------------------------------------------


def test_hand_made_batch():
    """Two documents with and without a tag (soft-masked last base), an empty row, a full row."""
    rows = [[doc("ACg", b"|x|"), doc("TT")], [], [doc("GGGGGGGGGGG")]]
    batch = compact_packed(rows, 16, control_tags=True)
    out = packed_model_inputs(batch, fold_case=True, soft_mask_weight=0.25)
    A, C, G, T, bar, x = (ord(c) for c in "ACGT|x")
    first = [BOS_ID, bar, x, bar, SEP_ID, A, C, G, EOS_ID, BOS_ID, SEP_ID, T, T, EOS_ID, PAD_ID, PAD_ID]
    assert out["tokens"][0].tolist() == first
    labels = [bar, x, bar, SEP_ID, A, C, G, EOS_ID, PAD_ID, SEP_ID, T, T, EOS_ID, PAD_ID, PAD_ID, PAD_ID]
    assert out["labels"][0].tolist() == labels
    assert out["loss_mask"][0].tolist() == [0, 0, 0, 0, 1, 1, 0.25, 0, 0, 0, 1, 1, 0, 0, 0, 0]
    assert out["position_ids"][0].tolist() == [*range(9), *range(5), 0, 1]
    assert out["tokens"][1].tolist() == [PAD_ID] * 16 and out["labels"][1].tolist() == [PAD_ID] * 16
    assert out["loss_mask"][1].sum() == 0 and out["position_ids"][1].tolist() == list(range(16))
    assert out["tokens"][2].tolist() == [BOS_ID, SEP_ID, *[G] * 11, EOS_ID, PAD_ID, PAD_ID]
    assert out["seq_lens"].tolist() == [[9, 5], [0, 0], [14, 0]]
    assert out["seq_lens"].dtype == torch.int32 and out["cu_seqlens"].dtype == torch.int32
    pad = CU_SEQLENS_PAD
    assert out["cu_seqlens"].tolist() == [[0, 9, 14], [0, pad, pad], [0, 14, pad]]
    cu, longest = flat_cu_seqlens(out)
    assert cu.tolist() == [0, 9, 14, 16, 32, 46, 48] and longest == 16
    assert unpack_lengths(batch) == [[9, 5], [], [14]]
    assert batch["keys"] == ["k;k", "", "k"]


def test_row_too_long_is_refused():
    with pytest.raises(ValueError, match="document far"):
        compact_packed([[doc("ACGT"), doc("ACGTACGT", key="far")]], 12, control_tags=False)


# --- properties over random documents ---------------------------------------------------------------

documents = st.builds(
    doc,
    st.text(alphabet="ACGTNacgtn", min_size=1, max_size=30),
    st.text(alphabet="|_;dpBacilo", max_size=9).map(str.encode),
    st.booleans(),
)
weights = st.sampled_from([None, 0.0, 0.1, 0.5, 1.0])


@settings(max_examples=200, deadline=None)
@given(d=documents, extra=st.integers(0, 12), control_tags=st.booleans(), fold_case=st.booleans(), weight=weights)
def test_one_document_row_is_the_unpacked_window(d, extra, control_tags, fold_case, weight):
    """A row holding one document: tokens, labels and loss mask equal the unpacked layout of the same
    window at the same seq_length; positions too, except in the padding, where they restart at 0."""
    seq_length = doc_tokens(d, control_tags) + extra
    got = packed_model_inputs(compact_packed([[d]], seq_length, control_tags), fold_case, weight)
    ref = unpacked(d, seq_length, control_tags, fold_case, weight)
    for key in ("tokens", "labels", "loss_mask"):
        assert_equal(got[key], ref[key], key)
    n = doc_tokens(d, control_tags)
    assert got["position_ids"][0, :n].tolist() == ref["position_ids"][0, :n].tolist()
    assert got["position_ids"][0, n:].tolist() == list(range(extra))


@st.composite
def packed_rows(draw):
    rows = draw(st.lists(st.lists(documents, max_size=4), min_size=1, max_size=4))
    control_tags = draw(st.booleans())
    longest = max(sum(doc_tokens(d, control_tags) for d in row) for row in rows)
    return rows, max(1, longest + draw(st.integers(0, 6))), control_tags


@settings(max_examples=200, deadline=None)
@given(rows_st=packed_rows(), fold_case=st.booleans(), weight=weights)
def test_every_document_reads_as_alone(rows_st, fold_case, weight):
    """Each document of a packed row equals its unpacked layout at a seq_length of its own tokens
    (so its last label is PAD, not the next document's BOS, and its positions count from 0); the
    padding after the documents is PAD with PAD labels, no loss, positions from 0."""
    rows, seq_length, control_tags = rows_st
    out = packed_model_inputs(compact_packed(rows, seq_length, control_tags), fold_case, weight)
    for i, row in enumerate(rows):
        pos = 0
        for d in row:
            n = doc_tokens(d, control_tags)
            ref = unpacked(d, n, control_tags, fold_case, weight)
            for key in MODEL_KEYS:
                assert_equal(out[key][i, pos : pos + n], ref[key][0], key)
            assert out["tokens"][i, pos + n - 1] == EOS_ID and out["labels"][i, pos + n - 1] == PAD_ID
            assert torch.equal(out["labels"][i, pos : pos + n - 1], out["tokens"][i, pos + 1 : pos + n])
            pos += n
        assert (out["tokens"][i, pos:] == PAD_ID).all() and (out["labels"][i, pos:] == PAD_ID).all()
        assert (out["loss_mask"][i, pos:] == 0).all()
        assert out["position_ids"][i, pos:].tolist() == list(range(seq_length - pos))


@settings(max_examples=200, deadline=None)
@given(rows_st=packed_rows())
def test_boundaries(rows_st):
    """``seq_lens``/``cu_seqlens`` list the documents (0 / `CU_SEQLENS_PAD` after a row's last);
    `flat_cu_seqlens` the documents and each row's padding over the flattened batch, ending at
    rows x seq_length; `document_mask` is causal within each document (and within the padding)."""
    rows, seq_length, control_tags = rows_st
    out = packed_model_inputs(compact_packed(rows, seq_length, control_tags))
    width = max(1, max(len(r) for r in rows))
    assert out["seq_lens"].shape == (len(rows), width) and out["cu_seqlens"].shape == (len(rows), width + 1)
    for i, row in enumerate(rows):
        lens = [doc_tokens(d, control_tags) for d in row]
        assert out["seq_lens"][i].tolist() == lens + [0] * (width - len(lens))
        assert out["cu_seqlens"][i].tolist() == [0, *np.cumsum(lens).tolist()] + [CU_SEQLENS_PAD] * (width - len(lens))
    segs = segments(rows, seq_length, control_tags)
    flat = [s for row in segs for s in row]
    cu, longest = flat_cu_seqlens(out)
    assert cu.dtype == torch.int32
    assert cu.tolist() == [0, *np.cumsum(flat).tolist()] and cu[-1] == len(rows) * seq_length
    assert longest == max(flat)
    mask = document_mask(out["position_ids"])
    causal = np.tril(np.ones((seq_length, seq_length), dtype=bool))
    for i, row_segs in enumerate(segs):
        seg = np.repeat(np.arange(len(row_segs)), row_segs)
        expected = (seg[:, None] == seg[None, :]) & causal
        assert (mask[i].numpy() == expected).all()


@pytest.mark.parametrize("device", DEVICES)
@settings(max_examples=60, deadline=None)
@given(rows_st=packed_rows(), fold_case=st.booleans(), weight=weights)
def test_tensor_batches_give_the_same_inputs(device, rows_st, fold_case, weight):
    """The batch as torch tensors (what the data modules hand over, on the CPU or the GPU) gives what
    its numpy form gives, on the tensors' device."""
    rows, seq_length, control_tags = rows_st
    batch = compact_packed(rows, seq_length, control_tags)
    ref = packed_model_inputs(batch, fold_case, weight)
    moved = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in tensors(batch).items()}
    got = packed_model_inputs(moved, fold_case, weight)
    for key in ref:
        assert got[key].device.type == device, key
        assert_equal(got[key], ref[key], key)
    mask = document_mask(got["position_ids"])
    assert mask.device.type == device
    assert torch.equal(mask.cpu(), document_mask(ref["position_ids"]))
    cu, longest = flat_cu_seqlens(got)
    cu_ref, longest_ref = flat_cu_seqlens(ref)
    assert cu.device.type == device and cu.cpu().tolist() == cu_ref.tolist() and longest == longest_ref


def test_packed_samples_lay_out_every_base_once():
    """A pass of `PackedSamples` laid out by `compact_packed`: every row fits seq_length, the bases
    between each document's SEP and EOS are its stretch of the source, and together they are every
    base of every sequence once; whole samples are full rows (no PAD)."""
    rng = np.random.default_rng(3)
    lengths = np.maximum(rng.lognormal(np.log(150), 1.0, 200).astype(np.int64), 1)
    sources = [rng.choice(np.frombuffer(b"ACGTacgtN", dtype=np.uint8), n) for n in lengths.tolist()]
    tags = [b"|t%d|" % (i % 13) for i in range(len(lengths))]
    seq_length = 256
    headers = np.asarray([3 + len(t) for t in tags], dtype=np.int64)
    table = PackedSamples(SequenceTable(lengths, headers - 3, 64), seq_length, headers, "random", 9)
    for pass_ in (0, 1):
        ids = np.arange(table.n_windows, dtype=np.int64)
        docs = table.documents(ids, np.full(len(ids), pass_, dtype=np.int64))
        rows: list[list[PackedDocument]] = [[] for _ in ids]
        for i, s, a, n in zip(docs.sample.tolist(), docs.seq.tolist(), docs.start.tolist(), docs.length.tolist()):
            rows[i].append(PackedDocument(sources[s][a : a + n], tags[s], False, f"s{s}", a, f"s{s}:{a}"))
        batch = compact_packed(rows, seq_length, control_tags=True)
        tokens = batch["tokens"]
        seen = [np.zeros(n, dtype=np.int64) for n in lengths.tolist()]
        for i, row in enumerate(rows):
            pos = 0
            for d, size, prefix in zip(row, batch["doc_tokens"][i].tolist(), batch["doc_prefix"][i].tolist()):
                assert bytes(tokens[i, pos + prefix : pos + size - 1]) == d.bases.tobytes()
                s = int(d.seq_id[1:])
                assert sources[s][d.start : d.start + len(d.bases)].tobytes() == d.bases.tobytes()
                seen[s][d.start : d.start + len(d.bases)] += 1
                pos += size
        assert all((c == 1).all() for c in seen)
        assert not (tokens[: table.n_full] == PAD_ID).any()
