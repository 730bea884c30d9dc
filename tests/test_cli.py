"""`bionemo-wds prepare` options come from `PrepareOptions` alone: the command line, the YAML config
keys and `--help` cover every field, with the dataclass defaults, and agree with each other.

`SAMPLES` gives one non-default value per field in its three spellings; it must name every field of
`PrepareOptions`, so a new field fails here until it has an option and an entry.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml
from conftest import KLEBSIELLA, LAMBDA

from bionemo_wds.cli.main import main
from bionemo_wds.cli.prepare import BUNDLED_GENOME, PrepareRequest, option_specs, parse_request
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import CASE_MODES, CODECS, LAYOUTS
from bionemo_wds.prepare import PrepareOptions
from bionemo_wds.prepare.options import EXECUTORS, SOURCE_KINDS
from bionemo_wds.prepare.scan_tasks import ON_INVALID
from bionemo_wds.prepare.splits import SPLIT_RULES
from bionemo_wds.prepare.windows import TAIL_MODES

CLI_DIR = Path(__file__).resolve().parents[1] / "bionemo_wds" / "cli"

#: field -> (command-line tokens, config entry, resulting field value); config keys mix dashes and underscores.
SAMPLES: dict[str, tuple[list[str], dict, object]] = {
    "source": (["--source", "sharded-eden"], {"source": "sharded-eden"}, "sharded-eden"),
    "seq_length": (["--seq-length", "1024"], {"seq_length": 1024}, 1024),
    "stride": (["--stride", "1000"], {"stride": 1000}, 1000),
    "tail": (["--tail", "drop"], {"tail": "drop"}, "drop"),
    "layout": (["--layout", "sequences"], {"layout": "sequences"}, "sequences"),
    "split": (["--split", "0.5,0.25,0.25"], {"split": [0.5, 0.25, 0.25]}, (0.5, 0.25, 0.25)),
    "split_rule": (["--split-rule", "longest-first"], {"split-rule": "longest-first"}, "longest-first"),
    "split_lists": (
        ["--split-list", "train=a.txt", "--split-list", "val=b.txt"],
        {"split_list": {"train": "a.txt", "val": "b.txt"}},
        {"train": "a.txt", "val": "b.txt"},
    ),
    "split_from_names": (["--split-from-names"], {"split_from_names": True}, True),
    "split_parquet": (
        ["--split-parquet", "train=t.parquet", "--split-parquet", "test=u.parquet"],
        {"split-parquet": {"train": "t.parquet", "test": "u.parquet"}},
        {"train": "t.parquet", "test": "u.parquet"},
    ),
    "window_db": (["--window-db", "val=v.db"], {"window_db": ["val=v.db"]}, {"val": "v.db"}),
    "x_key": (["--x-key", "tokens"], {"x_key": "tokens"}, "tokens"),
    "y_key": (["--y-key", "label"], {"y-key": "label"}, "label"),
    "reference": (["--reference", "hg38.fa"], {"reference": "hg38.fa"}, "hg38.fa"),
    "text_column": (["--text-column", "sequence"], {"text_column": "sequence"}, "sequence"),
    "id_column": (["--id-column", "record"], {"id-column": "record"}, "record"),
    "group_by": (["--group-by", "regex:^(\\w+)_"], {"group_by": "regex:^(\\w+)_"}, "regex:^(\\w+)_"),
    "split_at_n": (["--split-at-n", "100"], {"split_at_n": 100}, 100),
    "seed": (["--seed", "7"], {"seed": 7}, 7),
    "tags": (["--tags", "lineage"], {"tags": "lineage"}, "lineage"),
    "tag_map": (
        ["--tag-map", "GCF_1=|d__Bacteria|", "--tag-map", "a=b=c"],
        {"tag_map": {"GCF_1": "|d__Bacteria|", "a": "b=c"}},
        {"GCF_1": "|d__Bacteria|", "a": "b=c"},
    ),
    "strict_tags": (["--strict-tags"], {"strict-tags": True}, True),
    "case": (["--case", "upper"], {"case": "upper"}, "upper"),
    "on_invalid": (["--on-invalid", "replace-N"], {"on-invalid": "replace-N"}, "replace-N"),
    "samples_per_shard": (["--samples-per-shard", "64"], {"samples-per-shard": 64}, 64),
    "windows_per_record": (["--windows-per-record", "4"], {"windows_per_record": 4}, 4),
    "prefix": (["--prefix", "lam"], {"prefix": "lam"}, "lam"),
    "compress": (["--compress", "zstd"], {"compress": "zstd"}, "zstd"),
    "compress_level": (["--compress-level", "3"], {"compress-level": 3}, 3),
    "workers": (["--workers", "2"], {"workers": 2}, 2),
    "executor": (["--executor", "dask"], {"executor": "dask"}, "dask"),
    "scheduler": (
        ["--scheduler", "tcp://127.0.0.1:8786"],
        {"scheduler": "tcp://127.0.0.1:8786"},
        "tcp://127.0.0.1:8786",
    ),
    "retries": (["--retries", "5"], {"retries": 5}, 5),
    "overwrite": (["--overwrite"], {"overwrite": True}, True),
    "progress": (["--quiet"], {"quiet": True}, False),
}
FIELDS = [f.name for f in dataclasses.fields(PrepareOptions)]


def write_config(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def all_samples() -> tuple[list[str], dict, dict]:
    """Every sample at once: (command-line tokens, config mapping, field values)."""
    argv, config, values = [], {}, {}
    for name, (tokens, entry, value) in SAMPLES.items():
        argv += tokens
        config.update(entry)
        values[name] = value
    return argv, config, values


def help_entries(text: str) -> list[tuple[set[str], str]]:
    """(option strings, whole entry with whitespace collapsed) of each option listed by `--help`."""
    body = text.split("\n\n", 1)[1]  # after the usage, which names every option too
    entries: list[list[str]] = []
    for line in body.splitlines():
        if re.match(r"  [-A-Z]", line):
            entries.append([line])
        elif entries and line.startswith("   "):
            entries[-1].append(line)
    result = []
    for lines in entries:
        head = re.match(r"  (\S.*?)(?:\s{2,}|$)", lines[0])
        assert head is not None, lines[0]
        flags = {part.split()[0] for part in head.group(1).split(", ")}
        result.append((flags, " ".join(" ".join(lines).split())))
    return result


def test_samples_name_every_field_with_a_value_other_than_its_default():
    assert list(SAMPLES) == FIELDS, "add the new PrepareOptions field to SAMPLES (and give it an option(...))"
    for f in dataclasses.fields(PrepareOptions):
        assert SAMPLES[f.name][2] != f.default, f.name


def test_parsed_defaults_are_the_dataclass_defaults():
    request = parse_request(["a.fa", "--out", "x"])
    assert request == PrepareRequest(["a.fa"], "x", PrepareOptions())
    for f in dataclasses.fields(PrepareOptions):
        assert getattr(request.options, f.name) == f.default, f.name


@pytest.mark.parametrize("name", FIELDS)
def test_every_field_has_an_option_that_sets_it(name):
    tokens, _, value = SAMPLES[name]
    options = parse_request(["a.fa", "-o", "x", *tokens]).options
    assert getattr(options, name) == value
    assert options == dataclasses.replace(PrepareOptions(), **{name: value})


def test_every_field_has_one_help_entry_with_its_default_once(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["prepare", "--help"])
    assert exit_info.value.code == 0
    entries = help_entries(capsys.readouterr().out)
    for f in dataclasses.fields(PrepareOptions):
        flag = SAMPLES[f.name][0][0]
        matching = [text for flags, text in entries if flag in flags]
        assert len(matching) == 1, f"{flag}: {len(matching)} help entries"
        text = matching[0]
        assert len(text.split()) > 3, f"{flag} has no help text: {text!r}"
        n_defaults = text.count("(default:")
        if isinstance(f.default, bool):
            assert n_defaults == 0, text  # a switch: off unless given
        elif f.default is None:
            assert n_defaults <= 1, text  # shown only when it says what None means
        else:
            shown = ",".join(map(str, f.default)) if isinstance(f.default, tuple) else str(f.default)
            assert n_defaults == 1 and f"(default: {shown})" in text, text
    for _flags, text in entries:
        assert text.count("(default:") <= 1, text
        assert "(default: None)" not in text and "(default: False)" not in text, text
    out_entry = [text for flags, text in entries if "--out" in flags]
    assert len(out_entry) == 1 and "-o" in out_entry[0] and "required" in out_entry[0]
    assert sum("--config" in flags for flags, _ in entries) == 1


def test_choices_are_the_constants_the_code_checks_against():
    choices = {spec.name: spec.cli.choices for spec in option_specs() if spec.cli.choices}
    constants = {
        "source": SOURCE_KINDS,
        "tail": TAIL_MODES,
        "layout": LAYOUTS,
        "split_rule": SPLIT_RULES,
        "case": CASE_MODES,
        "on_invalid": ON_INVALID,
        "compress": CODECS,
        "executor": EXECUTORS,
    }
    assert choices == constants
    assert all(choices[name] is const for name, const in constants.items())


def test_config_with_every_key_equals_the_same_command_line(tmp_path):
    argv, config, values = all_samples()
    inputs, out = [str(LAMBDA), str(KLEBSIELLA)], str(tmp_path / "out")
    from_cli = parse_request([*inputs, "--out", out, *argv])
    cfg = write_config(tmp_path / "all.yaml", {"inputs": inputs, "out": out, **config})
    from_config = parse_request(["--config", str(cfg)])
    assert from_config == from_cli == PrepareRequest(inputs, out, PrepareOptions(**values))


@pytest.mark.parametrize(
    "split_list",
    [
        {"train": "a.txt", "val": "b.txt"},
        ["train=a.txt", "val=b.txt"],
        [["train", "a.txt"], ["val", "b.txt"]],
    ],
)
def test_split_list_in_config_as_mapping_or_list(tmp_path, split_list):
    cfg = write_config(tmp_path / "c.yaml", {"split-list": split_list, "inputs": "a.fa", "out": "x"})
    assert parse_request(["--config", str(cfg)]).options.split_lists == {"train": "a.txt", "val": "b.txt"}


def test_command_line_beats_config(tmp_path):
    _, config, values = all_samples()
    cfg = write_config(tmp_path / "all.yaml", {"inputs": [str(LAMBDA)], "out": "from-config", **config})
    request = parse_request(
        [
            "--config",
            str(cfg),
            str(KLEBSIELLA),
            "-o",
            "from-cli",
            "--seq-length",
            "2048",
            "--split",
            "1,0,0",
            "--split-list",
            "test=c.txt",
            "--tags",
            "none",
            "--workers",
            "3",
        ]
    )
    assert request.inputs == [str(KLEBSIELLA)] and request.out == "from-cli"
    changed = {
        "seq_length": 2048,
        "split": (1.0, 0.0, 0.0),
        "split_lists": {"test": "c.txt"},
        "tags": "none",
        "workers": 3,
    }
    assert request.options == PrepareOptions(**{**values, **changed})


def test_config_run_writes_the_same_shards_as_the_command_line(tmp_path):
    argv = [
        "--seq-length",
        "1024",
        "--stride",
        "1000",
        "--split",
        "1,0,0",
        "--samples-per-shard",
        "16",
        "--windows-per-record",
        "4",
        "--workers",
        "1",
        "--quiet",
    ]
    assert main(["prepare", str(LAMBDA), "--out", str(tmp_path / "cli"), *argv]) == 0
    cfg = write_config(
        tmp_path / "p.yaml",
        {
            "inputs": [str(LAMBDA)],
            "out": str(tmp_path / "cfg"),
            "seq_length": 1024,
            "stride": 1000,
            "split": [1, 0, 0],
            "samples-per-shard": 16,
            "windows_per_record": 4,
            "workers": 1,
            "quiet": True,
        },
    )
    assert main(["prepare", "--config", str(cfg)]) == 0
    shards = {p.relative_to(tmp_path / "cli"): p.read_bytes() for p in (tmp_path / "cli").rglob("*.tar")}
    assert shards and shards == {
        p.relative_to(tmp_path / "cfg"): p.read_bytes() for p in (tmp_path / "cfg").rglob("*.tar")
    }


@pytest.mark.parametrize(
    "text, words",
    [
        ("seq_lenght: 10\n", ["unknown option 'seq_lenght'"]),
        ("config: other.yaml\n", ["unknown option 'config'"]),
        ("seq_length: [3\n", ["cannot be read"]),
        ("- 1\n- 2\n", ["must be a mapping"]),
        ("seq_length: 1.5\n", ["seq_length", "1.5"]),
        ("tail: sideways\n", ["tail", "sideways", "end, drop"]),
        ("split: [1, 0]\n", ["split", "3 ratios"]),
        ("split_list: {holdout: a.txt}\n", ["split_list", "holdout"]),
        ("quiet: sometimes\n", ["quiet", "true or false"]),
        ("seq-length: 1\nseq_length: 2\n", ["same option"]),
    ],
)
def test_bad_config_is_one_error_line_exit_2(tmp_path, capsys, text, words):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    assert main(["prepare", "--config", str(cfg), "--out", str(tmp_path / "out")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"bionemo-wds prepare: error: config {cfg}"), lines
    for word in words:
        assert word in lines[0]
    assert not (tmp_path / "out").exists()


def test_missing_config_file_and_missing_out(tmp_path, capsys):
    assert main(["prepare", "--config", str(tmp_path / "none.yaml"), "-o", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot be read" in err[0]
    assert main(["prepare", str(LAMBDA)]) == 2
    assert capsys.readouterr().err.strip() == (
        "bionemo-wds prepare: error: prepare needs --out DIR (or 'out:' in the --config file)"
    )


def test_no_inputs_is_refused_naming_the_bundled_genome_which_exists():
    with pytest.raises(BadInputError, match="prepare needs INPUTS") as info:
        parse_request(["-o", "x"])
    assert str(BUNDLED_GENOME) in str(info.value)
    assert BUNDLED_GENOME.is_file() and BUNDLED_GENOME == KLEBSIELLA.resolve()


@pytest.mark.parametrize("path", sorted(Path(__file__).resolve().parents[1].glob("configs/prepare_*.yaml")))
def test_shipped_prepare_configs_parse(path):
    inputs = [] if "inputs" in yaml.safe_load(path.read_text()) else [str(LAMBDA)]
    assert parse_request([*inputs, "--config", str(path), "-o", "x"]).options.seq_length > 0


def test_no_private_argparse_attributes_in_the_cli():
    for module in sorted(CLI_DIR.glob("*.py")):
        assert "_actions" not in module.read_text(), f"{module.name} reads argparse internals"
