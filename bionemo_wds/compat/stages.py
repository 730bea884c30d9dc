"""The stage chain, in the shape of `webdataset/filters.py`: one form for every loader.

    untuple -> decode_sample -> shuffle -> reverse_complement -> tag_dropout -> batch

Each stage is a generator function ``stage(src, ...)``; `pipelinefilter` curries it so that
``stage(...)`` (without `src`) is a composable a `WebDataModule` pipeline of your own can hold.
The stages are wrappers: a window's strand and tag dropout are drawn by `load.batch.draws` and a
batch is written by `load.batch.compact`, the functions `GenomicDataset` builds its batches with
(`load.batch.assemble`), so the same window gets the same strand and tag either way.

A window travels as a `Window`: a read-only mapping view of one row of a decoded record
(``key``, ``seq_id``, ``start``, ``bases``, ``tag``, ``rc``), so no bases are copied and no dict
is built per window until `collate_compact` copies each row once into the batch. Reverse
complement only marks the view; its bases are complemented when read. Stages also take plain dicts
with those keys. Every random choice comes from `bionemo_wds.core.seeds`: the shuffle from the
``shuffle`` stream of (seed, epoch, rank, worker), the reverse-complement coin from
(seed, epoch, window key), so it never depends on how windows are scheduled across workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np
from webdataset.filters import pipelinefilter

from bionemo_wds.core.seeds import flip_salt, python_rng, tag_salt
from bionemo_wds.core.tokenizer import reverse_complement_bases
from bionemo_wds.load.batch.compact import compact_batch
from bionemo_wds.load.batch.draws import dropped_tag, key_flip, row_flip
from bionemo_wds.load.plan.progress import EpochState
from bionemo_wds.load.record_stream import iter_blocks
from bionemo_wds.load.rows import BlockRows
from bionemo_wds.load.shard_errors import ShardErrorPolicy
from bionemo_wds.load.transfer import chunks
from bionemo_wds.load.world import Worker

T = TypeVar("T")

#: The fields of a window, as a mapping.
WINDOW_FIELDS = ("key", "seq_id", "start", "bases", "tag", "rc")


class Window(Mapping):
    """One window: row `row` of a decoded record, on the strand `rc` says."""

    __slots__ = ("_key", "_tag", "block", "draw", "rc", "row", "source")

    def __init__(self, block: BlockRows, row: int, rc: bool = False):
        self.block, self.row, self.rc = block, row, rc
        self._key: str | None = None
        self._tag: bytes | None = None  # set by tag dropout; None: the record's tag
        self.source = 0  # the dataset it comes from (several are mixed in `load.plan.mixing`)
        # (seed, epoch) its random draws (RC coin, tag dropout) come from, when not the pass's own:
        # a mixed dataset's window draws by its stream's seed and pass, so each repeat draws afresh
        self.draw: tuple[int, int] | None = None

    @property
    def key(self) -> str:
        """``<seq_id>/<window>``: the window's identity across the dataset."""
        if self._key is None:
            self._key = self.block.keys[self.row]
        return self._key

    @property
    def seq_id(self) -> str:
        return self.block.seq_id[self.row]

    @property
    def start(self) -> int:
        return self.block.start[self.row]

    @property
    def tag(self) -> bytes:
        """The control tag (after tag dropout, when a stage dropped some or all of it)."""
        return self.block.tag[self.row] if self._tag is None else self._tag

    @tag.setter
    def tag(self, value: bytes) -> None:
        self._tag = value

    @property
    def stored_bases(self) -> np.ndarray:
        """The bases as stored (forward strand), a view into the record."""
        return self.block.bases(self.row)

    @property
    def bases(self) -> np.ndarray:
        """The bases on this window's strand (a new array when reverse-complemented)."""
        return reverse_complement_bases(self.stored_bases) if self.rc else self.stored_bases

    def __getitem__(self, name: str) -> Any:
        if name not in WINDOW_FIELDS:
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(WINDOW_FIELDS)

    def __len__(self) -> int:
        return len(WINDOW_FIELDS)

    def __repr__(self) -> str:
        return f"Window({self.key!r}, start={self.start}, {len(self.stored_bases)} bases, rc={self.rc})"


def untuple(src: Iterable[Any]) -> Iterator[Any]:
    """``(x,)`` -> ``x``; longer tuples pass unchanged. A plain stage: use it uncalled, as upstream does."""
    for sample in src:
        yield sample[0] if isinstance(sample, tuple) and len(sample) == 1 else sample


def _decode_sample(src: Iterable[Any], policy: ShardErrorPolicy | None = None) -> Iterator[Window]:
    """Records (bytes, or ``(record, key, url)`` from `reading.read_records`) -> one `Window` per window."""
    for block in iter_blocks(src, policy):
        rows = BlockRows(block)
        for row in range(len(rows)):
            yield Window(rows, row)


def _shuffle(
    src: Iterable[T],
    bufsize: int = 1000,
    initial: int = 100,
    seed: int = 0,
    epoch: EpochState | None = None,
    rank: int = 0,
) -> Iterator[T]:
    """Buffer shuffle as webdataset's (output starts once `initial` items are in, one out per two in
    while the buffer grows to `bufsize`, then one out per one in), drawn from the ``shuffle`` stream
    of (seed, epoch, rank, worker). ``bufsize=0`` keeps the order."""
    if bufsize <= 0:
        yield from src
        return
    rng = python_rng(seed, "shuffle", epoch.epoch if epoch else 0, rank, Worker.detect().id)
    draw = rng.random  # int(random() * n) costs a third of randrange(n)
    buf: list[T] = []
    initial = min(initial, bufsize)
    for seen, item in enumerate(src, 1):
        buf.append(item)
        if len(buf) < initial or (len(buf) < bufsize and seen % 2):
            continue
        k = int(draw() * len(buf))
        buf[k], buf[-1] = buf[-1], buf[k]
        yield buf.pop()
    while buf:
        k = int(draw() * len(buf))
        buf[k], buf[-1] = buf[-1], buf[k]
        yield buf.pop()


def _reverse_complement(
    src: Iterable[Any], p: float = 0.5, seed: int = 0, epoch: EpochState | None = None
) -> Iterator[Any]:
    """Flip each window to the other strand with probability `p`, decided by (seed, epoch, key)
    (`seeds.flips`); tags stay as they are. A `Window` is only marked; a dict gets new bases."""
    if p <= 0:
        yield from src
        return
    salt = flip_salt(seed, epoch.epoch if epoch else 0)
    for sample in src:
        if isinstance(sample, Window):
            if row_flip(sample.block, sample.row, p, salt if sample.draw is None else flip_salt(*sample.draw)):
                sample.rc = not sample.rc
        elif key_flip(sample["key"], p, salt):
            sample = {**sample, "bases": reverse_complement_bases(sample["bases"]), "rc": not sample["rc"]}
        yield sample


def _tag_dropout(src: Iterable[Any], p: float = 0.0, seed: int = 0, epoch: EpochState | None = None) -> Iterator[Any]:
    """Drop control tags (or lineage ranks) with probability `p`, seeded by (seed, epoch, window key)
    (`dropped_tag`), so a resumed epoch drops the same ones. A `Window` keeps its record; a dict is copied."""
    if p <= 0:
        yield from src
        return
    salt = tag_salt(seed, epoch.epoch if epoch else 0)
    for sample in src:
        if isinstance(sample, Window):
            sample.tag = dropped_tag(sample.tag, sample.key, p, salt if sample.draw is None else tag_salt(*sample.draw))
        else:
            sample = {**sample, "tag": dropped_tag(sample["tag"], sample["key"], p, salt)}
        yield sample


def collate_compact(samples: list[Any], window: int | None = None, max_tag: int | None = None) -> dict[str, Any]:
    """Windows (`Window` views or dicts) -> a compact batch of numpy arrays (`compact.compact_batch`):
    uint8 bases and tags padded with PAD, lengths, reverse-complement flags, starts, seq ids and
    keys. This is what crosses the worker boundary, and `model_inputs.to_model_inputs` expands it.
    A `Window` marked for reverse complement is flipped as its bases are copied in."""
    views = [s for s in samples if isinstance(s, Window)]
    if len(views) == len(samples):  # the hot path: by attribute, the stored bases and the strand
        rc = [w.rc for w in views]
        parts, flip = [w.stored_bases for w in views], rc
        fields = [(w.tag, w.key, w.seq_id, w.start) for w in views]
    else:
        rc = [bool(s["rc"]) if not isinstance(s, Window) else s.rc for s in samples]
        parts = [s.stored_bases if isinstance(s, Window) else s["bases"] for s in samples]
        flip = [isinstance(s, Window) and s.rc for s in samples]  # a dict's bases are on their strand
        fields = [(s["tag"], s["key"], s["seq_id"], s["start"]) for s in samples]
    tags, keys, seq_ids, starts = (list(column) for column in zip(*fields)) if fields else ([], [], [], [])
    return compact_batch(parts, flip, tags, rc, starts, seq_ids, keys, window, max_tag)


def _batch(
    src: Iterable[Any], batch_size: int, window: int | None = None, max_tag: int | None = None, partial: bool = True
) -> Iterator[dict[str, Any]]:
    """Group windows into compact batches of `batch_size` (the last one shorter when `partial`)."""
    for samples in chunks(src, batch_size):
        if len(samples) == batch_size or partial:
            yield collate_compact(samples, window, max_tag)


decode_sample = pipelinefilter(_decode_sample)
shuffle = pipelinefilter(_shuffle)
reverse_complement = pipelinefilter(_reverse_complement)
tag_dropout = pipelinefilter(_tag_dropout)
batch = pipelinefilter(_batch)
