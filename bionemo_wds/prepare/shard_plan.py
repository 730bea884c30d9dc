"""The plan of a prepare run: what the output will hold, computed once, before any shard is written.

From the catalog and the options: the request fingerprint (what decides the output bytes), the
split of whole sequences, the windows of each split in a seeded global order, and their cut into
shards. The result is the manifest skeleton and one writer task per shard; it never opens a shard.
Each task holds its shard's manifest entry; the writers fill in its record index (`format.record_index`)
when they have written the shard, `prepare` its size and sha256.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from bionemo_wds import __version__
from bionemo_wds.core.permutation import SeededPermutation
from bionemo_wds.core.tokenizer import BOS_ID, EOS_ID, PAD_ID, SEP_ID, UNK_ID
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import (
    FORMAT_NAME,
    FORMAT_VERSION,
    ShardInfo,
    shard_name,
)
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.options import (
    MIN_SHARDS_PER_SPLIT,
    RECORD_TARGET_BYTES,
    SHARD_TARGET_BYTES,
    PrepareOptions,
)
from bionemo_wds.prepare.request import read_list
from bionemo_wds.prepare.sequence_layout import MAX_INDEXED_TAG_BYTES, check_layout, sequence_order
from bionemo_wds.prepare.splits import (
    DEFAULT_BUCKET_EDGES,
    SEEDED,
    SPLIT_NAMES,
    bucket_labels,
    grouped_split,
    length_buckets,
    split_from_lists,
    split_from_names,
    stratified_split,
)
from bionemo_wds.prepare.windows import (
    PIECE,
    IdentityOrder,
    OrderedWindows,
    WindowTable,
    check_stride,
    window_counts,
    window_length,
)


@dataclass(frozen=True)
class ShardPlan:
    """What the writers of one run need, sent once to each writer process or cluster worker: every
    split's ordered windows and how shards are cut into records. A task is just (split, shard)."""

    splits: dict[str, OrderedWindows]
    per_record: int
    window: int
    by_bases: bool  # records cut by bases (no --windows-per-record)
    #: int8 per catalog row: its split's index in `SPLIT_NAMES`, -1 for a row in no split (the sequence table)
    assignment: np.ndarray | None = None

    def tasks(self) -> list[tuple[str, int]]:
        """(split, shard) of every shard, in manifest order."""
        return [(split, k) for split, windows in self.splits.items() for k in range(windows.n_shards)]

    def shard(self, split: str, k: int) -> tuple[WindowTable, np.ndarray]:
        """Shard `k` of `split`: its windows in order and the index of each record's first window."""
        windows = self.splits[split].shard(k)
        return windows, record_starts(windows.length, self.per_record, self.window, self.by_bases)


def split_shard_size(n_windows: int, target: int, per_record: int) -> int:
    """Windows per shard of a split of `n_windows` without --samples-per-shard: `target` (about
    `SHARD_TARGET_BYTES`), unless that leaves the split fewer than `MIN_SHARDS_PER_SPLIT` shards; then
    a whole number of records (`per_record` windows each) such that it gets at least that many, or
    one record per shard when it has fewer records. Loaders that give each worker whole shards (the
    classic WebDataModule, `num_workers`) need a shard per worker."""
    records = -(-n_windows // per_record)
    return min(target, per_record * max(1, records // MIN_SHARDS_PER_SPLIT))


def record_starts(lengths: np.ndarray, per_record: int, window: int, by_bases: bool) -> np.ndarray:
    """Index of the first window of each record of a shard whose windows have `lengths`.

    `by_bases` (the default, no ``--windows-per-record``): a window joins the record its first base
    falls in when the shard's bases are cut every ``per_record * window`` bases, so full-length
    windows make records of exactly `per_record` (the cut of fixed counts), and short windows
    (contigs shorter than a window) fill a record to about the same size instead of making many
    small records: tar headers and per-record work are paid per record, not per window. Otherwise
    every `per_record` windows.
    """
    n = len(lengths)
    if not by_bases or n == 0:
        return np.arange(0, n, per_record, dtype=np.int64)
    first_base = np.cumsum(lengths) - lengths
    record = first_base // (per_record * window)
    return np.flatnonzero(np.r_[True, record[1:] != record[:-1]]).astype(np.int64)


def check_split_rules(catalog: Catalog, opts: PrepareOptions) -> None:
    """Refuse two rules that both decide the split (--group-by with split lists). With
    --split-from-names (`request_of` refused its conflicts), fix every row's split from its input file's
    name as a source fixes splits (`Catalog.split`), so the checks before the scan and the plan see it."""
    if opts.split_from_names and catalog.split is None:
        files = [catalog.source.file_of(seq) for seq in catalog.seq.tolist()]
        catalog.split = split_from_names(files)
    if opts.group_by and (catalog.split is not None or opts.split_lists):
        given = "--split-list" if opts.split_lists else "the source's split lists (--split-parquet, --window-db)"
        raise BadInputError(
            f"--group-by {opts.group_by} and {given} both decide the split; give one (a split list is "
            "already a grouping: put each group's sequences in one list)"
        )


def read_split_lists(opts: PrepareOptions) -> dict[str, list[str]]:
    """The --split-list files' sequence names, per split."""
    return {split: read_list(path) for split, path in (opts.split_lists or {}).items()}


def _assign_splits(catalog: Catalog, opts: PrepareOptions) -> np.ndarray:
    """Split code per catalog row: fixed by the source or the file names, from split lists, by groups, or stratified."""
    check_split_rules(catalog, opts)
    if catalog.split is not None:
        return catalog.split
    if opts.split_lists:
        lists = read_split_lists(opts)
        unique = list(dict.fromkeys(catalog.names))  # pieces share their sequence's name
        by_name = dict(zip(unique, split_from_lists(unique, lists).tolist()))
        return np.fromiter((by_name[n] for n in catalog.names), dtype=np.int8, count=len(catalog))
    rule, names = opts.split_rule or SEEDED, catalog.group_names
    if catalog.groups is not None:
        return grouped_split(catalog.groups, catalog.lengths, opts.split, opts.seed, names=names, rule=rule)
    return stratified_split(catalog.lengths, opts.split, opts.seed, ids=catalog.names, rule=rule)


def first_windows(catalog: Catalog, window: int, stride: int, tail: str) -> np.ndarray | None:
    """Per row: the number of its sequence's windows in earlier rows (pieces of one sequence are
    consecutive rows), so window numbers run on across pieces and keys stay unique; None when every
    row is a whole sequence."""
    seq = catalog.seq
    if len(seq) == 0 or bool((np.diff(seq) != 0).all()):
        return None
    counts = window_counts(catalog.lengths, window, stride, tail)
    before = np.cumsum(counts) - counts
    starts = np.flatnonzero(np.r_[True, np.diff(seq) != 0])
    run = np.repeat(starts, np.diff(np.r_[starts, len(seq)]))
    return before - before[run]


def fixed_windows(catalog: Catalog, split: str, window: int, stride: int) -> WindowTable:
    """The windows a source fixed for `split` (Eden window databases: window k of a sequence starts
    at k * stride), each checked to lie inside its sequence."""
    assert catalog.windows is not None
    rows, numbers = catalog.windows[split]
    start = numbers * stride
    lengths = catalog.lengths[rows]
    outside = np.flatnonzero(start >= lengths)
    if len(outside):
        row = int(rows[outside[0]])
        raise BadInputError(
            f"window {int(numbers[outside[0]])} of sequence {catalog.names[row]!r} in the {split} window database "
            f"starts at {int(start[outside[0]])}, beyond its {int(lengths[outside[0]])} bases"
        )
    return WindowTable(rows, numbers, start, np.minimum(lengths - start, window))


def window_order(seed: int, split: str) -> Callable[[int], SeededPermutation]:
    """The seeded order of a split's windows across its shards (shards mix sequences instead of
    following them), for a split of n windows: ``window_order(seed, split)(n)``."""
    return lambda n: SeededPermutation(n, seed, "window_order", SPLIT_NAMES.index(split))


def _length_mix(lengths: np.ndarray) -> dict[str, dict[str, int]]:
    buckets = length_buckets(lengths)
    return {
        label: {"sequences": int((buckets == b).sum()), "bases": int(lengths[buckets == b].sum())}
        for b, label in enumerate(bucket_labels())
    }


def plan(catalog: Catalog, request: dict[str, Any], opts: PrepareOptions) -> tuple[dict[str, Any], ShardPlan]:
    """Manifest skeleton (each shard's tokens, size, hash and record index still empty: the writers
    fill them in) and the shard plan. Memory and time grow with the catalog's rows and the number of
    shards, not with the windows: no window is computed here."""
    max_tag = catalog.max_tag_bytes()
    window = window_length(opts.seq_length, max_tag)
    sequences = opts.layout == "sequences"
    check_layout(catalog, opts)
    if sequences and max_tag > MAX_INDEXED_TAG_BYTES:
        raise BadInputError(
            f"--layout sequences: a control tag of {max_tag} bytes is longer than the sequence index holds "
            f"({MAX_INDEXED_TAG_BYTES} bytes)"
        )
    # the sequence layout: pieces of `window` bases, one after the other (stride = window)
    stride = window if sequences else opts.effective_stride(window)
    check_stride(stride, window, opts.seq_length, max_tag)
    tail = PIECE if sequences else opts.tail
    per_shard = opts.samples_per_shard or max(1, SHARD_TARGET_BYTES // window)
    per_record = min(opts.windows_per_record or max(1, RECORD_TARGET_BYTES // window), per_shard)
    assignment = _assign_splits(catalog, opts)
    manifest: dict[str, Any] = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,  # params.codec says which codec, params.layout which layout
        "package_version": __version__,
        "request": request,
        "params": {
            "seq_length": opts.seq_length,
            "stride": stride,
            "window_length": window,
            "tail": opts.tail,
            "tags": opts.tags,
            "max_tag_bytes": max_tag,  # room for the longest tag after lineage dropout (`Catalog.max_tag_bytes`)
            "case": opts.case,
            "seed": opts.seed,
            # how the ratios split (absent: lists, names or the source did, or written before `LEGACY_SPLIT_RULE`)
            **({"split_rule": request["split_rule"]} if request.get("split_rule") and catalog.split is None else {}),
            "samples_per_shard": per_shard,  # the largest; each split says its own (`split_shard_size`)
            "windows_per_record": per_record,
            # "bases": records of about windows_per_record full windows of bases; "windows": exactly that many
            "records_by": "bases" if opts.windows_per_record is None else "windows",
            "prefix": opts.prefix,
            "codec": opts.compress,
            "length_buckets": list(DEFAULT_BUCKET_EDGES),
            "source": {"kind": catalog.source.kind, **catalog.notes},
            "group_by": opts.group_by,
            "split_at_n": opts.split_at_n,
            "tokenizer": {
                "kind": "byte",
                "case": opts.case,  # of the stored bases; the loader folds them to upper case for the model
                "eos": EOS_ID,
                "pad": PAD_ID,
                "bos": BOS_ID,
                "sep": SEP_ID,
                "unk": UNK_ID,
            },
            **({"layout": opts.layout} if sequences else {}),  # absent: windows (what versions 1-4 hold)
        },
        "splits": {},
        "skipped": catalog.skipped,
        "unassigned_sequences": len({catalog.names[i] for i in np.flatnonzero(assignment < 0).tolist()}),
    }
    ordered: dict[str, OrderedWindows] = {}
    fixed = catalog.windows or {}
    first = first_windows(catalog, window, stride, tail)
    for code, split in enumerate(SPLIT_NAMES):
        rows = np.flatnonzero(assignment == code)
        if len(rows) == 0:
            continue
        lengths = catalog.lengths[rows]
        order_of: Callable[[int], SeededPermutation | IdentityOrder] = window_order(opts.seed, split)
        if split in fixed:
            windows = OrderedWindows.of_table(fixed_windows(catalog, split, window, stride), order_of, per_shard)
        else:
            stored = rows
            if sequences:  # the rows in a seeded order, their pieces in that order (each row's together)
                stored, order_of = rows[sequence_order(opts.seed, split, len(rows))], IdentityOrder
            offset = None if first is None else first[stored]
            windows = OrderedWindows.grid(
                stored, catalog.lengths[stored], window, stride, tail, order_of, per_shard, offset
            )
        n = len(windows)
        if opts.samples_per_shard is None:
            windows = dataclasses.replace(windows, per_shard=split_shard_size(n, per_shard, per_record))
        ordered[split] = windows
        size = windows.per_shard
        shards = [
            ShardInfo(
                path=f"{split}/{shard_name(k, opts.prefix)}",
                n_samples=min(size, n - k * size),
                n_tokens=0,
                bytes=0,
                sha256="",
            ).to_json()
            for k in range(windows.n_shards)
        ]
        manifest["splits"][split] = {  # its sequences' names: in the sequence table (format version 6)
            "n_samples": n,
            "n_sequences": len({catalog.names[i] for i in rows.tolist()}),
            "n_bases": int(lengths.sum()),
            "n_tokens": windows.n_tokens,
            "length_mix": _length_mix(lengths),
            "samples_per_shard": size,
            "shards": shards,
        }
    by_bases = opts.windows_per_record is None
    return manifest, ShardPlan(ordered, per_record, window, by_bases, assignment)
