"""`bionemo-wds` command line: prepare, inspect, verify, and fit/validate/test/predict (LightningCLI).

Options can also come from a YAML file (``--config configs/prepare_default.yaml``): its keys are
the option names with dashes or underscores; options given on the command line win.
"""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import Any, Sequence

import yaml

from bionemo_wds import __version__
from bionemo_wds.errors import BadInputError
from bionemo_wds.cli.lightning import LIGHTNING_COMMANDS
from bionemo_wds.prepare import PrepareOptions, PrepareResult, prepare
from bionemo_wds.prepare.report import inspect_text, verify
from bionemo_wds.prepare.sources.fasta import ON_INVALID, TAG_MODES
from bionemo_wds.prepare.windows import TAIL_MODES

BUNDLED_GENOME = Path(__file__).parent / "data" / "klebsiella_fragmented_assembly.fa.gz"


def _ratios(text: str) -> list[float]:
    try:
        values = [float(x) for x in text.split(",")]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected three comma-separated numbers, got {text!r}") from exc
    if len(values) != 3:
        raise argparse.ArgumentTypeError(f"expected three ratios train,val,test, got {text!r}")
    return values


def _split_list(text: str) -> tuple[str, str]:
    split, sep, path = text.partition("=")
    if not sep or split not in ("train", "val", "test"):
        raise argparse.ArgumentTypeError(f"expected SPLIT=FILE with SPLIT one of train, val, test; got {text!r}")
    return split, path


def _prepare_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "prepare",
        help="FASTA to split, windowed, tokenized WebDataset tar shards plus manifest.json",
        description=(
            "Catalog every sequence of the FASTA inputs (plain, gzip or bgzip; files or directories "
            "of them), split whole sequences into train/val/test, cut each into windows, and write "
            "<out>/<split>/<prefix>-NNNNNN.tar shards and <out>/manifest.json. The output is "
            "byte-identical for any --workers; an interrupted run resumes when started again with "
            "the same options; a finished run with the same options does nothing."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("inputs", nargs="*", help="FASTA files or directories (default: the bundled Klebsiella assembly)")
    p.add_argument("--out", "-o", required=False, help="output directory (new, empty, or an earlier run's)")
    p.add_argument("--config", help="YAML file with any of these options (keys like seq_length, inputs, out)")
    p.add_argument("--seq-length", type=int, default=8192,
                   help="tokens per model sample; windows hold seq_length - 3 - longest tag bases, leaving room for BOS, tag, SEP, EOS")
    p.add_argument("--stride", type=int, default=7992, help="bases between window starts (at most the window length)")
    p.add_argument("--tail", choices=TAIL_MODES, default="end",
                   help="'end': add a last window aligned to the sequence end so no base is lost; 'drop': Eden's counts, up to stride-1 tail bases dropped")
    p.add_argument("--split", type=_ratios, default=[0.8, 0.1, 0.1],
                   help="train,val,test ratios for the length-stratified split (buckets <10kb, <100kb, longer); 0 leaves a split out")
    p.add_argument("--split-list", type=_split_list, action="append", metavar="SPLIT=FILE",
                   help="explicit split: FILE has one sequence name per line; repeat per split; sequences in no list are left out")
    p.add_argument("--seed", type=int, default=42, help="seed of the split and of the window order in shards")
    p.add_argument("--tags", choices=TAG_MODES, default="none",
                   help="control tag per sequence: none; description (header text after the name); lineage (a d__...;p__... lineage in the header, as |d__...|)")
    p.add_argument("--on-invalid", choices=ON_INVALID, default="error",
                   help="a base that is not an IUPAC code: error (name sequence and position), skip the sequence, or replace it with N")
    p.add_argument("--samples-per-shard", type=int, default=None,
                   help="windows per shard (default: about 256 MB of tokens per shard, 32k windows at 8 kb)")
    p.add_argument("--windows-per-record", type=int, default=None,
                   help="windows per tar member (default: about 128 kB, 16 at 8 kb; 1 gives one member per window)")
    p.add_argument("--prefix", default="wdshards", help="shard file name prefix")
    p.add_argument("--compress", choices=("none", "zstd"), default="none",
                   help="record codec: zstd stores DNA at about 2 bits per base (format version 2; needs bionemo-wds[zstd])")
    p.add_argument("--compress-level", type=int, default=17,
                   help="zstd level (17: ~0.27 bytes/base, ~5 MB/s per core to write, fast to read)")
    p.add_argument("--workers", type=int, default=None, help="shard writer processes (default: all cores); output does not depend on it")
    p.add_argument("--overwrite", action="store_true", help="replace an earlier run with different options in --out")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bars")
    return p


def _apply_config(parser: argparse.ArgumentParser, args: argparse.Namespace, argv: Sequence[str]) -> argparse.Namespace:
    """Re-parse with the YAML file's values as defaults, so the command line still wins."""
    if not args.config:
        return args
    try:
        data = yaml.safe_load(Path(args.config).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise BadInputError(f"config {args.config} cannot be read: {exc}") from exc
    if not isinstance(data, dict):
        raise BadInputError(f"config {args.config} must be a mapping of option names to values")
    known = {a.dest for a in parser._actions}
    defaults: dict[str, Any] = {}
    for key, value in data.items():
        dest = key.replace("-", "_")
        if dest not in known or dest in ("config", "help"):
            raise BadInputError(f"config {args.config}: unknown option {key!r}")
        if dest == "split_list" and isinstance(value, dict):
            value = list(value.items())
        defaults[dest] = value
    parser.set_defaults(**defaults)
    return parser.parse_args(argv)


def _print_summary(result: PrepareResult) -> None:
    m = result.manifest
    n_bases = sum(s["n_bases"] for s in m["splits"].values())
    size = sum(sh["bytes"] for s in m["splits"].values() for sh in s["shards"])
    if result.status == "unchanged":
        print(f"{result.out}: already prepared with these options; nothing to do")
    else:
        rate = n_bases / 1e6 / max(result.seconds, 1e-9)
        print(f"{result.status} {result.shards_written} shard(s)"
              f"{f', reused {result.shards_reused}' if result.shards_reused else ''} in {result.seconds:.2f} s "
              f"({rate:.1f} Mbp/s); {size / max(n_bases, 1):.3f} bytes on disk per input base")
    print(inspect_text(result.out))


def _cmd_prepare(parser, args, argv) -> int:
    args = _apply_config(parser, args, argv)
    if not args.out:
        raise BadInputError("prepare needs --out DIR (or 'out:' in the --config file)")
    opts = PrepareOptions(
        seq_length=args.seq_length, stride=args.stride, tail=args.tail, split=args.split,
        split_lists=dict(args.split_list) if args.split_list else None, seed=args.seed, tags=args.tags,
        on_invalid=args.on_invalid, samples_per_shard=args.samples_per_shard,
        windows_per_record=args.windows_per_record, prefix=args.prefix, compress=args.compress,
        compress_level=args.compress_level, workers=args.workers,
        overwrite=args.overwrite, progress=not args.quiet,
    )
    inputs = args.inputs or [str(BUNDLED_GENOME)]
    _print_summary(prepare(inputs, args.out, opts))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None and hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `bionemo-wds inspect DIR | head` ends quietly
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in LIGHTNING_COMMANDS:
        from bionemo_wds.cli.lightning import run

        return run(argv)
    if argv and argv[0] == "benchmark":
        from bionemo_wds.benchmark.run import main as benchmark

        return benchmark(argv[1:])
    parser = argparse.ArgumentParser(
        prog="bionemo-wds",
        description="Genomes to WebDataset shards for DNA language models. Exit codes: 0 ok, 1 verify found problems, 2 bad input.",
    )
    parser.add_argument("--version", action="version", version=f"bionemo-wds {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    prep = _prepare_parser(sub)
    ins = sub.add_parser("inspect", help="table of splits, shards, samples, tokens, bytes/token and length mix",
                         description="Summarise a prepared dataset from its manifest (reads no shard).")
    ins.add_argument("dataset", help="directory holding manifest.json")
    ver = sub.add_parser("verify", help="re-read every shard and check it against the manifest",
                         description="Check every shard's size, sha256, records, sample and token counts against "
                                     "manifest.json; exit 1 naming each bad shard.")
    ver.add_argument("dataset", help="directory holding manifest.json")
    ver.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    sub.add_parser("benchmark", add_help=False,
                   help="prepare and load the same windows with bionemo-wds and the loaders it replaces; "
                        "one table of speed, disk and memory (`bionemo-wds benchmark --help`)")
    for command in LIGHTNING_COMMANDS:
        sub.add_parser(command, add_help=False,
                       help=f"LightningCLI {command} of the tiny DNA LM on prepared shards "
                            f"(`bionemo-wds {command} --help` lists trainer/model/data options)")
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            return _cmd_prepare(prep, args, argv[argv.index("prepare") + 1:])
        if args.command == "inspect":
            print(inspect_text(args.dataset))
            return 0
        report = verify(args.dataset, progress=not args.quiet)
        for problem in report.problems:
            print(f"BAD {problem}", file=sys.stderr)
        print(f"verified {report.checked} shard(s), {report.samples} samples: "
              f"{'ok' if report.ok else f'{len(report.problems)} problem(s)'}")
        return 0 if report.ok else 1
    except BadInputError as exc:
        print(f"bionemo-wds {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as exc:
        if args.command == "prepare":
            raise
        print(f"bionemo-wds {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
