"""`bionemo-wds` command line: prepare, precompute-windows, inspect, show, verify, export-megatron,
contains, leakage, fit/validate/test/predict.

The `prepare` options are the fields of `PrepareOptions`; `bionemo_wds/cli/prepare.py` derives its
parser, YAML config keys (``--config configs/prepare_default.yaml``) and help text from them.
A parse error is one line naming the subcommand, with "did you mean" for a misspelt option
(`cli/parsing.py`).
"""

from __future__ import annotations

import importlib.util
import signal
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from bionemo_wds import __version__
from bionemo_wds.cli.exit_codes import report_error
from bionemo_wds.cli.export import add_export_parser, run_export
from bionemo_wds.cli.homology import (
    add_homology_parsers,
    add_verify_leakage,
    check_verify_leakage,
    run_contains,
    run_leakage,
    verify_leakage,
)
from bionemo_wds.cli.lightning import LIGHTNING_COMMANDS
from bionemo_wds.cli.parsing import SUBCOMMAND_OPTIONS, OneLineParser, parse_command
from bionemo_wds.cli.precompute import add_precompute_parser, run_precompute
from bionemo_wds.cli.prepare import BUNDLED_GENOME, add_prepare_parser, run_prepare
from bionemo_wds.cli.show import add_show_parser, run_show
from bionemo_wds.cli.where import add_where_parser, run_where
from bionemo_wds.prepare.report import inspect_text, verify

__all__ = ["BUNDLED_GENOME", "main"]


def run_benchmark(argv: list[str]) -> int:
    """`bionemo-wds benchmark`: the top-level `benchmarks` package of a source checkout (it is not in
    the wheel), found beside this package when it is not importable; without a checkout, one line
    saying where to run it, exit 2."""
    checkout = Path(__file__).resolve().parents[2]
    if importlib.util.find_spec("benchmarks") is None and (checkout / "benchmarks" / "run.py").is_file():
        sys.path.insert(0, str(checkout))
    try:
        from benchmarks.run import main as benchmark
    except ModuleNotFoundError as exc:
        if exc.name not in ("benchmarks", "benchmarks.run"):
            raise
        print(
            "bionemo-wds: error: benchmark runs from a source checkout (the benchmarks/ folder is not in the "
            "wheel): run python tools/benchmark.py in the repository",
            file=sys.stderr,
        )
        return 2
    return benchmark(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Run `bionemo-wds ARGV`; returns the exit code (0 ok, 1 verify found problems, 2 bad input)."""
    if argv is None and hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `bionemo-wds inspect DIR | head` ends quietly
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in LIGHTNING_COMMANDS:
        from bionemo_wds.cli.lightning import run

        return run(argv)
    if argv and argv[0] == "benchmark":
        return run_benchmark(argv[1:])
    parser = OneLineParser(
        prog="bionemo-wds",
        description=(
            "Genomes to WebDataset shards for DNA language models. "
            "Exit codes: 0 ok, 1 verify found problems, 2 bad input."
        ),
    )
    parser.add_argument("--version", action="version", version=f"bionemo-wds {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    commands = {
        "prepare": add_prepare_parser(sub),
        "precompute-windows": add_precompute_parser(sub, **SUBCOMMAND_OPTIONS),
    }
    ins = commands["inspect"] = sub.add_parser(
        "inspect",
        help="table of splits, shards, samples, tokens, bytes/token and length mix",
        description="Summarise a prepared dataset from its manifest (reads no shard).",
        **SUBCOMMAND_OPTIONS,
    )
    ins.add_argument("dataset", help="directory or URL (s3://bucket/run1, https://...) holding manifest.json")
    commands["show"] = add_show_parser(sub, **SUBCOMMAND_OPTIONS)
    commands["where"] = add_where_parser(sub, **SUBCOMMAND_OPTIONS)
    commands["export-megatron"] = add_export_parser(sub, **SUBCOMMAND_OPTIONS)
    commands.update(add_homology_parsers(sub, **SUBCOMMAND_OPTIONS))
    ver = commands["verify"] = sub.add_parser(
        "verify",
        help="re-read every shard and check it against the manifest",
        description="Check every shard's size, sha256, records, sample and token counts against "
        "manifest.json; exit 1 naming each bad shard.",
        **SUBCOMMAND_OPTIONS,
    )
    ver.add_argument("dataset", help="directory or URL (s3://bucket/run1, https://...) holding manifest.json")
    ver.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    add_verify_leakage(ver)
    sub.add_parser(
        "benchmark",
        add_help=False,
        help="prepare and load the same windows with bionemo-wds and the loaders it replaces; "
        "one table of speed, disk and memory (`bionemo-wds benchmark --help`)",
    )
    for command in LIGHTNING_COMMANDS:
        sub.add_parser(
            command,
            add_help=False,
            help=f"LightningCLI {command} of any LightningModule (default: the tiny DNA LM) on prepared shards "
            f"(`bionemo-wds {command} --help` lists trainer/model/data options)",
        )
    args = parse_command(parser, commands, argv)
    shown = warnings.formatwarning
    # a warning for the user (untagged sequences, ungrouped ones, stray shards) as one line, like errors
    warnings.formatwarning = lambda message, *_, **__: f"bionemo-wds {args.command}: warning: {message}\n"
    try:
        if args.command == "prepare":
            return run_prepare(args)
        if args.command == "precompute-windows":
            return run_precompute(args)
        if args.command == "inspect":
            print(inspect_text(args.dataset))
            return 0
        if args.command == "show":
            return run_show(args)
        if args.command == "where":
            return run_where(args)
        if args.command == "export-megatron":
            return run_export(args)
        if args.command == "contains":
            return run_contains(args)
        if args.command == "leakage":
            return run_leakage(args)
        check_verify_leakage(args)  # a bad --leakage option fails before the shards are read
        report = verify(args.dataset, progress=not args.quiet)
        if args.leakage:
            report.problems.extend(verify_leakage(args, report.ok))
        for note in report.notes:
            print(f"note: {note}", file=sys.stderr)
        for problem in report.problems:
            print(f"BAD {problem}", file=sys.stderr)
        print(
            f"verified {report.checked} shard(s), {report.samples} samples: "
            f"{'ok' if report.ok else f'{len(report.problems)} problem(s)'}"
        )
        return 0 if report.ok else 1
    except Exception as exc:
        code = report_error(args.command, exc)  # one line for a user error (`exit_codes.EXIT_CODES`)
        if code is None:
            raise
        return code
    finally:
        warnings.formatwarning = shown


if __name__ == "__main__":
    sys.exit(main())
