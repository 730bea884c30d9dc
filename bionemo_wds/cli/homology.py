"""`bionemo-wds contains` and `leakage`, and the ``--leakage`` check of `verify`: what a dataset holds,
by sequence similarity (`bionemo_wds.homology`; needs the ``[homology]`` extra)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from typing import Any

from bionemo_wds.errors import OptionError
from bionemo_wds.homology.leakage import LeakageReport, leakage
from bionemo_wds.homology.membership import MIN_IDENTITY, check_identity, contains
from bionemo_wds.homology.sketch import KSIZE, SCALED, SketchParams
from bionemo_wds.prepare.executors.tasks import TaskPlace
from bionemo_wds.prepare.options import EXECUTORS

DATASET_HELP = "directory or URL (s3://bucket/run1, https://...) holding manifest.json"
IDENTITY_HELP = (
    f"least identity counted as the same sequence (default {MIN_IDENTITY}): the share of identical bases, "
    "estimated from shared k-mers as containment ** (1/k)"
)
CONTAINS_DESCRIPTION = (
    "For every sequence of the query files (FASTA or FASTQ, plain or gzip): whether it, or a sequence of at "
    "least --min-identity, is stored in each split of the dataset, and which stored sequences hold it. Reads "
    "every shard once, as tasks on --workers processes or a Dask cluster. Exact: the share of the query's "
    "distinct k-mers (canonical, k = --ksize) found among a stored sequence's decides; the same share "
    "estimated from FracMinHash sketches (one k-mer in --scaled, sourmash) is shown beside it. One line per "
    "query and split (TSV with a header), or JSON lines with --json. Exit 0 whether or not a query is found; "
    "2 for bad input."
)
LEAKAGE_DESCRIPTION = (
    "For every ordered pair of splits, and between each split and each --against file: the share of the first "
    "one's sequences (and bases) contained in some sequence of the second at an estimated identity of at least "
    "--min-identity (FracMinHash containment, k = --ksize, one k-mer in --scaled; sourmash). Sequences too short "
    "to hold 2 sketch hashes (about 2 x --scaled bases) cannot be judged and are counted apart. Reads every "
    "shard once, as tasks on --workers processes or a Dask cluster, and keeps the sketches beside the dataset "
    "(sketches/): a later call at the same --ksize and --scaled reads no shard. TSV with a header, or JSON "
    "lines with --json."
)


def add_sketch_options(parser: argparse.ArgumentParser, when: str = "") -> None:
    """--min-identity, --ksize, --scaled (shared by contains, leakage and verify --leakage); `when`
    starts each help text (verify's "with --leakage: ")."""
    parser.add_argument("--min-identity", type=float, default=MIN_IDENTITY, metavar="T", help=when + IDENTITY_HELP)
    parser.add_argument(
        "--ksize", type=int, default=KSIZE, metavar="K", help=f"{when}k-mer size, odd, 7-31 (default {KSIZE})"
    )
    parser.add_argument(
        "--scaled",
        type=int,
        default=SCALED,
        metavar="S",
        help=f"{when}sketches keep one k-mer in S (default {SCALED}); lower it for short sequences",
    )


def add_place_options(parser: argparse.ArgumentParser) -> None:
    """--workers, --executor, --scheduler: where the shards are read (the names `prepare` uses)."""
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="processes that read the shards, each a run of them (with --executor dask and no --scheduler: the "
        "LocalCluster's worker processes); the answer does not depend on it (default: all cores)",
    )
    parser.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="where the shard reads run: local (a pool of --workers processes) or dask (tasks on a "
        "dask.distributed cluster, --scheduler or a LocalCluster; needs bionemo-wds[dask]) (default: local)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="--executor dask: the scheduler, tcp://HOST:PORT or a scheduler file (*.json); every worker must "
        "see the dataset at the same path or URL (default: a LocalCluster of --workers processes here)",
    )


def place_of(args: argparse.Namespace) -> TaskPlace:
    """Where `contains` or `leakage` reads the shards: --executor, --workers (all cores by default),
    --scheduler (only with --executor dask: an `OptionError` otherwise), the progress bar unless --quiet."""
    if args.workers is not None and args.workers < 1:
        raise OptionError(f"--workers must be at least 1, got {args.workers}")
    if args.scheduler is not None and args.executor != "dask":
        raise OptionError(f"--scheduler {args.scheduler} needs --executor dask (the executor is {args.executor})")
    workers = args.workers or os.cpu_count() or 1
    return TaskPlace(args.executor, workers, args.scheduler, progress=not args.quiet)


def add_homology_parsers(subparsers: Any, **kwargs: Any) -> dict[str, argparse.ArgumentParser]:
    """The `contains` and `leakage` subcommands."""
    con = subparsers.add_parser(
        "contains",
        help="is a sequence (or a near-identical one) in the dataset? per split",
        description=CONTAINS_DESCRIPTION,
        **kwargs,
    )
    con.add_argument("dataset", help=DATASET_HELP)
    con.add_argument("queries", nargs="+", metavar="QUERY.fa", help="FASTA/FASTQ files of the sequences to look for")
    con.add_argument(
        "--split", action="append", dest="splits", help="look in this split only (repeatable; default: all)"
    )
    add_sketch_options(con)
    add_place_options(con)
    con.add_argument("--json", action="store_true", help="JSON lines (one per query, every match) instead of TSV")
    con.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    leak = subparsers.add_parser(
        "leakage",
        help="share of each split with a near-identical copy in another split or an eval set",
        description=LEAKAGE_DESCRIPTION,
        **kwargs,
    )
    leak.add_argument("dataset", help=DATASET_HELP)
    leak.add_argument(
        "--against",
        action="append",
        default=[],
        metavar="EVAL.fa",
        help="an external evaluation set (FASTA/FASTQ; repeatable)",
    )
    add_sketch_options(leak)
    add_place_options(leak)
    leak.add_argument("--json", action="store_true", help="JSON lines (one per pair) instead of TSV")
    leak.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    return {"contains": con, "leakage": leak}


def add_verify_leakage(parser: argparse.ArgumentParser) -> None:
    """`verify --leakage` and its threshold."""
    parser.add_argument(
        "--leakage",
        action="store_true",
        help="also measure leakage between the splits (as `bionemo-wds leakage`) and fail when a split leaks",
    )
    parser.add_argument(
        "--max-leakage",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="with --leakage: largest share of a split's sequences or bases allowed a near-identical copy in "
        "another split (default 0: any leak fails)",
    )
    add_sketch_options(parser, "with --leakage: ")


def run_contains(args: argparse.Namespace) -> int:
    """Print the answers; bad input raises (exit 2)."""
    answers = contains(
        args.dataset,
        args.queries,
        args.min_identity,
        SketchParams(args.ksize, args.scaled),
        args.splits,
        place=place_of(args),
    )
    if args.json:
        for m in answers:
            print(json.dumps(asdict(m)))
        return 0
    print("query\tlength\tkmers\tsplit\tfound\tbest_match\tidentity\tcontainment\tsketch_identity\tmatches")
    for m in answers:
        for a in m.splits:
            best = a.hits[0] if a.hits else None
            cells = [m.query, m.length, m.kmers, a.split, "yes" if a.found else "no"]
            if best is None:
                cells += ["", "", "", "", 0]
            else:
                sketch = "" if best.sketch_identity is None else f"{best.sketch_identity:.4f}"
                cells += [best.seq_id, f"{best.identity:.4f}", f"{best.containment:.4f}", sketch, len(a.hits)]
            print("\t".join(str(c) for c in cells))
    return 0


def leakage_lines(report: LeakageReport, as_json: bool) -> list[str]:
    """The report as TSV lines (a header first) or JSON lines."""
    if as_json:
        return [
            json.dumps({**asdict(leak), "sequence_share": leak.sequence_share, "base_share": leak.base_share})
            for leak in report.leaks
        ]
    lines = [
        "from\tto\tsequences\tleaked_sequences\tsequence_share\tbases\tleaked_bases\tbase_share\tunjudged\texample"
    ]
    for leak in report.leaks:
        example = f"{leak.examples[0][0]} ~ {leak.examples[0][1]} ({leak.examples[0][2]:.4f})" if leak.examples else ""
        lines.append(
            f"{leak.source}\t{leak.target}\t{leak.sequences}\t{leak.leaked_sequences}\t{leak.sequence_share:.4f}\t"
            f"{leak.bases}\t{leak.leaked_bases}\t{leak.base_share:.4f}\t{leak.unjudged_sequences}\t{example}"
        )
    return lines


def run_leakage(args: argparse.Namespace) -> int:
    """Print the report; bad input raises (exit 2)."""
    params = SketchParams(args.ksize, args.scaled)
    report = leakage(args.dataset, args.against, args.min_identity, params, place=place_of(args))
    print("\n".join(leakage_lines(report, args.json)))
    return 0


def check_verify_leakage(args: argparse.Namespace) -> None:
    """`verify --leakage`'s options, checked before the shards are read: an `OptionError` naming a bad one,
    or one given without --leakage (it would change nothing)."""
    if not args.leakage:
        defaults = {"max_leakage": 0.0, "min_identity": MIN_IDENTITY, "ksize": KSIZE, "scaled": SCALED}
        given = [f"--{name.replace('_', '-')}" for name, value in defaults.items() if getattr(args, name) != value]
        if given:
            raise OptionError(f"{given[0]} applies only with --leakage (verify measures no leakage without it)")
        return
    if not 0.0 <= args.max_leakage <= 1.0:
        raise OptionError(f"--max-leakage must be a share from 0 to 1, got {args.max_leakage}")
    check_identity(args.min_identity)
    SketchParams(args.ksize, args.scaled).check()


def verify_leakage(args: argparse.Namespace, shards_ok: bool = True) -> list[str]:
    """`verify --leakage`: one problem line per pair of splits leaking above ``--max-leakage``; not
    measured (a note says so) when verify found the shards damaged, whose problems are then the answer.
    Its options were checked by `check_verify_leakage` before the shards were read."""
    if not shards_ok:
        print("note: leakage not measured: the shards have problems (listed below)", file=sys.stderr)
        return []
    report = leakage(
        args.dataset, (), args.min_identity, SketchParams(args.ksize, args.scaled), progress=not args.quiet
    )
    for leak in report.leaks:
        print(
            f"leakage {leak.source} -> {leak.target}: {leak.leaked_sequences} of {leak.sequences} sequences, "
            f"{leak.base_share:.2%} of bases",
            file=sys.stderr,
        )
    return [
        f"leakage: {leak.leaked_sequences} of {leak.sequences} sequences of {leak.source} "
        f"({leak.base_share:.2%} of its bases) have a copy of identity >= {report.min_identity} in {leak.target}, "
        f"above --max-leakage {args.max_leakage}"
        + (f"; e.g. {leak.examples[0][0]} ~ {leak.examples[0][1]}" if leak.examples else "")
        for leak in report.above(args.max_leakage)
    ]
