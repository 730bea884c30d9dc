#!/usr/bin/env python
"""Plan one rank's epoch of a sequence-layout catalog cut at load (10 Tbp by default) and measure it.

No bases exist: the catalog is sequence lengths only (log-normal, as `plan_scale.py`), in storage
order, as a sequence-layout dataset's ``sequence-index.npy`` holds them. The load side's sample
table (`load.plan.samples`: windows of ``--seq-length`` cut at load, or ``--pack``ed samples) is made
from them, and one rank's plan of an exact training epoch (`load.plan.rank_plan`) is computed, then
the documents of the rank's first batches (for packing: the pass's packing of the short documents).
Prints one JSON object: samples, the rank's batches, seconds of each step, peak RSS of this process,
and checks (every id of the rank's plan within the table and distinct; the documents inside their
sequences).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `benchmarks` is not installed

from benchmarks.memory import peak_rss_mb
from bionemo_wds.core.tokenizer import N_SPECIALS_PER_SAMPLE
from bionemo_wds.load.plan import EpochSpec, rank_plan
from bionemo_wds.load.plan.mixing import split_virtual
from bionemo_wds.load.plan.samples import PackedSamples, SequenceTable, WindowSamples


def lengths_of(total_bases: int, sequences: int, seed: int) -> np.ndarray:
    """`sequences` log-normal lengths (median ~1 Mbp) summing to about `total_bases` (as `plan_scale.py`)."""
    rng = np.random.default_rng(seed)
    raw = rng.lognormal(mean=np.log(1e6), sigma=1.5, size=sequences)
    return np.maximum(1000, np.round(raw * (total_bases / raw.sum()))).astype(np.int64)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tbp", type=float, default=10.0, help="total bases of the catalog, in Tbp (default 10)")
    parser.add_argument("--sequences", type=int, default=2_000_000, help="sequences in the catalog (default 2M)")
    parser.add_argument("--piece", type=int, default=8189, help="bases per stored piece (prepare's window, 8189)")
    parser.add_argument("--seq-length", type=int, default=8192, help="tokens per sample at load (default 8192)")
    parser.add_argument("--pack", action="store_true", help="packed samples instead of windows")
    parser.add_argument("--offsets", choices=("fixed", "random"), default="fixed", help="window_offset")
    parser.add_argument("--dp-size", type=int, default=1024, help="data-parallel ranks (default 1024)")
    parser.add_argument("--rank", type=int, default=0, help="the rank planned (default 0)")
    parser.add_argument("--micro", type=int, default=8, help="samples per batch (default 8)")
    parser.add_argument("--batches", type=int, default=4, help="first batches whose documents are computed")
    parser.add_argument("--seed", type=int, default=42, help="seed of the lengths and of the plan")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    lengths = lengths_of(int(args.tbp * 1e12), args.sequences, args.seed)
    seqs = SequenceTable(lengths, np.zeros(len(lengths), np.int64), args.piece)
    t1 = time.perf_counter()
    window = args.seq_length - N_SPECIALS_PER_SAMPLE
    table: Any
    if args.pack:
        headers = np.full(len(lengths), N_SPECIALS_PER_SAMPLE, np.int64)
        table = PackedSamples(seqs, args.seq_length, headers, args.offsets, args.seed)
    else:
        table = WindowSamples(seqs, window, window, "end", args.offsets, args.seed)
    n = table.n_windows
    t2 = time.perf_counter()
    spec = EpochSpec((table,), (n,), (args.seed,), args.seed, args.rank, args.dp_size, args.micro)
    plan = rank_plan("exact", spec, 0)
    t3 = time.perf_counter()
    ids, passes = split_virtual(plan.batches[: args.batches].ravel(), max(n, 1))
    if args.pack:  # the documents of a packed sample too: the pass's packing of the short documents
        ids, passes = np.append(ids, table.n_full), np.append(passes, 0)
    docs = table.documents(ids, passes)
    t4 = time.perf_counter()
    rank_ids = split_virtual(plan.batches.ravel(), max(n, 1))[0]
    inside = bool(((docs.start >= 0) & (docs.start + docs.length <= lengths[docs.seq])).all())
    report = {
        "bases": int(lengths.sum()),
        "sequences": len(lengths),
        "seq_length": args.seq_length,
        "pack": args.pack,
        "samples": n,
        "rank_batches": len(plan),
        "lengths_seconds": round(t1 - t0, 2),
        "table_seconds": round(t2 - t1, 2),
        "plan_seconds": round(t3 - t2, 2),
        "documents_seconds": round(t4 - t3, 2),
        "documents": len(docs),
        "ids_ok": bool(len(np.unique(rank_ids)) == len(rank_ids) and rank_ids.min() >= 0 and rank_ids.max() < n),
        "documents_ok": inside,
        "peak_rss_mb": round(peak_rss_mb(), 1),
    }
    json.dump(report, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
