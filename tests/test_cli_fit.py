"""`bionemo-wds fit`: any LightningModule (subclass mode), max_len following data.seq_length, user errors
in one line, the throughput callback's sliding window, help for the tiny model's options.

The models below are this module's own: the subprocess runs get ``tests/`` on PYTHONPATH and name them
as ``--model test_cli_fit.PlainLM``, as a user names ``my_pkg.MyLM``.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import docstring_parser
import lightning as L
import pytest
import torch
import torch.nn.functional as F
import yaml
from conftest import main_here

from bionemo_wds.cli.main import main
from bionemo_wds.models import tiny_lm
from bionemo_wds.models.tiny_lm import Throughput, TinyDNALM

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "fit_demo.yaml"
TESTS = Path(__file__).resolve().parent
SEQ = 1024  # the kleb_1024 fixture's


class PlainLM(L.LightningModule):
    """A model of the tests' own without ``max_len``: each token's embedding predicts the next one."""

    def __init__(self, hidden: int = 8):
        super().__init__()
        self.save_hyperparameters()
        self.embed = torch.nn.Embedding(256, hidden)
        self.head = torch.nn.Linear(hidden, 256)

    def loss(self, batch):
        logits = self.head(self.embed(batch["tokens"]))
        per_token = F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), reduction="none")
        mask = batch["loss_mask"].flatten()
        return (per_token * mask).sum() / mask.sum().clamp(min=1)

    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("plain_loss", loss, batch_size=batch["tokens"].shape[0])
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("plain_val_loss", self.loss(batch), batch_size=batch["tokens"].shape[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class BuggyLM(PlainLM):
    """A model with a bug: its ValueError is not a user error and keeps its traceback."""

    def training_step(self, batch, batch_idx):
        raise ValueError("a bug in the model")


def small(dataset: Path, logs: Path, *extra: str) -> list[str]:
    """`fit` on the demo config, cut down: the kleb_1024 shards (no FASTA, seq_length 1024), 2 samples, 3 steps."""
    return [
        "fit",
        "--config",
        str(DEMO),
        "--data.shards",
        str(dataset),
        "--data.fasta",
        "null",
        "--data.seq_length",
        str(SEQ),
        "--data.micro_batch_size",
        "2",
        "--data.num_workers",
        "0",
        "--trainer.max_steps",
        "3",
        "--trainer.limit_val_batches",
        "1",
        "--trainer.log_every_n_steps",
        "1",
        "--trainer.callbacks.log_every_n_steps",
        "1",
        "--trainer.callbacks.print_every_n_steps",
        "1",
        "--trainer.logger.init_args.save_dir",
        str(logs),
        *extra,
    ]


def tiny_model() -> list[str]:
    return ["--model.d_model", "32", "--model.n_layers", "1"]


def hparams(logs: Path) -> dict:
    return yaml.safe_load(next(logs.rglob("hparams.yaml")).read_text())


# ------------------------------------------------------------------------------------ any LightningModule


@pytest.mark.slow
def test_fit_trains_a_model_of_the_tests_own_from_the_command_line(kleb_1024, tmp_path, zygote):
    """`--model test_cli_fit.PlainLM` over the demo config (whose model section is TinyDNALM's) trains that
    model; it has no max_len, so data.seq_length links to nothing; LightningCLI's args= warning is gone.
    ``python -m bionemo_wds.cli`` as a process of its own, forked by the `zygote` (Lightning imported
    once per test process; `tests/` is on its path)."""
    logs = tmp_path / "logs"
    out, err = tmp_path / "stdout", tmp_path / "stderr"
    args = small(kleb_1024, logs, "--model", "test_cli_fit.PlainLM")
    code = zygote.run("bionemo_wds.cli", args, out, cwd=tmp_path, err=err, module=True).wait(600)
    stdout, stderr = out.read_text(), err.read_text()
    assert code == 0, stderr
    metrics = next(logs.rglob("metrics.csv")).read_text()
    assert "plain_loss" in metrics and "samples_per_s" in metrics
    assert "args parameter" not in stderr
    assert "train loss" in stdout and "samples/s" in stdout
    assert hparams(logs)["hidden"] == 8


def test_fit_takes_model_class_path_and_init_args_in_process(kleb_1024, tmp_path):
    logs = tmp_path / "logs"
    args = small(kleb_1024, logs, "--model.class_path", "test_cli_fit.PlainLM", "--model.init_args.hidden", "4")
    assert main(args) == 0
    assert "plain_loss" in next(logs.rglob("metrics.csv")).read_text()
    assert hparams(logs)["hidden"] == 4


@pytest.mark.parametrize("console", [True, False], ids=["console", "from-python"])
def test_no_warning_about_args(monkeypatch, capsys, console):
    """LightningCLI warned that `args=` and sys.argv were both given: from the console they are one
    command line (sys.argv), from Python (`main([...])`) the caller's sys.argv is not ours to judge."""
    args = ["fit", "--config", str(DEMO), "--print_config"]
    monkeypatch.setattr(sys, "argv", ["bionemo-wds", *args] if console else ["script.py", "--its-own-option"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(SystemExit) as exit_:
            main(args)
    assert exit_.value.code == 0
    assert not [w for w in caught if "args parameter" in str(w.message)]
    assert yaml.safe_load(capsys.readouterr().out)["model"]["class_path"] == "bionemo_wds.models.tiny_lm.TinyDNALM"


# ------------------------------------------------------------------------------- max_len <- seq_length


@pytest.mark.parametrize("seq_length", [str(SEQ), "null"], ids=["given", "the-shards"])
def test_max_len_follows_data_seq_length(kleb_1024, tmp_path, seq_length):
    """The demo config says 512 for both; `--data.seq_length 1024` alone (or none: the shards' 1024)
    used to end in an IndexError in the 512 learned positions."""
    logs = tmp_path / "logs"
    assert main(small(kleb_1024, logs, "--data.seq_length", seq_length, *tiny_model())) == 0
    assert hparams(logs)["max_len"] == SEQ


# ------------------------------------------------------------------------------------------ user errors


@pytest.mark.slow
def test_fit_from_another_directory_names_the_missing_fasta_in_one_line(tmp_path, monkeypatch, capsys):
    """The demo config's relative FASTA path does not exist elsewhere: one line naming it, exit 2
    (through `main` in this process, run from `tmp_path`; the console script is the test above's)."""
    monkeypatch.chdir(tmp_path)
    run = main_here(capsys, "fit", "--config", DEMO, "--trainer.max_steps", "2", *tiny_model())
    assert run.returncode == 2, run.stderr
    errors = [line for line in run.stderr.splitlines() if "error" in line.lower()]
    assert errors == [
        "bionemo-wds fit: error: input bionemo_wds/data/klebsiella_fragmented_assembly.fa.gz does not exist"
    ]
    assert "Traceback" not in run.stderr
    assert "args parameter" not in run.stderr


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model.d_model", "30"], "d_model (30) must be a multiple of n_heads (4)"),
        (["--data.micro_batch_size", "0"], "micro_batch_size"),
        (["--data.seq_length", "null", "--data.shards", "{missing}"], "manifest.json does not exist"),
        (["--data.seq_length", "2048"], "was cut for seq_length 1024"),
    ],
    ids=["model-option", "data-option", "no-dataset", "wrong-seq-length"],
)
def test_user_errors_are_one_line_and_exit_2(kleb_1024, tmp_path, capsys, extra, message):
    extra = [x.format(missing=tmp_path / "missing") for x in extra]
    assert main(small(kleb_1024, tmp_path / "logs", *extra)) == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and errors[0].startswith("bionemo-wds fit: error: ") and message in errors[0], err
    assert "Traceback" not in err


def test_a_bug_in_the_model_keeps_its_traceback(kleb_1024, tmp_path):
    with pytest.raises(ValueError, match="a bug in the model"):
        main(small(kleb_1024, tmp_path / "logs", "--model", "test_cli_fit.BuggyLM"))


# ---------------------------------------------------------------------------------- throughput callback


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def test_throughput_is_a_sliding_window_over_training_steps_only(monkeypatch, capsys):
    """Slow first steps fall out of the window and a long validation inside fit does not count: the
    rate is the last 5 steps' 8 samples per second (averaging from step 1 with validation gave 1.1)."""
    clock = Clock()
    monkeypatch.setattr(tiny_lm, "time", clock)
    logged: list[dict] = []
    trainer = SimpleNamespace(
        global_step=0, state=SimpleNamespace(fn="fit"), sanity_checking=False, is_global_zero=True, logger=None
    )
    module = SimpleNamespace(log_dict=logged.append)
    cb = Throughput(log_every_n_steps=5, print_every_n_steps=10, window=5)
    batch = {"tokens": torch.zeros(8, 16, dtype=torch.long)}
    for step in range(1, 31):
        clock.now += 10.0 if step <= 10 else 1.0  # 10 slow steps, then 1 s per step
        trainer.global_step = step
        cb.on_train_batch_end(trainer, module, {"loss": torch.tensor(1.0 / step)}, batch, step - 1)
        if step == 28:  # validation inside fit, within the window: 100 s that are not training
            cb.on_validation_start(trainer, module)
            clock.now += 100.0
            cb.on_validation_end(trainer, module)
    assert logged[-1] == {"samples_per_s": pytest.approx(8.0), "tokens_per_s": pytest.approx(128.0)}
    cb.on_train_end(trainer, module)
    out = capsys.readouterr().out.splitlines()
    assert "step    30  train loss 0.033  8.0 samples/s  128 tokens/s" in out[-2]
    assert out[-1].startswith("throughput: 8.0 samples/s, 128 tokens/s over the last 5 training steps")
    assert "train loss 1.000 -> 0.033" in out[-1]


def test_throughput_ignores_the_sanity_check_and_evaluation_outside_fit(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(tiny_lm, "time", clock)
    cb = Throughput(window=3)
    for fn, sanity in [("fit", True), ("validate", False)]:
        trainer = SimpleNamespace(state=SimpleNamespace(fn=fn), sanity_checking=sanity)
        cb.on_validation_start(trainer, None)
        clock.now += 50.0
        cb.on_validation_end(trainer, None)
    assert cb.clock() == clock.now


# ----------------------------------------------------------------------------------------------- help


def test_every_tiny_model_option_has_help(capsys):
    params = [p for p in inspect.signature(TinyDNALM.__init__).parameters if p != "self"]
    documented = {p.arg_name: p.description for p in docstring_parser.parse(TinyDNALM.__doc__ or "").params}
    assert sorted(documented) == sorted(params)
    with pytest.raises(SystemExit) as exit_:
        main(["fit", "--model.help", "TinyDNALM"])
    assert exit_.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    for name in params:
        assert f"--model.{name}" in shown
        assert " ".join(documented[name].split()) in shown, name
    with pytest.raises(SystemExit):
        main(["fit", "--help"])
    assert "--model.help TinyDNALM" in " ".join(capsys.readouterr().out.split())
