"""`bionemo-wds prepare`: its parser, YAML config keys and `--help`, all derived from `PrepareOptions`.

Every option except the run's `INPUTS`, `--out` and `--config` is a field of `PrepareOptions`
(`bionemo_wds/prepare/options.py`), which carries its help text, choices and parser type in the
field's `CliOption` metadata; this module only turns `dataclasses.fields(PrepareOptions)` into
argparse arguments and config keys. No default is restated here: the parser leaves options that
are not given out of the namespace (`argument_default=SUPPRESS`), and whatever neither the command
line nor the config file sets falls back to the dataclass default when `PrepareOptions` is built.

Precedence: command line, then `--config FILE.yaml`, then the dataclass defaults. Config keys are
the long option names with dashes or underscores (`seq_length`, `split_list`, `quiet`, `inputs`,
`out`); a list value is the comma form (`split: [0.8, 0.1, 0.1]`), and a repeatable option takes
a list of its values or a mapping (`split_list: {train: FILE}`).

`--evo2-config FILE` reads bionemo's Evo2 preprocessing YAML instead (`prepare.evo2_config`): each
of its entries is one run, whose INPUTS and --out come from the file (giving them too is an error),
whose fields set the options they map to, and to which the command line and `--config` may add any
option the file does not set (setting one both ways is an error, never a silent override).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bionemo_wds.cli.parsing import SUBCOMMAND_OPTIONS, OneLineParser, parse_command
from bionemo_wds.cli.prepare_summary import print_summary
from bionemo_wds.errors import BadInputError
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.evo2_config import read_evo2_config
from bionemo_wds.prepare.option_fields import CliOption, cli_of, flags_of
from bionemo_wds.prepare.request import request_of
from bionemo_wds.storage.location import is_url

#: The genome shipped as package data, for a first try (`configs/prepare_demo.yaml` names it); never a default.
BUNDLED_GENOME = Path(__file__).resolve().parents[1] / "data" / "klebsiella_fragmented_assembly.fa.gz"

#: Config keys (and namespace names) of the run that are not `PrepareOptions` fields.
RUN_KEYS = ("inputs", "out")

HELP = (
    "FASTA (or sharded-Eden SQLite, HDF5, Megatron, JSON lines, Parquet) to split, windowed, tokenized WebDataset "
    "tar shards plus manifest.json"
)
#: INPUTS and --out are required, on the command line or in the --config file: the usage says so
#: (argparse's own would show both as optional, since a config file may give them).
USAGE = (
    "%(prog)s INPUTS [INPUTS ...] --out DIR|URL [options]\n"
    "       %(prog)s --config FILE.yaml [INPUTS ...] [--out DIR|URL] [options]\n"
    "       %(prog)s --evo2-config PREPROCESS.yaml [options]"
)
DESCRIPTION = (
    "Catalog every sequence of the inputs (--source fasta: FASTA files or directories, plain, gzip or "
    "bgzip, split gzip parts x.fasta.gz.aa ..., tar archives of FASTA; sharded-eden: a directory of per-sample "
    "SQLite databases; hdf5: pre-tokenized rows; megatron: indexed datasets; bed: intervals over --reference; "
    "jsonl, parquet: records whose text field holds the sequence), check "
    "every base, split whole sequences (or whole groups, --group-by) into train/val/test, cut each "
    "into windows, and write "
    "<out>/<split>/<prefix>-NNNNNN.tar shards and <out>/manifest.json. The output is "
    "byte-identical for any --workers and --executor (a local process pool or a Dask cluster); an "
    "interrupted run (or one whose cluster was lost) resumes when started again with "
    "the same options; a finished run with the same options does nothing."
)


@dataclass(frozen=True)
class OptionSpec:
    """One `PrepareOptions` field as the command line and the config file see it."""

    field: dataclasses.Field
    cli: CliOption
    #: Option strings, the long one first (`--seq-length`, or the `CliOption.flags`).
    flags: tuple[str, ...]
    #: One command-line value -> field value; None for a switch, which takes no value.
    parse: Callable[[str], Any] | None

    @property
    def name(self) -> str:
        """The field name, also the argparse dest."""
        return self.field.name

    @property
    def key(self) -> str:
        """The config key: the long option name with underscores (`seq_length`, `split_list`, `quiet`)."""
        return self.flags[0].lstrip("-").replace("-", "_")

    @property
    def default(self) -> Any:
        """The dataclass default."""
        return self.field.default


def _value_type(hint: Any, name: str) -> Callable[[str], Any]:
    """`int` for `int` or `int | None` (likewise str, float): the parser of a plain field."""
    if hint in (int, float, str):
        return hint
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) == 1 and args[0] in (int, float, str):
            return args[0]
    raise TypeError(f"PrepareOptions.{name}: type {hint} needs a parse= in its option(...)")


@functools.cache
def option_specs() -> tuple[OptionSpec, ...]:
    """One `OptionSpec` per `PrepareOptions` field, in field order; a field without a `CliOption` is an error."""
    hints = typing.get_type_hints(PrepareOptions)
    specs = []
    for f in dataclasses.fields(PrepareOptions):
        cli = cli_of(f)
        parse = None if cli.switch is not None else cli.parse or _value_type(hints[f.name], f.name)
        specs.append(OptionSpec(f, cli, flags_of(f), parse))
    return tuple(specs)


def _shown(value: Any) -> str:
    """A default as it would be typed on the command line (`0.8,0.1,0.1` for a sequence)."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def help_text(spec: OptionSpec) -> str:
    """The `--help` line of one option: its help, then its default once (switches have none)."""
    shown = spec.cli.default_help
    if shown is None and spec.cli.switch is None and spec.default is not None:
        shown = _shown(spec.default)
    text = spec.cli.help if shown is None else f"{spec.cli.help} (default: {shown})"
    return text.replace("%", "%%")  # argparse %-formats help strings


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the run's INPUTS/--out/--config and one option per `PrepareOptions` field to `parser`.

    `parser` must have been made with `argument_default=argparse.SUPPRESS`, so that the namespace
    holds only what was given and `request_from` can tell it from the config and the defaults.
    """
    run = parser.add_argument_group(
        "inputs and output (both required, here or as 'inputs:' and 'out:' in --config; or from --evo2-config)"
    )
    run.add_argument(
        "inputs",
        nargs="*",
        metavar="INPUTS",
        help="FASTA files or directories (plain, gzip or bgzip; split gzip parts NAME.gz.aa ... read as one "
        "stream; .tar archives of FASTA files, each member an input); with --source sharded-eden one "
        "SEQUENCE_DB_DIR, with --source hdf5 one FILE.h5, with --source bed BED files, with --source jsonl or "
        "parquet files or directories of them; required",
    )
    run.add_argument(
        "--out",
        "-o",
        metavar="DIR|URL",
        help="output directory (new, empty, or an earlier run's) or object-store prefix such as s3://bucket/run1 "
        "(endpoint and credentials from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...); required",
    )
    run.add_argument(
        "--config",
        metavar="FILE.yaml",
        help="YAML file with any of these options, keys like seq_length, split, inputs, out; the command line wins",
    )
    run.add_argument(
        "--evo2-config",
        metavar="PREPROCESS.yaml",
        help="bionemo's Evo2 preprocessing config (a list of Evo2PreprocessingConfig entries, or one): each "
        "entry is one run into OUTPUT_DIR/OUTPUT_PREFIX of its datapaths, with train/valid/test_split as --split, "
        "seed, workers, overwrite, force_uppercase as --case upper, taxonomy_data as --tags substring --tag-map; "
        "fields we do differently (reverse complements and lineage dropout are drawn at load) or not at all "
        "(other tokenizers, transcribe, nnn_filter) are refused unless at their defaults. INPUTS and --out come "
        "from the file; other options may be added where the file does not set them",
    )
    group = parser.add_argument_group("prepare options (also the --config keys, with - or _)")
    for spec in option_specs():
        kwargs: dict[str, Any] = {"dest": spec.name, "help": help_text(spec)}
        if spec.cli.switch is not None:
            kwargs.update(action="store_const", const=spec.cli.switch)
        else:
            kwargs.update(type=spec.parse, action="append" if spec.cli.collect else "store")
            if spec.cli.choices:
                kwargs["choices"] = spec.cli.choices
            else:
                kwargs["metavar"] = spec.cli.metavar or ("N" if spec.parse is int else spec.key.upper())
        group.add_argument(*spec.flags, **kwargs)
    return parser


def add_prepare_parser(subparsers: Any) -> argparse.ArgumentParser:
    """The `prepare` subcommand of `bionemo-wds`, added to its `add_subparsers()` action."""
    parser = subparsers.add_parser(
        "prepare",
        help=HELP,
        description=DESCRIPTION,
        usage=USAGE,
        argument_default=argparse.SUPPRESS,
        **SUBCOMMAND_OPTIONS,
    )
    return add_arguments(parser)


def prepare_parser() -> argparse.ArgumentParser:
    """A stand-alone `bionemo-wds prepare` parser (for `parse_request` and tests)."""
    parser = OneLineParser(
        prog="bionemo-wds prepare",
        description=DESCRIPTION,
        usage=USAGE,
        argument_default=argparse.SUPPRESS,
        **SUBCOMMAND_OPTIONS,
    )
    return add_arguments(parser)


@dataclass(frozen=True)
class PrepareRequest:
    """One `bionemo-wds prepare` run: `prepare(inputs, out, options)`."""

    inputs: list[str]
    out: str
    options: PrepareOptions


def _config_value(spec: OptionSpec, value: Any) -> Any:
    """A YAML value of one option -> the field value, checked like the same value on the command line."""
    cli, parse = spec.cli, spec.parse
    if parse is None:  # a switch
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {value!r}")
        return cli.switch if value else not cli.switch
    if value is None:
        if spec.default is None:
            return None
        raise ValueError(f"needs a value (default: {_shown(spec.default)})")
    if cli.collect is not None:  # a repeatable option: a list of its values, or a KEY: VALUE mapping
        if isinstance(value, Mapping):
            value = [f"{k}={v}" for k, v in value.items()]
        elif not isinstance(value, list):
            value = [value]
        texts = [f"{v[0]}={v[1]}" if isinstance(v, list) and len(v) == 2 else v for v in value]
        if not all(isinstance(t, str) for t in texts):
            raise ValueError(f"expected {cli.metavar or 'a value'} items, got {value!r}")
        return cli.collect([parse(t) for t in texts])
    if isinstance(value, (bool, Mapping)):
        raise ValueError(f"expected {cli.metavar or spec.key.upper()}, got {value!r}")
    text = _shown(value)
    try:
        parsed = parse(text)
    except ValueError as exc:
        raise ValueError(f"invalid {getattr(parse, '__name__', 'value')} value: {value!r}") from exc
    if cli.choices and parsed not in cli.choices:
        raise ValueError(f"{parsed!r} is not one of {', '.join(cli.choices)}")
    return parsed


def _run_value(key: str, value: Any) -> Any:
    """A YAML value of `inputs` (one path or a list of them) or `out` (one path)."""
    paths = value if key == "inputs" and isinstance(value, list) else [value]
    if not all(isinstance(p, (str, int, float)) and not isinstance(p, bool) for p in paths):
        raise ValueError(f"expected {'paths' if key == 'inputs' else 'a path'}, got {value!r}")
    return [str(p) for p in paths] if key == "inputs" else str(value)


def read_config(path: str) -> dict[str, Any]:
    """The YAML file's options as field (or run key) -> value; any problem is a one-line `BadInputError`."""
    try:
        data = yaml.safe_load(Path(path).read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise BadInputError(f"config {path} cannot be read: {' '.join(str(exc).split())}") from exc
    if not isinstance(data, dict):
        raise BadInputError(f"config {path} must be a mapping of option names to values")
    by_key = {spec.key: spec for spec in option_specs()}
    values: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for key, value in data.items():
        norm = str(key).replace("-", "_")
        if norm not in by_key and norm not in RUN_KEYS:
            raise BadInputError(f"config {path}: unknown option {key!r}")
        if norm in seen:
            raise BadInputError(f"config {path}: {seen[norm]!r} and {key!r} are the same option")
        seen[norm] = key
        try:
            if norm in RUN_KEYS:
                values[norm] = _run_value(norm, value)
            else:
                values[by_key[norm].name] = _config_value(by_key[norm], value)
        except (ValueError, argparse.ArgumentTypeError) as exc:
            raise BadInputError(f"config {path}: {key}: {exc}") from exc
    return values


def _given(args: argparse.Namespace) -> dict[str, Any]:
    """The run keys and options given on the command line (repeated ones collected)."""
    specs = option_specs()
    given = {name: getattr(args, name) for name in (*RUN_KEYS, *(s.name for s in specs)) if hasattr(args, name)}
    for spec in specs:
        if spec.cli.collect is not None and spec.name in given:
            given[spec.name] = spec.cli.collect(given[spec.name])
    return given


def request_from(args: argparse.Namespace) -> PrepareRequest:
    """The run that parsed `args` ask for: command line over `--config` over the dataclass defaults
    (one run; `requests_from` also takes `--evo2-config`)."""
    config = getattr(args, "config", None)
    return _request({**(read_config(config) if config else {}), **_given(args)})


def requests_from(args: argparse.Namespace) -> list[PrepareRequest]:
    """The runs that parsed `args` ask for: one per `--evo2-config` entry, else `request_from`'s one.

    Every run is checked before the first starts, so a bad entry stops the command with nothing written.
    """
    evo2 = getattr(args, "evo2_config", None)
    if evo2 is None:
        return [request_from(args)]
    config = getattr(args, "config", None)
    base = {**(read_config(config) if config else {}), **_given(args)}
    for key in RUN_KEYS:
        if base.get(key):
            where = "INPUTS" if key == "inputs" else "--out"
            raise BadInputError(
                f"--evo2-config {evo2} gives {where} (datapaths, output_dir/output_prefix): leave {where} out"
            )
    flags = {spec.name: spec.flags[0] for spec in option_specs()}
    requests = []
    runs = read_evo2_config(evo2)
    for run in runs:
        both = [name for name in run.options if name in base]
        if both:
            raise BadInputError(
                f"--evo2-config {evo2} sets {flags[both[0]]} (from its fields), which the command line "
                "or --config sets too: give it one way"
            )
        request = _request({**base, **run.options, "inputs": run.inputs, "out": run.out})
        request_of(request.inputs, request.options)  # what `prepare` checks first, for every entry up front
        requests.append(request)
    for note in (note for run in runs for note in run.notes):
        print(f"note: {note}")
    return requests


def _request(values: dict[str, Any]) -> PrepareRequest:
    """`values` (run keys and option fields) -> the checked `PrepareRequest`."""
    specs = option_specs()
    if not values.get("inputs"):
        raise BadInputError(
            "prepare needs INPUTS: FASTA files or directories (or 'inputs:' in the --config file); "
            f"to try the bundled genome: bionemo-wds prepare {BUNDLED_GENOME} --out DIR"
        )
    if not values.get("out"):
        raise BadInputError("prepare needs --out DIR (or 'out:' in the --config file)")
    options = PrepareOptions(**{s.name: values[s.name] for s in specs if s.name in values})
    options.check()
    out = str(values["out"])
    check_out_path(out)
    return PrepareRequest([str(p) for p in values["inputs"]], out, options)


def check_out_path(out: str) -> None:
    """Refuse a local `--out` that cannot become a directory: it, or a directory above it, is a file."""
    if is_url(out):
        return
    for path in (Path(out), *Path(out).parents):
        if path.exists() or path.is_symlink():
            if not path.is_dir():
                where = "" if path == Path(out) else f" is under {path}, which"
                raise BadInputError(f"--out {out}{where} is not a directory")
            return


def parse_request(argv: Sequence[str]) -> PrepareRequest:
    """`bionemo-wds prepare ARGV` -> the run it asks for, without running it."""
    return request_from(parse_command(prepare_parser(), {}, argv))


def run_prepare(args: argparse.Namespace) -> int:
    """Run `bionemo-wds prepare` for parsed `args`; bad input raises `BadInputError` (exit 2 in `main`)."""
    for request in requests_from(args):
        print_summary(prepare(request.inputs, request.out, request.options))
    return 0
