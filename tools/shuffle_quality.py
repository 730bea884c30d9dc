#!/usr/bin/env python
"""Shuffle quality of GenomicWebDataModule's epoch plan, and the read traffic it costs, beside
webdataset's usual recipe and a shard-local order.

Two modes:

    python tools/shuffle_quality.py DATASET
        (the small-dataset mode) reads every train shard of a real `bionemo-wds prepare` output and
        one epoch of the data module's train loader (seed 1, batch 8), and prints the mean distance
        in stored order between consecutive windows (divided by the number of windows; uniform
        random order gives about 1/3), the share of consecutive windows from the same shard and the
        distinct shards per batch, for our plan and for a full shard shuffle followed by a
        1000-sample buffer.

    python tools/shuffle_quality.py DATASET --plan [--world 1 8] [--samples N] ...
        (the scale mode) needs only the manifest and the train record index, no shard bytes, so
        DATASET may be a synthetic one (`tools/manifest_scale.py --out DIR --keep --no-sparse`).
        For each world size and each rank, the first `--samples` samples of epoch `--epoch` in three
        orders:

        ours        the data module's plan (`plan.rank_plan("exact", ...)`: a seeded record order,
                    windows mixed within blocks of `--shuffle-buffer`, each rank a contiguous run);
        webdataset  its usual recipe: shards dealt ``shards[rank::world]`` (`split_by_node`),
                    ``shardshuffle`` (a buffer of `--wds-shard-buffer` shards, webdataset's value for
                    ``shardshuffle=True``), each shard's windows in stored order, then
                    ``.shuffle(--wds-buffer)`` (webdataset's own `filters.shuffle`, initial 100);
        shard-local shards in a seeded order dealt ``[rank::world]``, each shard's windows shuffled
                    within the shard (a shard read whole, then the next).

        Per order (averaged over the ranks): the mean and median distance in stored order between
        consecutive samples, divided by the split's windows (uniform random ~1/3); distinct shards
        per 1000 consecutive samples; distinct records (tar members: one range request each) per
        batch; and the requests our remote reader sends for that order, counted by running the real
        `reader.PlannedBatches` (its record cache and read-ahead calls) over a real
        `storage.RemoteShards` (MAX_AHEAD, its thread pool) whose store records each range request
        instead of sending it: range requests per 1000 samples, the share issued by the read-ahead
        threads, and what they would be if each read-ahead call merged the ranges of one shard that
        lie next to each other (gaps of at most a tar header and padding; `read_traffic`). A
        streaming reader (webdataset's) sends one GET per shard instead: shards opened per 1000
        samples. The recording store answers at once; over a network, what a read-ahead that
        overflows MAX_AHEAD costs shows as records read one at a time rather than fetched twice
        (`tools/read_ahead_cost.py` measures an epoch over HTTP with a latency).

        Columns: mean step/n, median (distance / windows), shards/1000, records/batch, GETs/1000
        (range requests our reader sends), ahead (share sent by the read-ahead), merged (GETs/1000
        if adjacent ranges were merged), KB/GET, streamed/1000 (whole-shard GETs of a streaming
        reader; not for ours, which reads records).

    python tools/shuffle_quality.py --sorted-files [--files 8 --windows-per-file 20000 --buffer 10000 ...]
        (the sorted-files mode) writes a JSON lines corpus shaped as OpenGenome2's metagenome files
        (each file sorted longest to shortest), prepares it, and compares one epoch of our order
        with a streaming recipe's (each rank's files in turn through a buffer shuffle, as Hugging
        Face `datasets` streams them): each global batch's length mix against the corpus's, and
        distinct files per 1000 samples (`benchmarks.sorted_files_shuffle`; its options:
        ``--sorted-files --help``).

Every option is listed by ``--help`` with its default.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bionemo_wds.format import read_manifest
from bionemo_wds.format.split_index_file import SplitIndex, read_split_index
from bionemo_wds.load.plan import RecordTable, rank_plan
from bionemo_wds.load.plan.mixing import split_virtual
from bionemo_wds.load.plan.modes import one_table
from bionemo_wds.load.records import record_table
from bionemo_wds.storage.store import Store

sys.path.insert(0, str(Path(__file__).resolve().parent))  # tools/ (run as a script or loaded by path)

from read_traffic import reader_traffic

#: The orders measured, in table order.
ORDERS = ("ours", "webdataset", "shard-local")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The module's text as written, and each option's default."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    p.add_argument("dataset", type=Path, help="a prepared dataset (or, with --plan, a synthetic manifest) root")
    p.add_argument(
        "--plan", action="store_true", help="the scale mode: statistics from the manifest and record index alone"
    )
    p.add_argument("--world", type=int, nargs="+", default=[1, 8], help="data-parallel sizes measured (--plan)")
    p.add_argument(
        "--ranks", type=int, default=None, help="ranks measured at each world size: the first N (default: every rank)"
    )
    p.add_argument(
        "--samples", type=int, default=200_000, help="samples measured per rank, from the epoch's start (0: all)"
    )
    p.add_argument("--micro-batch-size", type=int, default=8, help="samples per batch")
    p.add_argument(
        "--shuffle-buffer", type=int, default=1000, help="our plan's mixing block (the data module's shuffle_buffer)"
    )
    p.add_argument("--seed", type=int, default=1, help="seed of every order")
    p.add_argument("--epoch", type=int, default=0, help="epoch of our plan")
    p.add_argument("--wds-shard-buffer", type=int, default=100, help="webdataset's shardshuffle buffer (True: 100)")
    p.add_argument("--wds-buffer", type=int, default=1000, help="webdataset's sample shuffle buffer")
    p.add_argument("--no-traffic", action="store_true", help="skip counting the reader's requests (the slow part)")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object as well")
    return p.parse_args(argv)


# -- the split ------------------------------------------------------------------------------------


def load_split(root: str | Path) -> tuple[RecordTable, SplitIndex, int]:
    """The train split's record table, record index and shard count (manifest and index only)."""
    store = Store(str(root))
    manifest = read_manifest(str(root))
    index = read_split_index(store, manifest, "train")
    if index is None:
        raise SystemExit(f"{root}: the train split has no record index (prepare it with a current version)")
    return record_table(index), index, len(manifest.splits["train"].shards)


def shard_first_windows(table: RecordTable, n_shards: int) -> np.ndarray:
    """First window id of each shard, plus the total (length ``n_shards + 1``)."""
    per_shard = np.bincount(table.shard, weights=table.windows, minlength=n_shards).astype(np.int64)
    return np.concatenate([[0], np.cumsum(per_shard)]).astype(np.int64)


# -- the three orders -----------------------------------------------------------------------------


def ours(table: RecordTable, args: argparse.Namespace, rank: int, world: int) -> np.ndarray:
    """The data module's plan of one dataset: rank `rank`'s window ids, batch after batch."""
    spec = one_table(table, args.seed, rank, world, args.micro_batch_size, mix=args.shuffle_buffer)
    batches = rank_plan("exact", spec, args.epoch).batches
    ids = split_virtual(batches.ravel(), max(table.n_windows, 1))[0]
    return ids[: args.samples] if args.samples else ids


def webdataset_order(first: np.ndarray, args: argparse.Namespace, rank: int, world: int) -> tuple[np.ndarray, int]:
    """webdataset's recipe for rank `rank` (module text): its window ids, and the shards it opened
    to produce them."""
    from webdataset.filters import shuffle

    n_shards = len(first) - 1
    mine = list(range(n_shards))[rank::world]
    opened = [0]

    def shards() -> Iterator[int]:
        yield from shuffle(args.wds_shard_buffer, initial=args.wds_shard_buffer, seed=args.seed)(iter(mine))

    def windows() -> Iterator[int]:
        for s in shards():
            opened[0] += 1
            yield from range(int(first[s]), int(first[s + 1]))

    limit = args.samples or int(sum(int(first[s + 1] - first[s]) for s in mine))
    stream = shuffle(args.wds_buffer, seed=args.seed + 1)(windows())
    out = np.fromiter(itertools.islice(stream, limit), dtype=np.int64)
    return out, opened[0]  # the shards opened by the time `limit` samples came out


def shards_opened(ids: np.ndarray, first: np.ndarray) -> int:
    """Shards a stream of these samples opened: every shard a sample came from."""
    return len(np.unique(np.searchsorted(first, ids, side="right") - 1))


def shard_local(first: np.ndarray, args: argparse.Namespace, rank: int, world: int) -> np.ndarray:
    """Shards in a seeded order dealt ``[rank::world]``, each one's windows shuffled within it."""
    rng = np.random.default_rng(args.seed)
    n_shards = len(first) - 1
    mine = rng.permutation(n_shards)[rank::world]
    sizes = first[mine + 1] - first[mine]
    if args.samples:  # only the shards the first samples come from
        keep = int(np.searchsorted(np.cumsum(sizes), args.samples)) + 1
        mine, sizes = mine[:keep], sizes[:keep]
    ids = np.repeat(first[mine] - np.concatenate([[0], np.cumsum(sizes)[:-1]]), sizes) + np.arange(int(sizes.sum()))
    # within each shard: sort by (shard's place, a random key)
    place = np.repeat(np.arange(len(mine)), sizes)
    ids = ids[np.lexsort((rng.random(len(ids)), place))]
    return ids[: args.samples] if args.samples else ids


# -- statistics -----------------------------------------------------------------------------------


def distinct_per_group(values: np.ndarray, size: int) -> float:
    """Mean number of distinct values in consecutive groups of `size` (whole groups only)."""
    k = len(values) // size
    if k == 0:
        return float("nan")
    groups = np.sort(values[: k * size].reshape(k, size), axis=1)
    return float(np.mean(1 + np.count_nonzero(np.diff(groups, axis=1), axis=1)))


def order_stats(ids: np.ndarray, table: RecordTable, micro: int) -> dict[str, float]:
    """Distance in stored order between consecutive samples (/ windows), distinct shards per 1000
    samples, distinct records per batch."""
    records, _ = table.locate(ids)
    steps = np.abs(np.diff(ids)) / max(table.n_windows, 1)
    return {
        "mean_step": float(np.mean(steps)) if len(steps) else float("nan"),
        "median_step": float(np.median(steps)) if len(steps) else float("nan"),
        "shards_per_1000": distinct_per_group(table.shard[records], 1000),
        "records_per_batch": distinct_per_group(records, micro),
    }


# -- the scale mode -------------------------------------------------------------------------------


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Every order's statistics at every world size (means over the ranks measured)."""
    t0 = time.perf_counter()
    table, index, n_shards = load_split(args.dataset)
    first = shard_first_windows(table, n_shards)
    out: dict[str, Any] = {
        "shards": n_shards,
        "records": len(table),
        "windows": table.n_windows,
        "micro_batch_size": args.micro_batch_size,
        "shuffle_buffer": args.shuffle_buffer,
        "worlds": {},
    }
    for world in args.world:
        per_order: dict[str, list[dict[str, float]]] = {name: [] for name in ORDERS}
        for rank in range(min(world, args.ranks or world)):
            wds_ids, opened = webdataset_order(first, args, rank, world)
            orders = {"ours": ours(table, args, rank, world), "webdataset": wds_ids}
            orders["shard-local"] = shard_local(first, args, rank, world)
            for name, ids in orders.items():
                row: dict[str, float] = {"samples": float(len(ids)), **order_stats(ids, table, args.micro_batch_size)}
                streamed = {"webdataset": opened, "shard-local": shards_opened(ids, first)}.get(name)
                row["streamed_per_1000"] = streamed * 1000 / max(len(ids), 1) if streamed is not None else float("nan")
                if not args.no_traffic:
                    row.update(reader_traffic(ids, table, index, n_shards, args.micro_batch_size, args.shuffle_buffer))
                per_order[name].append(row)
        out["worlds"][str(world)] = {
            name: {key: float(np.mean([r[key] for r in rows])) for key in rows[0]} for name, rows in per_order.items()
        }
    out["seconds"] = time.perf_counter() - t0
    return out


def table_text(result: dict[str, Any]) -> str:
    """The results as a plain-text table, one row per world size and order."""
    head = (
        f"{result['shards']} shards, {result['records']} records, {result['windows']} windows; "
        f"batch {result['micro_batch_size']}, shuffle_buffer {result['shuffle_buffer']}\n"
    )
    cols = [
        ("world", 5),
        ("order", 11),
        ("mean step/n", 11),
        ("median", 7),
        ("shards/1000", 11),
        ("records/batch", 13),
        ("GETs/1000", 9),
        ("ahead", 5),
        ("merged", 6),
        ("KB/GET", 7),
        ("streamed/1000", 13),
    ]
    lines = ["  ".join(name.rjust(w) for name, w in cols)]
    for world, orders in result["worlds"].items():
        for name, r in orders.items():
            cells = [world, name, f"{r['mean_step']:.3f}", f"{r['median_step']:.3f}", f"{r['shards_per_1000']:.1f}"]
            cells.append(f"{r['records_per_batch']:.2f}")
            if "requests_per_1000" in r:
                cells += [
                    f"{r['requests_per_1000']:.1f}",
                    f"{r['ahead_share']:.0%}",
                    f"{r['merged_per_1000']:.1f}",
                    f"{r['bytes_per_request'] / 1000:.1f}",
                ]
            else:
                cells += ["-"] * 4
            cells.append("-" if np.isnan(r["streamed_per_1000"]) else f"{r['streamed_per_1000']:.1f}")
            lines.append("  ".join(c.rjust(w) for c, (_, w) in zip(cells, cols)))
    return head + "\n".join(lines)


# -- the small-dataset mode -----------------------------------------------------------------------


def legacy(root: str) -> None:
    """Our loader's epoch (seed 1, batch 8) beside a full shard shuffle and a 1000-sample buffer, by
    the window keys read from every shard (module text)."""
    import random

    from bionemo_wds.format import iter_records
    from bionemo_wds.lightning.datamodule import GenomicWebDataModule

    m = read_manifest(root)
    order = []
    for sh in m.splits["train"].shards:
        with open(f"{root}/{sh.path}", "rb") as fh:
            for _, b in iter_records(fh):
                order += [f"{s}/{w}" for s, w in zip(b.seq_id, b.window.tolist())]
    pos = {k: i for i, k in enumerate(order)}
    n = len(order)

    def score(keys: list[str]) -> float:
        p = np.array([pos[k] for k in keys])
        return float(np.mean(np.abs(np.diff(p)))) / n

    dm = GenomicWebDataModule(root, micro_batch_size=8, seed=1, rc_prob=0.0)
    dm.setup("fit")
    mine = [k for b in dm.train_dataloader() for k in b["keys"]]
    # webdataset's defaults as bionemo users run them: shard shuffle, then a 1000-sample buffer
    rng = random.Random(1)
    shards = list(range(len(m.splits["train"].shards)))
    rng.shuffle(shards)
    per = [sh.n_samples for sh in m.splits["train"].shards]
    starts = np.concatenate([[0], np.cumsum(per)])
    stream = [order[i] for s in shards for i in range(starts[s], starts[s + 1])]
    buf: list[str] = []
    out: list[str] = []
    for k in stream:
        buf.append(k)
        if len(buf) >= 1000:
            j = rng.randrange(len(buf))
            buf[j], buf[-1] = buf[-1], buf[j]
            out.append(buf.pop())
    rng.shuffle(buf)
    out += buf
    print(
        f"{n} windows in {len(per)} shards; mean |step| / n: ours {score(mine):.3f}, "
        f"webdataset shard shuffle + 1000 buffer {score(out):.3f}, uniform random ~0.333"
    )
    shard_of = np.searchsorted(starts, np.arange(n), side="right") - 1

    def same_shard(keys: list[str]) -> float:
        s = shard_of[[pos[k] for k in keys]]
        return float(np.mean(s[1:] == s[:-1]))

    def batch_shards(keys: list[str], m: int = 8) -> float:
        s = shard_of[[pos[k] for k in keys]]
        return float(np.mean([len(set(s[i : i + m])) for i in range(0, len(s) - m + 1, m)]))

    print(
        f"consecutive windows from the same shard: ours {same_shard(mine):.3f}, webdataset {same_shard(out):.3f} "
        f"(1/{len(per)} = {1 / len(per):.3f} at random); distinct shards per batch of 8: "
        f"ours {batch_shards(mine):.2f}, webdataset {batch_shards(out):.2f}"
    )


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--sorted-files" in argv:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout: `benchmarks` is not installed
        from benchmarks.sorted_files_shuffle import main as sorted_files

        sys.exit(sorted_files([a for a in argv if a != "--sorted-files"]))
    args = parse_args(argv)
    if not args.plan:
        legacy(str(args.dataset))
        return
    result = measure(args)
    print(table_text(result))
    print(f"({result['seconds']:.0f} s)")
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
