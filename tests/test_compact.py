"""The vectorised batch assembly against the per-window forms it replaced.

`compact.compact_batch`, `BlockRows.flips` and `planned.assemble` build batches without a Python
object per window; each is checked here against the plain form of the same definition: a
reverse complement per row (`reverse_complement_bases`), the scalar coin (`seeds.salted_flip`),
and `Window` views marked by the `reverse_complement` and `tag_dropout` stages then packed by
`collate_compact` (what the planned loader did before). The record checksum is checked against
`zlib.crc32`, whichever implementation `record_crc32` uses.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, IterableDataset

from bionemo_wds.compat.stages import Window, collate_compact, reverse_complement, tag_dropout
from bionemo_wds.core.seeds import flip_salt, key_crcs, salted_flip, salted_flips
from bionemo_wds.core.tokenizer import PAD_ID, reverse_complement_bases
from bionemo_wds.format import decode_record, encode_record, record_crc32
from bionemo_wds.lightning.epochs import in_process, in_process_ok
from bionemo_wds.load.batch import BatchSchema, PlannedRows, assemble
from bionemo_wds.load.batch.compact import compact_bases, compact_batch
from bionemo_wds.load.batch.hf import IGNORE_INDEX
from bionemo_wds.load.batch.model_inputs import model_inputs_gather, to_model_inputs
from bionemo_wds.load.batch.to_torch import tensors
from bionemo_wds.load.plan.progress import EpochState
from bionemo_wds.load.reader import MISSING, RecordCache
from bionemo_wds.load.rows import FILLER_ROWS, BlockRows
from tests.conftest import LAMBDA, read_fasta

# every letter the tokenizer keeps, both cases, and the specials a padded batch holds
ALPHABET = b"ACGTNRYSWKMBDHVUacgtnryswkmbdhvu"
LINEAGE = "|d__Bacteria;p__Pseudomonadota;c__Gammaproteobacteria;o__Enterobacterales|"


def reference_bases(parts: list[np.ndarray], flip: list[bool], width: int) -> np.ndarray:
    """The batch matrix row by row, as `collate_compact` built it before: one reverse complement
    per flipped row, PAD after each row."""
    out = np.full((len(parts), width), PAD_ID, dtype=np.uint8)
    for i, (part, f) in enumerate(zip(parts, flip)):
        out[i, : len(part)] = reverse_complement_bases(part) if f else part
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.tuples(st.integers(0, 90), st.booleans(), st.integers(0, 3)), max_size=12),
    st.integers(min_value=0, max_value=8),
    st.integers(0, 2**32 - 1),
)
def test_compact_bases_equals_a_reverse_complement_per_row(table_pass, rows, extra, seed):
    """Rows of one array or of pieces (a window cut at load spans several), flipped or not, padded;
    rows of any length around the C pass's 32-byte blocks."""
    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(ALPHABET, dtype=np.uint8)
    parts = [rng.choice(alphabet, size=length) for length, _, _ in rows]
    flip = [f for _, f, _ in rows]
    width = max((len(p) for p in parts), default=0) + extra
    assert np.array_equal(compact_bases(parts, flip, width), reference_bases(parts, flip, width))
    # no width: the longest row
    assert compact_bases(parts, flip).shape == (len(parts), max((len(p) for p in parts), default=0))
    # the same rows as pieces: cut where each row's third number says
    pieces = [tuple(np.array_split(part, cuts + 1)) if cuts else part for part, (_, _, cuts) in zip(parts, rows)]
    assert np.array_equal(compact_bases(pieces, flip, width), reference_bases(parts, flip, width))


def test_compact_bases_refuses_a_row_wider_than_the_batch():
    with pytest.raises(ValueError, match="row 1 has 5 bases, more than the batch width 4"):
        compact_bases([np.zeros(2, np.uint8), np.zeros(5, np.uint8)], [False, True], 4)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.text(alphabet="ACGTxyz_/0123456789", min_size=1, max_size=30), min_size=1, max_size=50),
    st.sampled_from([0.0, 1e-300, 2.0**-64, 0.25, 0.5, 0.3, 1 - 2.0**-53, 1.0]) | st.floats(0, 1),
    st.integers(min_value=0, max_value=2**64 - 1),
)
def test_salted_flips_are_the_scalar_coins(keys, p, salt):
    assert key_crcs(keys).tolist() == [zlib.crc32(k.encode()) for k in keys]
    assert salted_flips(key_crcs(keys), p, salt).tolist() == [salted_flip(k, p, salt) for k in keys]


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=5000))
def test_record_crc32_is_zlibs(data):
    assert record_crc32(data) == zlib.crc32(data)


def lambda_blocks(n_records: int = 6, per_record: int = 7, length: int = 300) -> list[BlockRows]:
    """Records of real bases (lambda phage, soft-masked in places, one short window per record),
    with lineage tags on some windows: encoded and decoded by the format's own functions."""
    (seq,) = read_fasta(LAMBDA).values()
    blocks = []
    for r in range(n_records):
        bases, starts, windows, tags = [], [], [], []
        for w in range(per_record):
            start = (r * per_record + w) * length
            piece = seq[start : start + (length if w else length // 3)]
            if w % 3 == 1:
                piece = piece[:40].lower() + piece[40:]
            bases.append(piece.encode())
            starts.append(start)
            windows.append(w)
            tags.append(LINEAGE if (r + w) % 2 else "")
        record = encode_record(bases, [f"lambda_{r}"] * per_record, starts, windows, tags)
        blocks.append(BlockRows(decode_record(record)))
    return blocks


def reference_assembly(planned: PlannedRows, window: int, max_tag: int, p: float, seed: int, epoch: int, drop: float):
    """What the planned loader's assembly was before it was vectorised: `Window` views (filler
    where the plan says), marked by the stages, packed by `collate_compact`."""
    windows = []
    for block, row, source, draw in zip(planned.blocks, planned.rows, planned.sources, planned.draws):
        w = Window(block, row)
        w.source, w.draw = source, draw
        windows.append(w)
    real = [w for w in windows if w.block is not FILLER_ROWS]
    state = EpochState(epoch)
    for _ in tag_dropout(drop, seed, state)(reverse_complement(p, seed, state)(iter(real))):
        pass
    batch = collate_compact(windows, window, max_tag)
    batch["filler"] = np.array([w.block is FILLER_ROWS for w in windows])
    batch["keys"] = [k if w.block is not FILLER_ROWS else "" for k, w in zip(batch["keys"], windows)]
    batch["dataset"] = np.array([w.source if w.block is not FILLER_ROWS else -1 for w in windows], dtype=np.int16)
    return batch


@pytest.mark.parametrize(("p", "drop"), [(0.5, 0.0), (0.5, 0.4), (1.0, 1.0), (0.0, 0.0), (0.3, 0.0)])
def test_assemble_equals_marked_window_views(p, drop):
    blocks = lambda_blocks()
    rng = np.random.default_rng(11)
    window, max_tag, seed, epoch = 300, len(LINEAGE) + 24, 5, 3
    items, expected = [], []
    for index in range(12):
        chosen = rng.integers(0, len(blocks), 8).tolist()
        rows = rng.integers(0, 7, 8).tolist()
        filler = rng.random(8) < 0.15
        # a mix's windows draw by their own dataset's (seed, pass); the rest by the pass's
        draws = [None if rng.random() < 0.5 else (int(rng.integers(0, 4)), int(rng.integers(0, 3))) for _ in range(8)]
        planned = PlannedRows(
            [FILLER_ROWS if f else blocks[c] for c, f in zip(chosen, filler)],
            [0 if f else r for r, f in zip(rows, filler)],
            [0 if f else c % 3 for c, f in zip(chosen, filler)],
            [None if f else d for d, f in zip(draws, filler)],
        )
        items.append((index, planned))
        expected.append(reference_assembly(planned, window, max_tag, p, seed, epoch, drop))
    got = list(assemble(BatchSchema(8, window, max_tag), p, seed, EpochState(epoch), drop)(iter(items)))
    assert [b.pop("index") for b in got] == list(range(12))
    flipped = 0
    for g, e in zip(got, expected):
        assert set(g) == set(e)
        for key, value in e.items():
            if isinstance(value, np.ndarray):
                assert g[key].dtype == value.dtype and np.array_equal(g[key], value), key
            else:
                assert list(g[key]) == list(value), key
        flipped += int(g["rc"].sum())
    assert (flipped > 0) == (p > 0)  # the comparison covers flipped rows whenever there are any


def test_block_coins_are_each_windows_scalar_coin():
    block = lambda_blocks(1)[0]
    salt = flip_salt(9, 2)
    assert block.flips(0.5, salt) == [salted_flip(k, 0.5, salt) for k in block.keys]
    assert block.keys == [f"lambda_0/{w}" for w in range(7)]
    for epoch in range(5):  # more passes than the block keeps coins for: still the right ones
        s = flip_salt(9, epoch)
        assert block.flips(0.5, s) == [salted_flip(k, 0.5, s) for k in block.keys]


def test_uniform_batches_expand_like_the_gather_form():
    """The whole-batch loss mask (every row a full window) and the cached position ids give what
    the row-free gather form gives; so does a batch with one short row."""
    blocks = lambda_blocks(2)
    parts = [blocks[0].bases(r) for r in (1, 2, 3)] + [blocks[1].bases(r) for r in (2, 4)]
    for rows in (parts, [*parts, blocks[1].bases(0)]):  # bases(0) is the short window
        compact = compact_batch(
            rows,
            [i % 2 == 0 for i in range(len(rows))],
            [b""] * len(rows),
            [False] * len(rows),
            [0] * len(rows),
            ["s"] * len(rows),
            ["k"] * len(rows),
            300,
            0,
        )
        for weight in (None, 0.25):
            cpu = to_model_inputs(compact, 310, True, soft_mask_weight=weight)
            gather = model_inputs_gather(tensors(compact), 310, True, soft_mask_weight=weight)
            for key in ("tokens", "labels", "loss_mask", "position_ids"):
                assert cpu[key].equal(gather[key]), key


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 300), min_size=1, max_size=6), st.booleans())
def test_hf_rows_of_any_lengths_mask_and_label_as_compared_columns(lengths, tags):
    """The hf batch of window rows of any lengths (short sequences end before the window): the
    attention mask is 1 exactly before each row's end (after its EOS), and every label column past a
    row's bases is -100, as the whole-batch comparisons define them."""
    (seq,) = read_fasta(LAMBDA).values()
    genome = np.frombuffer(seq[:2000].upper().encode(), dtype=np.uint8)
    rows = [genome[7 * i : 7 * i + m] for i, m in enumerate(lengths)]
    tag = [b"|kp|" if tags else b""] * len(rows)
    compact = compact_batch(
        rows,
        [False] * len(rows),
        tag,
        [False] * len(rows),
        [0] * len(rows),
        ["s"] * len(rows),
        ["k"] * len(rows),
        300,
        4,
    )
    out = to_model_inputs(compact, 310, True, batch_format="hf")
    p = 2 + (4 if tags else 0)  # BOS, the tag, SEP
    ends = np.array(lengths) + p + 1
    columns = np.arange(310)
    assert np.array_equal(out["attention_mask"].numpy(), (columns < ends[:, None]).astype(np.int64))
    labels = out["labels"].numpy()
    for i, m in enumerate(lengths):
        assert (labels[i, :p] == IGNORE_INDEX).all() and (labels[i, p + m :] == IGNORE_INDEX).all()
        assert labels[i, p : p + m].tolist() == rows[i].tolist()


class Numbers(IterableDataset):
    def __iter__(self):
        for i in range(5):
            yield {"x": np.arange(i, i + 3)}


def test_a_loader_without_workers_yields_what_its_dataloader_would():
    double = lambda b: {"x": b["x"] * 2}
    loader = DataLoader(Numbers(), batch_size=None, num_workers=0, collate_fn=double)
    assert in_process_ok(loader)
    got, want = list(in_process(loader)), list(iter(loader))
    assert (
        [b["x"].tolist() for b in got]
        == [b["x"].tolist() for b in want]
        == [[0, 2, 4], [2, 4, 6], [4, 6, 8], [6, 8, 10], [8, 10, 12]]
    )
    # anything the DataLoader does besides calling collate on the dataset's items: left to it
    assert not in_process_ok(DataLoader(Numbers(), batch_size=None, num_workers=1, collate_fn=double))
    assert not in_process_ok(DataLoader(Numbers(), batch_size=2, num_workers=0))
    assert not in_process_ok(DataLoader(Numbers(), batch_size=None, num_workers=0, pin_memory=True))
    assert not in_process_ok(DataLoader(list(range(4)), batch_size=None, num_workers=0))
    assert not in_process_ok(Numbers())


def test_the_record_cache_holds_a_budget_of_windows_least_recently_used_out():
    """Decoded records are kept by windows, not by count: records of one window (short contigs)
    cannot make a worker hold the whole split (the loader's memory stays flat as data grows)."""
    blocks = lambda_blocks(6)  # 7 windows each
    cache = RecordCache(budget=21)
    for r in range(3):
        assert cache.get(r) is MISSING
        assert cache.put(r, blocks[r]) is blocks[r]
    assert cache.held == 21 and all(r in cache for r in range(3))
    assert cache.get(0) is blocks[0]  # 0 is now the most recently used
    cache.put(3, blocks[3])  # 28 windows > 21: the least recently used (1) goes
    assert [r for r in range(4) if r in cache] == [0, 2, 3] and cache.held == 21
    cache.put(4, None)  # a damaged record counts as one window: 2 goes
    assert cache.get(4) is None and [r for r in range(5) if r in cache] == [0, 3, 4] and cache.held == 15
    big = RecordCache(budget=3)
    big.put(9, blocks[0])  # a record larger than the budget is still held, alone
    assert 9 in big and big.held == 7
    big.put(10, blocks[1])
    assert 9 not in big and 10 in big
