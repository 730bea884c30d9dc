"""A new user's second day with `bionemo-wds fit` (issue 37, items 6 and 8).

6. A config file's mistakes are one line naming the file (and line): a misspelt key with "did you
   mean", invalid YAML. Data mistakes are the only line printed, found before the Trainer is built;
   a trainer option Lightning refuses is one line, exit 2. training.md's examples are what is printed.
8. Every ``--data.*`` option has help, and ``--data.seq_length``'s is true of both layouts; a run of
   ``configs/fit_resume.yaml`` stopped and run again with ``--ckpt_path last`` resumes.
Also: ``--trainer.limit_val_batches 1`` is one batch (an int), as ``Trainer(limit_val_batches=1)``.

Everything runs in this process (``main([...])``); the tests that count lines read stderr with
`console`, which shows Lightning's own lines as a console would.
"""

from __future__ import annotations

import logging
import re
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import LAMBDA

from bionemo_wds.cli import fit_config
from bionemo_wds.cli.main import main
from bionemo_wds.prepare import PrepareOptions, prepare

ROOT = Path(__file__).resolve().parents[1]
RESUME = ROOT / "configs" / "fit_resume.yaml"
TRAINING = ROOT / "docs" / "guide" / "training.md"


@pytest.fixture(scope="module")
def lambda_512(tmp_path_factory) -> Path:
    """The lambda genome prepared for 512-token windows, train split only (as Getting started's 509-base windows)."""
    out = tmp_path_factory.mktemp("lam") / "data"
    prepare([LAMBDA], out, PrepareOptions(seq_length=512, split=(1, 0, 0), progress=False))
    return out


class CurrentStderr(logging.StreamHandler):
    """A log handler writing to whatever ``sys.stderr`` is when a record comes (a test's capture)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


@pytest.fixture
def console(capfd):
    """`capfd`, with Lightning's info lines (seed set, GPU available, ...) on its stderr at INFO, as on
    a console (under pytest, Lightning leaves them to pytest's log capture, or keeps a handler on the
    stream it was imported with, closed since)."""
    handler = CurrentStderr()
    loggers = [logging.getLogger(name) for name in ("lightning", "lightning.pytorch", "lightning.fabric")]
    saved = [(logger.handlers, logger.level, logger.propagate) for logger in loggers]
    for logger in loggers:
        logger.handlers, logger.propagate = [handler], False
        logger.setLevel(logging.INFO)
    yield capfd
    for logger, (handlers, level, propagate) in zip(loggers, saved):
        logger.handlers, logger.propagate = handlers, propagate
        logger.setLevel(level)


def one_line(capfd: pytest.CaptureFixture[str], rc: int, command: str = "fit") -> str:
    """Exit code 2, nothing on stdout, and one ``bionemo-wds fit: error: ...`` line on stderr (the file
    descriptor: Lightning's own lines included)."""
    out, err = capfd.readouterr()
    assert rc == 2, err
    assert out == "" and len(err.splitlines()) == 1, err
    assert err.startswith(f"bionemo-wds {command}: error: "), err
    return err.strip()


# --- 6. config files -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "line", "key", "suggested"),
    [
        ("data:\n  shards: x\n  micro_batch: 4\n", 3, "data.micro_batch", "data.micro_batch_size"),
        ("data.shards: x\ndata.seq_lenght: 4\n", 2, "data.seq_lenght", "data.seq_length"),
        ("trainer:\n  max_step: 4\n", 2, "trainer.max_step", "trainer.max_steps"),
        ("model:\n  init_args:\n    d_modle: 32\n", 3, "model.d_modle", "model.d_model"),
        ("model:\n  n_layer: 1\n", 2, "model.n_layer", "model.n_layers"),
        ("seed_everythin: 3\n", 1, "seed_everythin", "seed_everything"),
    ],
    ids=["data", "dotted", "trainer", "model-init-args", "model-direct", "top-level"],
)
def test_a_misspelt_config_key_names_the_file_and_line_with_did_you_mean(tmp_path, console, text, line, key, suggested):
    """main: ``Subcommand 'fit' does not accept option 'data.micro_batch'``, no file, no suggestion."""
    config = tmp_path / "my.yaml"
    config.write_text(text)
    error = one_line(console, main(["fit", "--config", str(config)]))
    assert error.startswith(
        f"bionemo-wds fit: error: --config {config}, line {line}: unrecognized key {key}; did you mean {suggested}"
    )


def test_another_models_keys_and_real_keys_pass_the_check(tmp_path):
    """Keys of a model other than TinyDNALM are its own parser's; real keys, nested or dotted, pass."""
    config = tmp_path / "my.yaml"
    config.write_text(
        "model:\n  class_path: my_pkg.MyLM\n  init_args: {hidden: 3}\n"
        "trainer: {max_steps: 3, logger: {class_path: x, init_args: {save_dir: y}}}\n"
        "data.shards: x\ndata: {seq_length: 512}\nseed_everything: 1\nckpt_path: null\n"
    )
    fit_config.check_config_files(["--config", str(config)])


def test_invalid_yaml_names_the_file_line_and_column(tmp_path, console):
    """main: ``Problems parsing config: ... in "<unicode string>", line 4, column 7``."""
    config = tmp_path / "my.yaml"
    config.write_text("data:\n  shards: x\n  micro_batch_size: 4\n   seq: [\n")
    error = one_line(console, main(["fit", "--config", str(config)]))
    where = f"--config {config}, line 4, column 7"
    assert error == f"bionemo-wds fit: error: {where}: not valid YAML: mapping values are not allowed here"


def test_a_key_in_a_config_given_as_text_gets_did_you_mean(console):
    error = one_line(console, main(["fit", "--config", "{data: {shards: x, micro_batch: 3}}"]))
    assert error.endswith("unrecognized key data.micro_batch; did you mean data.micro_batch_size?")


# --- 6. data errors: one line, before the Trainer ------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "extra", "words"),
    [
        ("fit", ["--data.shards", "{missing}"], ["missing/manifest.json does not exist"]),
        ("fit", ["--data.seq_length", "1024"], ["was cut for seq_length 512", "seq_length=1024"]),
        ("fit", ["--data.stride", "100"], ["stride=100 cannot be served", "--layout sequences"]),
        ("fit", ["--data.micro_batch_size", "0"], ["micro_batch_size"]),
        ("validate", [], ["has no val split, which stage 'validate' needs"]),
    ],
    ids=["no-dataset", "seq-length", "stride-on-windows", "data-option", "no-val-split"],
)
def test_a_data_error_is_the_only_line_printed(lambda_512, tmp_path, console, command, extra, words):
    """main: 3-7 Lightning lines (seed, GPU available, ...) before it; the seq_length one only once
    training had started."""
    extra = [str(tmp_path / "missing") if a == "{missing}" else a for a in extra]
    error = one_line(console, main([command, "--data.shards", str(lambda_512), *extra]), command)
    for word in words:
        assert word in error


def test_a_val_check_interval_longer_than_the_epoch_is_one_line(lambda_512, tmp_path, console):
    """main: Lightning's ValueError with a 40-line traceback, exit 1."""
    args = ["--data.shards", str(lambda_512), "--data.micro_batch_size", "4", "--trainer.val_check_interval", "1000"]
    tiny = ["--model.d_model", "32", "--model.n_layers", "1", "--trainer.logger", "false"]
    rc = main(
        ["fit", *args, *tiny, "--trainer.enable_checkpointing", "false", "--trainer.default_root_dir", str(tmp_path)]
    )
    _, err = console.readouterr()
    assert rc == 2 and "Traceback" not in err, err
    errors = [line.strip() for line in err.replace("\r", "\n").splitlines() if "error" in line]
    assert errors == [
        "bionemo-wds fit: error: --trainer.val_check_interval 1000 is more than the 24 training batches of an "
        "epoch: give at most 24, a fraction of the epoch (0.5: twice an epoch), or "
        "--trainer.check_val_every_n_epoch null to validate every 1000 batches across epochs"
    ]


def test_a_trainer_option_lightning_refuses_is_one_line(console, lambda_512):
    rc = main(["fit", "--data.shards", str(lambda_512), "--trainer.limit_val_batches", "1.5"])
    _, err = console.readouterr()
    assert rc == 2 and "Traceback" not in err, err
    assert err.strip().splitlines()[-1] == (
        "bionemo-wds fit: error: trainer: You have passed invalid value 1.5 for limit_val_batches, "
        "it has to be in [0.0, 1.0] or an int."
    )


# --- limit_val_batches 1 is one batch ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [(["--trainer.limit_val_batches", "1"], 1), (["--trainer.limit_val_batches", "1.0"], 1.0), ("yaml", 1)],
    ids=["flag-1", "flag-1.0", "yaml-1"],
)
def test_an_integer_batch_limit_stays_an_integer(tmp_path, capsys, given, expected):
    """main: ``--trainer.limit_val_batches 1`` was parsed as 1.0, which Lightning reads as every batch."""
    if given == "yaml":
        config = tmp_path / "my.yaml"
        config.write_text("trainer:\n  limit_val_batches: 1\n  limit_train_batches: 1\n")
        given = ["--config", str(config)]
    with pytest.raises(SystemExit):
        main(["fit", "--data.shards", "x", *given, "--print_config"])
    trainer = yaml.safe_load(capsys.readouterr().out)["trainer"]
    assert trainer["limit_val_batches"] == expected
    assert type(trainer["limit_val_batches"]) is type(expected)


# --- 8. help for every data option ---------------------------------------------------------------------------


def help_entries(text: str, prefix: str) -> dict[str, str]:
    """Option -> its help text (without the ``(type: ..., default: ...)`` note) in argparse's --help."""
    entries: dict[str, str] = {}
    current = None
    for line in text.splitlines():
        entry = re.match(r"^  (--\S+)(?: [^ ].*?)?(?:\s{2,}(.*))?$", line)
        if entry and line.startswith("  --"):
            current = entry.group(1)
            entries[current] = entry.group(2) or ""
        elif current is not None and line.startswith("      "):
            entries[current] += " " + line.strip()
        else:
            current = None
    notes = re.compile(r"\(type: .*?(default: .*?)?\)\s*$")
    return {k: notes.sub("", " ".join(v.split())).strip() for k, v in entries.items() if k.startswith(prefix)}


def test_every_data_option_has_help_and_seq_length_says_what_is_true(capsys):
    """main: no help for stride, tail, pack, window_offset, dp_rank, dp_size, cache_memory; seq_length
    "must be what the shards were cut for", which a sequence-layout dataset is not."""
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    shown = help_entries(capsys.readouterr().out, "--data.")
    assert len(shown) >= 36, sorted(shown)
    assert not [option for option, text in shown.items() if not text], shown
    assert "--layout sequences" in shown["--data.seq_length"] and "any seq_length" in shown["--data.seq_length"]


# --- 8. resuming from the command line -------------------------------------------------------------------------


@pytest.mark.slow
def test_fit_resume_config_stopped_and_run_again_resumes(lambda_512, tmp_path, monkeypatch):
    """The same command twice, with ``--ckpt_path last``: the first starts afresh (no checkpoint yet)
    and stops at max_steps 3 (its last checkpoint: step 2), the second continues from that last.ckpt
    to step 6 (4 steps logged from step 2 on; a fresh start would log from 0)."""
    monkeypatch.chdir(tmp_path)
    args = [
        *("fit", "--config", str(RESUME), "--data.shards", str(lambda_512), "--data.fasta", "null"),
        *("--data.micro_batch_size", "2", "--data.num_workers", "0", "--model.d_model", "32"),
        *("--model.n_layers", "1", "--trainer.val_check_interval", "null", "--trainer.log_every_n_steps", "1"),
        *("--trainer.callbacks.every_n_train_steps", "2", "--ckpt_path", "last"),
    ]
    assert main([*args, "--trainer.max_steps", "3"]) == 0
    checkpoints = tmp_path / "resume_out" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["last.ckpt", "step=2.ckpt"]
    assert main([*args, "--trainer.max_steps", "6"]) == 0
    assert sorted(p.name for p in checkpoints.iterdir()) == ["last.ckpt", "step=2.ckpt", "step=4.ckpt", "step=6.ckpt"]
    logs = tmp_path / "resume_out" / "logs" / "lightning_logs"
    steps = [
        [int(row.split(",")[1]) for row in (logs / v / "metrics.csv").read_text().splitlines()[1:]]
        for v in ("version_0", "version_1")
    ]
    assert steps == [[0, 1, 2], [2, 3, 4, 5]]


# --- 6. training.md's examples are what is printed ------------------------------------------------------------


def section(text: str, title: str) -> str:
    start = text.index(title)
    end = text.find("\n### ", start + len(title))
    return text[start : end if end != -1 else None]


def test_training_md_error_examples_are_what_is_printed(lambda_512, tmp_path, monkeypatch, console):
    """Each ``$ command`` of the page's error examples, run here (``data/``: a dataset cut for 512
    tokens, as Getting started's), prints the line under it, and only that line."""
    text = section(TRAINING.read_text(), "### Command-line errors")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").symlink_to(lambda_512, target_is_directory=True)
    for block in re.findall(r"```yaml\n(# (\S+)\n.*?)```", text, re.S):
        (tmp_path / block[1]).write_text(block[0])
    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    examples = re.findall(r"^\$ (.*)\n(bionemo-wds .*)$", section(text, "```console"), re.M)
    assert len(examples) >= 5
    for command, expected in examples:
        words = shlex.split(command)
        words = words[1:] if words[0].startswith("PYTHONPATH=") else words
        assert words[0] == "bionemo-wds"
        rc = main(words[1:])
        assert (rc, console.readouterr().err.strip()) == (2, expected), command
