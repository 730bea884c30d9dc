#!/usr/bin/env python
"""Plan a prepare run over a synthetic catalog of lengths only (10 Tbp by default) and measure it.

No bases exist: the catalog holds sequence names and lengths (log-normal, scaled to the total), and
`prepare.shard_plan.plan` computes the split, the window counts, the seeded window order and the shard
boundaries exactly as for real input. Prints one JSON object: windows, shards, plan seconds, peak
RSS of this process, and, with ``--check-shards``, for sampled shards whether their windows computed
alone equal the same shard's windows taken from the full order.

"The full order" here is computed the other way round from the shards: every window id of the
split is visited (in chunks) and sent through the inverse permutation to its position; the ids whose
position lies in the sampled shard are that shard's windows. A shard computed alone goes forward
(positions -> ids) for its own positions only. ``--full-order`` runs that traversal (about a minute
per billion windows on one core); without it only the inverse of the shard's own ids is checked.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.options import PrepareOptions
from bionemo_wds.prepare.shard_plan import ShardPlan, plan
from bionemo_wds.prepare.windows import WindowTable, window_table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `benchmarks` is not installed

from benchmarks.memory import peak_rss_mb


class LengthsOnly:
    """A source without bases: planning needs none."""

    kind = "synthetic-lengths"

    def reader(self) -> Any:
        raise RuntimeError("a lengths-only catalog has no bases to read")

    def describe(self, seq: int) -> str:
        return f"synthetic sequence {seq}"

    def file_of(self, seq: int) -> str:
        return "<synthetic>"


def synthetic_catalog(total_bases: int, sequences: int, seed: int) -> Catalog:
    """`sequences` log-normal lengths (median ~1 Mbp, from a few kb to tens of Mbp) summing to about
    `total_bases`."""
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(mean=np.log(1e6), sigma=1.5, size=sequences)
    lengths = np.maximum(1000, np.round(raw * (total_bases / raw.sum()))).astype(np.int64)
    names = [f"seq{i}" for i in range(sequences)]
    return Catalog(LengthsOnly(), names, [""] * sequences, lengths)  # type: ignore[arg-type]


def full_order_shards(shards: ShardPlan, split: str, ks: list[int], chunk: int = 1 << 20) -> dict[int, WindowTable]:
    """Shards `ks`' windows from one traversal of every window id through the inverse order."""
    windows = shards.splits[split]
    per = windows.per_shard
    ids = {k: np.full(min(per, len(windows) - k * per), -1, dtype=np.int64) for k in ks}
    for start in range(0, len(windows), chunk):
        block = np.arange(start, min(start + chunk, len(windows)), dtype=np.int64)
        position = windows.order.inverse(block)
        shard = position // per
        for k in ks:
            inside = shard == k
            ids[k][position[inside] - k * per] = block[inside]
    return {k: grid_windows(windows, found) for k, found in ids.items()}


def grid_windows(windows: Any, ids: np.ndarray) -> WindowTable:
    """The windows with these ids from `window_table` of each one's own row (independent of
    `OrderedWindows.by_id`)."""
    row = np.searchsorted(windows.first_id, ids, side="right") - 1
    parts = []
    for r, i in zip(row.tolist(), ids.tolist()):
        table = window_table(windows.rows[r : r + 1], windows.lengths[r : r + 1], windows.window, windows.stride)
        parts.append(table.take(np.array([i - windows.first_id[r]])))
    return WindowTable(*(np.concatenate([getattr(p, f) for p in parts]) for f in WindowTable.__dataclass_fields__))


def same(a: WindowTable, b: WindowTable) -> bool:
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in WindowTable.__dataclass_fields__)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tbp", type=float, default=10.0, help="total bases of the catalog, in Tbp (default 10)")
    parser.add_argument("--sequences", type=int, default=2_000_000, help="sequences in the catalog (default 2M)")
    parser.add_argument("--seq-length", type=int, default=8192, help="prepare's --seq-length (default 8192)")
    parser.add_argument("--stride", type=int, default=7992, help="prepare's --stride (default 7992)")
    parser.add_argument("--seed", type=int, default=42, help="seed of the catalog's lengths and of the plan")
    parser.add_argument("--check-shards", type=int, default=0, help="train shards to check, spread over the split")
    parser.add_argument(
        "--full-order", action="store_true", help="check them against a traversal of every window (slow)"
    )
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    catalog = synthetic_catalog(int(args.tbp * 1e12), args.sequences, args.seed)
    t1 = time.perf_counter()
    opts = PrepareOptions(seq_length=args.seq_length, stride=args.stride, seed=args.seed, progress=False)
    manifest, shards = plan(catalog, {"synthetic": True}, opts)
    t2 = time.perf_counter()
    train = shards.splits["train"]
    report: dict[str, Any] = {
        "bases": catalog.total_bases,
        "sequences": len(catalog),
        "windows": sum(len(w) for w in shards.splits.values()),
        "shards": sum(w.n_shards for w in shards.splits.values()),
        "catalog_seconds": round(t1 - t0, 2),
        "plan_seconds": round(t2 - t1, 2),
        "peak_rss_mb_after_plan": round(peak_rss_mb(), 1),
        "manifest_splits": {s: info["n_samples"] for s, info in manifest["splits"].items()},
    }
    checked = []
    sampled = np.linspace(0, train.n_shards - 1, args.check_shards).astype(int).tolist() if args.check_shards else []
    for k in sampled:
        t = time.perf_counter()
        alone = train.shard(k)
        ids = train.order.range(k * train.per_shard, min((k + 1) * train.per_shard, len(train)))
        checked.append(
            {
                "shard": k,
                "windows": len(alone),
                "alone_seconds": round(time.perf_counter() - t, 3),
                "inverse_ok": bool(np.array_equal(train.order.inverse(ids), np.arange(len(ids)) + k * train.per_shard)),
                "grid_ok": same(alone, grid_windows(train, ids)),
            }
        )
    if args.full_order and sampled:
        t = time.perf_counter()
        full = full_order_shards(shards, "train", sampled)
        report["full_order_seconds"] = round(time.perf_counter() - t, 1)
        for entry in checked:
            entry["full_order_ok"] = same(train.shard(entry["shard"]), full[entry["shard"]])
    report["checked"] = checked
    report["peak_rss_mb"] = round(peak_rss_mb(), 1)
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
