"""`tools/sorted_files_shuffle.py`: our epoch order beside a streaming buffer shuffle, on files sorted by length."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.buffer_shuffle import recipe_order
from benchmarks.length_mix import bucket_of, length_edges, order_metrics, shares
from benchmarks.sorted_corpus import SortedCorpus, write_sorted_corpus
from bionemo_wds.load.provenance import parse_window_key

HELP = """\
Shuffle quality on a corpus shaped like OpenGenome2's metagenome subset: --files gzip JSON lines
files named data_metagenomics_train_chunk<k>.jsonl.gz, each of about --windows-per-file windows of
--seq-length tokens, each file's records sorted longest to shortest (log-normal lengths, median
3 kb, sigma 1, as benchmarks/metagenome.py draws contig lengths; bases cut from the bundled genomes).
The corpus is prepared once (prepare --source jsonl --split-from-names, in this process) and one
epoch of its train split is ordered three ways for each rank of a --world-rank data-parallel run:

  ours     GenomicDataset (the data module's dataset) read for each rank, --batch-size samples per
           batch, seed --seed: its batches' keys name each window's record (file and line).
  recipe   NVIDIA's OpenGenome2 recipe, streaming with Hugging Face datasets: each rank a
           contiguous block of whole files (dataset.shard), the rank's files in a seeded order,
           each record's windows in order, record after record, through a shuffle buffer of
           --buffer windows (datasets' BufferShuffledExamplesIterable, written out here).
  random   the same windows in one seeded uniform permutation, dealt round-robin to the ranks:
           the reference a perfect shuffle gives (a batch of 32 samples is never exactly the
           corpus's mix, so its distance is not 0).

Both read the same windows (those of our epoch). Figures per order:

  length-mix distance  each global batch (step t: every rank's t-th batch) against the corpus: the
                       total variation distance between the batch's histogram over length buckets
                       (deciles of the sequence length of every window) and the corpus's; mean and
                       95th percentile over the epoch's batches (0: the corpus's mix exactly).
  files/1000           distinct input files among 1,000 consecutive samples of one rank; mean and
                       min over every rank's blocks.

The recipe's weakness grows as the buffer shrinks beside a file (its real files hold far more
windows than its 50,000-window buffer); a scaled-down run keeps that ratio: e.g. files of 20,000
windows with a buffer of 10,000. The shape is printed above the table.
"""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="shuffle_quality.py --sorted-files",
        description=HELP,
        formatter_class=lambda prog: argparse.RawDescriptionHelpFormatter(prog, width=100),
    )
    p.add_argument("--files", type=int, default=8, help="JSON lines files in the corpus (default: 8)")
    size = p.add_mutually_exclusive_group()
    size.add_argument(
        "--windows-per-file",
        type=int,
        default=None,
        help="windows of --seq-length each file holds, about (default: 20000)",
    )
    size.add_argument(
        "--mbp", type=float, default=None, help="the corpus's size in Mbp instead (split evenly over the files)"
    )
    p.add_argument(
        "--seq-length", type=int, default=1024, help="tokens per window, prepare's --seq-length (default: 1024)"
    )
    p.add_argument(
        "--buffer",
        type=int,
        default=50_000,
        help="the recipe's shuffle buffer, in windows (default: 50000, the recipe's)",
    )
    p.add_argument("--world", type=int, default=4, help="data-parallel ranks (default: 4)")
    p.add_argument("--batch-size", type=int, default=8, help="samples per batch on each rank (default: 8)")
    p.add_argument("--seed", type=int, default=0, help="seed of the corpus and of every order (default: 0)")
    p.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where the corpus and the prepared dataset go (default: a temporary directory, removed)",
    )
    p.add_argument("--json", action="store_true", help="print the results as one JSON object after the table")
    args = p.parse_args(argv)
    if args.windows_per_file is None:
        per_window = args.seq_length * 999 // 1024  # default stride: bases per window, about
        args.windows_per_file = int(args.mbp * 1e6 / args.files / per_window) if args.mbp else 20_000
    for name in ("files", "windows_per_file", "seq_length", "buffer", "world", "batch_size"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def prepare_corpus(corpus: SortedCorpus, out: Path, seq_length: int) -> None:
    """`bionemo-wds prepare --source jsonl --split-from-names` of the corpus's folder, in this process."""
    from bionemo_wds.prepare import PrepareOptions, prepare

    options = PrepareOptions(source="jsonl", seq_length=seq_length, split_from_names=True, progress=False)
    prepare([str(corpus.files[0].parent)], out, options)


def our_streams(root: Path, world: int, batch_size: int, seed: int) -> list[list[str]]:
    """Each rank's window keys, in the order GenomicDataset yields its train epoch."""
    from bionemo_wds import GenomicDataset

    out = []
    for rank in range(world):
        ds = GenomicDataset(
            str(root), "train", batch_size, model_inputs=False, seed=seed, rc_prob=0.0, dp_rank=rank, dp_size=world
        )
        out.append([str(key) for batch in ds for key in batch["keys"]])
    return out


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Write, prepare and order the corpus (module text); the figures of each order."""
    t0 = time.perf_counter()
    corpus = write_sorted_corpus(work / "json", args.files, args.windows_per_file, args.seq_length, args.seed)
    prepare_corpus(corpus, work / "prepared", args.seq_length)
    t_prepared = time.perf_counter()
    ours_keys = our_streams(work / "prepared", args.world, args.batch_size, args.seed)

    names = {f.name: i for i, f in enumerate(corpus.files)}

    def place(key: str) -> tuple[int, int]:
        """(file, line) of a window key: its sequence is ``<file>:<line>``."""
        name, _, line = parse_window_key(key)[0].rpartition(":")
        return names[Path(name).name], int(line)

    # every window of our epoch, numbered in stream order: file by file, line by line, window by window
    windows: dict[tuple[int, int], int] = {}
    for stream in ours_keys:
        for key in stream:
            windows[place(key)] = windows.get(place(key), 0) + 1
    places = sorted(windows)
    counts = np.array([windows[p] for p in places], dtype=np.int64)
    first = dict(zip(places, np.concatenate([[0], np.cumsum(counts)[:-1]]).tolist()))
    file_of = np.repeat([f for f, _ in places], counts)
    length_of = np.repeat([corpus.lengths[f][line - 1] for f, line in places], counts)
    file_windows = [np.flatnonzero(file_of == f) for f in range(args.files)]

    def ids(stream: list[str]) -> np.ndarray:
        seen: dict[tuple[int, int], int] = {}
        out = np.empty(len(stream), dtype=np.int64)
        for i, key in enumerate(stream):
            at = place(key)
            out[i] = first[at] + seen.get(at, 0)
            seen[at] = seen.get(at, 0) + 1
        return out

    n = len(file_of)
    rng = np.random.default_rng([args.seed, 5])
    orders = {
        "ours": [ids(s) for s in ours_keys],
        "recipe": [recipe_order(file_windows, r, args.world, args.buffer, args.seed) for r in range(args.world)],
        "random": [rng.permutation(n)[r :: args.world] for r in range(args.world)],
    }
    edges = length_edges(length_of)
    corpus_shares = shares(bucket_of(length_of, edges), len(edges) + 1)[0]
    result: dict[str, Any] = {
        "shape": {
            "files": args.files,
            "windows": int(n),
            "windows_per_file": float(n / args.files),
            "records": len(places),
            "seq_length": args.seq_length,
            "buffer": args.buffer,
            "world": args.world,
            "batch_size": args.batch_size,
            "seed": args.seed,
        },
        "orders": {
            name: order_metrics(
                [length_of[s] for s in streams], [file_of[s] for s in streams], edges, corpus_shares, args.batch_size
            )
            for name, streams in orders.items()
        },
        "prepare_seconds": t_prepared - t0,
        "seconds": time.perf_counter() - t0,
    }
    return result


#: (column, key in an order's figures, format)
COLUMNS = (
    ("distance mean", "distance_mean", "{:.3f}"),
    ("distance p95", "distance_p95", "{:.3f}"),
    ("files/1000 mean", "files_per_block_mean", "{:.2f}"),
    ("files/1000 min", "files_per_block_min", "{:.0f}"),
)


def table_text(result: dict[str, Any]) -> str:
    """The shape, then one row per order and the recipe's figures divided by ours."""
    s = result["shape"]
    head = (
        f"{s['files']} files x {s['windows_per_file']:,.0f} windows of {s['seq_length']} tokens "
        f"({s['windows']:,} windows, {s['records']:,} records, each file sorted longest first); "
        f"recipe buffer {s['buffer']:,} windows ({s['buffer'] / s['windows_per_file']:.2f} of a file); "
        f"world {s['world']}, batch {s['batch_size']} per rank "
        f"(global {s['world'] * s['batch_size']}), seed {s['seed']}"
    )
    width = max(len(c) for c, _, _ in COLUMNS)
    lines = [head, "order          " + "  ".join(c.rjust(width) for c, _, _ in COLUMNS)]
    for name, figures in result["orders"].items():
        lines.append(f"{name:<15}" + "  ".join(f.format(figures[k]).rjust(width) for _, k, f in COLUMNS))
    ours, recipe = result["orders"]["ours"], result["orders"]["recipe"]
    ratio = [recipe[k] / ours[k] if ours[k] else float("nan") for _, k, _ in COLUMNS]
    lines.append("recipe / ours  " + "  ".join(f"{r:.2f}x".rjust(width) for r in ratio))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.workdir is not None:
        args.workdir.mkdir(parents=True, exist_ok=True)
        result = measure(args, args.workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="sorted-shuffle-") as tmp:
            result = measure(args, Path(tmp))
    print(table_text(result))
    print(f"({result['seconds']:.0f} s, of which writing and preparing the corpus {result['prepare_seconds']:.0f} s)")
    if args.json:
        print(json.dumps(result))
    return 0
