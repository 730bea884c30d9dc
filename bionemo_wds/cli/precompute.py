"""`bionemo-wds precompute-windows`: an Eden window database from a Parquet split list.

The same database the sharded-Eden ``precompute`` step writes (`prepare.sources.eden_windows`):
the Eden loader can read it, and `bionemo-wds prepare --source sharded-eden --window-db SPLIT=OUT.db`
takes exactly its windows, so shards hold the samples an Eden run would have seen.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from bionemo_wds.prepare.sources.eden_parquet import read_split_parquet
from bionemo_wds.prepare.sources.eden_windows import write_window_db

HELP = "write an Eden window database (the sharded-Eden precompute step) from a Parquet split list"
DESCRIPTION = (
    "Read SPLIT.parquet (columns contig_id, length; needs pip install 'bionemo-wds[eden]') and write "
    "OUT.db as the sharded-Eden precompute step does: contigs sorted by contig_id, 1 + (L - W) // S "
    "windows per contig of length L >= W (one for a shorter contig), window k starting at base k * S; "
    "tables metadata(key, value) and window_mappings(window_idx, sequence_id, window_in_seq_idx) with "
    "an index on sequence_id. OUT.db is written under a temporary name and renamed when complete, so "
    "an interrupted run leaves an existing OUT.db as it was. Use it with `bionemo-wds prepare "
    "--source sharded-eden --window-db SPLIT=OUT.db --seq-length W --stride S`."
)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, got {value}")
    return value


def add_precompute_parser(subparsers: Any, **kwargs: Any) -> argparse.ArgumentParser:
    """The `precompute-windows` subcommand of `bionemo-wds`, added to its `add_subparsers()` action
    (`kwargs`: more keyword arguments of its parser)."""
    parser = subparsers.add_parser("precompute-windows", help=HELP, description=DESCRIPTION, **kwargs)
    parser.add_argument("parquet", metavar="SPLIT.parquet", help="the split's contigs: columns contig_id, length")
    parser.add_argument(
        "out",
        metavar="OUT.db",
        help="the window database to write (its directory must exist; an existing file is replaced when done)",
    )
    parser.add_argument(
        "--window-size",
        type=_positive,
        default=8192,
        metavar="W",
        help="Eden's window size: the model's sequence length in tokens, i.e. prepare's --seq-length (default: 8192)",
    )
    parser.add_argument(
        "--stride",
        type=_positive,
        default=7992,
        metavar="S",
        help="bases between window starts, i.e. prepare's --stride (default: 7992)",
    )
    parser.add_argument(
        "--window-min-length-threshold",
        type=_non_negative,
        default=0,
        metavar="N",
        help="leave out windows holding fewer than N bases, as Eden's option of that name (default: 0, keep all)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no summary line")
    return parser


def run_precompute(args: argparse.Namespace) -> int:
    """Run `bionemo-wds precompute-windows` for parsed `args`; bad input raises `BadInputError` (exit 2)."""
    t0 = time.perf_counter()
    ids, lengths = read_split_parquet(args.parquet)
    meta = write_window_db(ids, lengths, args.out, args.window_size, args.stride, args.window_min_length_threshold)
    if not args.quiet:
        print(
            f"wrote {args.out}: {meta['total_windows']} windows of {meta['distinct_sequences']} contigs "
            f"(window_size {meta['window_size']}, stride {meta['stride']}, "
            f"window_min_length_threshold {meta['window_min_length_threshold']}) in {time.perf_counter() - t0:.2f} s"
        )
    return 0
