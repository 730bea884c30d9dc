"""Packed samples as arrays: the documents of many packed samples found at once
(`PackedSamples.bins_documents`) and a batch laid out from `DocumentArrays` (`packed_layout.lay_out`),
each against a plain one-document-at-a-time reference written here."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.core.tokenizer import BOS_ID, COMPLEMENT_TABLE, EOS_ID, PAD_ID, SEP_ID
from bionemo_wds.load.batch import packed_native
from bionemo_wds.load.batch.hf import finish
from bionemo_wds.load.batch.labels import LabelRules
from bionemo_wds.load.batch.packed import packed_inputs_gather, packed_model_inputs
from bionemo_wds.load.batch.packed_layout import DocumentArrays, lay_out
from bionemo_wds.load.batch.to_torch import tensors
from bionemo_wds.load.plan.samples import PackedSamples, SequenceTable


def one_bin(table: PackedSamples, j: int, pass_: int) -> list[tuple[int, int, int]]:
    """(sequence, start, length) of packed sample `j`'s documents, one document at a time."""
    packing = table.packing(pass_)
    if j >= packing.n_bins:
        return []
    d0, o0 = int(packing.bin_doc[j]), int(packing.bin_offset[j])
    n = len(packing.seq)
    d1, o1 = (int(packing.bin_doc[j + 1]), int(packing.bin_offset[j + 1])) if j + 1 < packing.n_bins else (n, 0)
    out = []
    for d in range(d0, min(d1, n - 1) + 1):
        lo = o0 if d == d0 else 0
        hi = o1 if d == d1 else int(packing.length[d])
        if hi > lo:
            out.append((int(packing.seq[d]), int(packing.start[d]) + lo, hi - lo))
    return out


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 900), min_size=1, max_size=60),
    st.sampled_from([64, 200, 512]),
    st.sampled_from(["fixed", "random"]),
    st.integers(0, 3),
)
def test_documents_of_many_packed_samples_are_each_ones(lengths, seq_length, offsets, seed):
    """Every sample id of two passes asked at once, in a shuffled order: each id's documents are the
    ones its bin gives alone, in order (whole samples one each, unused packed samples none)."""
    n = len(lengths)
    table = PackedSamples(
        SequenceTable(np.asarray(lengths, dtype=np.int64), np.zeros(n, np.int64), 128),
        seq_length,
        np.full(n, 3, dtype=np.int64),
        offsets,
        seed,
    )
    rng = np.random.default_rng(seed)
    ids = rng.permutation(np.concatenate([np.arange(table.n_windows)] * 2)).astype(np.int64)
    passes = rng.integers(0, 2, len(ids)).astype(np.int64)
    docs = table.documents(ids, passes)
    assert (np.diff(docs.sample) >= 0).all()
    for i, (sample_id, pass_) in enumerate(zip(ids.tolist(), passes.tolist())):
        at = docs.sample == i
        got = list(zip(docs.seq[at].tolist(), docs.start[at].tolist(), docs.length[at].tolist()))
        if sample_id >= table.n_full:
            assert got == one_bin(table, sample_id - table.n_full, pass_)
        else:
            assert len(got) == 1


def reference_row(docs: list[tuple[bytes, bytes, bool]], seq_length: int, control_tags: bool) -> bytes:
    """A packed row written one document at a time: BOS (tag SEP) bases-on-their-strand EOS, then PAD."""
    out = b""
    for bases, tag, flip in docs:
        strand = bases[::-1].translate(COMPLEMENT_TABLE) if flip else bases
        out += bytes([BOS_ID]) + (tag + bytes([SEP_ID]) if control_tags else b"") + strand + bytes([EOS_ID])
    return out + bytes([PAD_ID]) * (seq_length - len(out))


def random_documents(seed: int, control_tags: bool, n: int = 6, seq_length: int = 400):
    """Rows of random documents (bases of any case with degenerate ones, several pieces each, tags of
    any length, flipped or not, rows without documents): (the rows as (bases, tag, flip), the
    `DocumentArrays`, the flips, the keys)."""
    rng = np.random.default_rng(seed)
    rows: list[list[tuple[bytes, bytes, bool]]] = []
    pieces, first, row_of, tags, flips, lengths = [], [0], [], [], [], []
    for i in range(n):
        row, used = [], 0
        while rng.random() < 0.8:
            m = int(rng.integers(0, 60))
            tag = (
                rng.choice(list(b"|d__Ab;p__C|"), int(rng.integers(0, 8))).astype(np.uint8).tobytes()
                if control_tags
                else b""
            )
            if used + m + len(tag) + 3 > seq_length:
                break
            bases = rng.choice(list(b"ACGTNacgtn"), m).astype(np.uint8).tobytes()
            cuts = sorted(rng.integers(0, m + 1, int(rng.integers(0, 3))).tolist())
            parts = [bases[a:b] for a, b in zip([0, *cuts], [*cuts, m])]
            flip = bool(rng.random() < 0.5)
            row.append((bases, tag, flip))
            pieces += [np.frombuffer(p, dtype=np.uint8) for p in parts]
            first.append(len(pieces))
            row_of.append(i)
            tags.append(tag)
            flips.append(flip)
            lengths.append(m)
            used += m + len(tag) + 3
        rows.append(row)
    k = len(row_of)
    keys = [f"d{d}" for d in range(k)]
    starts = np.arange(k, dtype=np.int64) * 10
    docs = DocumentArrays(
        np.asarray(row_of, dtype=np.int64),
        [f"s{d}" for d in range(k)],
        starts,
        np.asarray(lengths, dtype=np.int64),
        tags,
        pieces,
        np.asarray(first, dtype=np.int64),
        keys,
    )
    return rows, docs, np.asarray(flips, dtype=bool), keys


@pytest.mark.parametrize("kernel", [True, False])
@pytest.mark.parametrize("control_tags", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_lay_out_is_the_row_written_document_by_document(control_tags, seed, kernel, monkeypatch):
    """Documents of several pieces, tags of any length, flipped or not, rows without documents: the
    token matrix, the document columns and the row fields are those of the one-document-at-a-time
    layout, whether the C kernel lays the documents out (`packed_native.native_lay_out`) or Python does."""
    if kernel and packed_native.packed_kernel is None:
        pytest.skip("the C extension is not built")
    if not kernel:
        monkeypatch.setattr(packed_native, "packed_kernel", None)
    n, seq_length = 6, 400
    rows, docs, flips, keys = random_documents(seed, control_tags, n, seq_length)
    k = len(docs)
    row_of = docs.row.tolist()
    batch = lay_out(docs, flips, docs.tag, n, seq_length, control_tags)
    for i, row in enumerate(rows):
        assert batch["tokens"][i].tobytes() == reference_row(row, seq_length, control_tags)
        head = [len(tag) + 2 if control_tags else 1 for _, tag, _ in row]
        assert batch["doc_prefix"][i, : len(row)].tolist() == head
        assert batch["doc_tokens"][i, : len(row)].tolist() == [h + len(b) + 1 for h, (b, _, _) in zip(head, row)]
        assert not batch["doc_tokens"][i, len(row) :].any()
        assert batch["doc_rc"][i, : len(row)].tolist() == [f for _, _, f in row]
        assert batch["lengths"][i] == sum(len(b) for b, _, _ in row)
    assert batch["keys"] == [";".join(keys[d] for d in range(k) if row_of[d] == i) for i in range(n)]
    first = [row_of.index(i) if i in row_of else None for i in range(n)]
    assert batch["rc"].tolist() == [d is not None and bool(flips[d]) for d in first]
    assert batch["start"].tolist() == [int(docs.start[d]) if d is not None else 0 for d in first]
    assert batch["seq_id"] == [docs.seq_id[d] if d is not None else "" for d in first]


@pytest.mark.parametrize("control_tags", [True, False])
@pytest.mark.parametrize("mask_degenerate", [True, False])
@pytest.mark.parametrize(("fold_case", "weight"), [(True, None), (False, None), (False, 0.25), (True, 0.0)])
def test_packed_inputs_on_a_cpu_are_the_rules_applied_after(control_tags, mask_degenerate, fold_case, weight):
    """Random packed batches (tags, lower-case and degenerate bases, flipped documents): the CPU
    layout (loss mask from one translate of the labels, tag columns cleared, soft-mask weights, position
    ids joined from runs) equals the whole-batch tensor layout with `LabelRules.apply` after it."""
    rules = LabelRules(mask_degenerate_bases=mask_degenerate)
    for seed in range(4):
        _, docs, flips, _ = random_documents(seed, control_tags)
        compact = tensors(lay_out(docs, flips, docs.tag, 6, 400, control_tags))
        laid = packed_model_inputs(compact, fold_case, weight, rules)
        after = finish(packed_inputs_gather(compact, fold_case, weight), rules, False, packed=True)
        for key, value in after.items():
            assert torch.equal(laid[key], value), (key, seed)
        assert laid["loss_mask"].any()


@pytest.mark.parametrize("kernel", [True, False])
def test_a_document_past_the_row_is_named(kernel, monkeypatch):
    """A row whose documents need more than seq_length tokens: an error naming the document, from the
    C layout and from Python's."""
    if kernel and packed_native.packed_kernel is None:
        pytest.skip("the C extension is not built")
    if not kernel:
        monkeypatch.setattr(packed_native, "packed_kernel", None)
    bases = np.frombuffer(b"ACGTACGT", dtype=np.uint8)
    docs = DocumentArrays(
        np.zeros(2, np.int64),
        ["s", "s"],
        np.zeros(2, np.int64),
        np.array([8, 8]),
        [b"", b""],
        [bases, bases],
        np.arange(3, dtype=np.int64),
        ["near", "far"],
    )
    with pytest.raises(ValueError, match="document far"):
        lay_out(docs, np.zeros(2, dtype=bool), [b"", b""], 1, 12, control_tags=False)


@pytest.mark.skipif(packed_native.packed_kernel is None, reason="the C extension is not built")
def test_the_laying_kernel_refuses_documents_that_disagree_with_their_columns():
    """Pieces that hold more or fewer bases than a document's length, a tag of another length, a row
    outside the batch, a row's documents apart: a ValueError naming the document, never a write outside
    the matrix; a document past its row's end is reported by its number (`lay_out` names its key)."""
    piece = [np.frombuffer(b"ACGT", dtype=np.uint8)]

    def lay(length: int, prefix: int = 1, tag: bytes = b"", rows: tuple[int, ...] = (0,), n: int = 1, size: int = 20):
        k = len(rows)
        return packed_native.native_lay_out(
            n,
            size,
            np.array(rows, dtype=np.int64),
            np.full(k, length, dtype=np.int64),
            [prefix] * k,
            np.zeros(k, bool),
            [tag] * k,
            piece * k,
            np.arange(k + 1, dtype=np.int64),
        )

    laid = lay(4)  # BOS, ACGT, EOS, then PAD
    assert isinstance(laid, packed_native.Laid)
    assert laid.tokens[0].tobytes() == bytes([2]) + b"ACGT" + bytes([0]) + bytes([1]) * 14
    assert (laid.doc_tokens.tolist(), laid.doc_prefix.tolist(), laid.doc_rc.tolist()) == ([[6]], [[1]], [[False]])
    assert (laid.bases_of, laid.first, laid.past) == ([4], [0], [1])
    assert lay(4, rows=(0, 0, 0, 0), size=20) == 3  # 4 x 6 tokens: the fourth is past the row
    with pytest.raises(ValueError, match="document 0's pieces hold more bases than its length"):
        lay(3)
    with pytest.raises(ValueError, match="document 0's pieces hold fewer bases than its length"):
        lay(5)
    with pytest.raises(ValueError, match="document 0's tag is not 2 bytes"):
        lay(4, prefix=4, tag=b"x")
    with pytest.raises(ValueError, match="document 0's row, prefix or pieces fall outside the batch"):
        lay(4, rows=(1,))
    with pytest.raises(ValueError, match="document 2 is not next to its row's other documents"):
        lay(1, rows=(0, 1, 0), n=2)


@pytest.mark.skipif(packed_native.packed_kernel is None, reason="the C extension is not built")
@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 100), min_size=1, max_size=4),
    letters_only=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_flipped_pieces_are_complemented_by_the_table_for_every_byte(lengths, letters_only, seed):
    """A flipped document's pieces come out as `COMPLEMENT_TABLE` says for every byte value: pieces of
    letters only (the 32-byte vector blocks) and pieces holding any byte (blocks the kernel does byte
    by byte), at lengths on both sides of a block."""
    rng = np.random.default_rng(seed)
    low, high = (0x40, 0x80) if letters_only else (0, 256)
    pieces = [rng.integers(low, high, size=n, dtype=np.uint8) for n in lengths]
    size = sum(lengths) + 2
    one = np.ones(1, dtype=np.int64)
    first_piece = np.array([0, len(pieces)], dtype=np.int64)
    flip = np.ones(1, bool)
    laid = packed_native.native_lay_out(1, size, one * 0, one * (size - 2), [1], flip, [b""], pieces, first_piece)
    assert isinstance(laid, packed_native.Laid)
    flat = laid.tokens[0]
    table = np.frombuffer(COMPLEMENT_TABLE, dtype=np.uint8)
    want = table[np.concatenate(pieces)[::-1]]
    assert flat[1:-1].tobytes() == want.tobytes()
    assert (flat[0], flat[-1]) == (BOS_ID, EOS_ID)
