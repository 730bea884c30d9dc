"""A new user's first day with `bionemo-wds fit` and the data module (issue 23).

1. ``--model my_pkg.MyLM`` (and a config's ``model: {class_path: ...}``) trains with the class's own
   defaults, not TinyDNALM's values of arguments with the same name; a module that cannot be
   imported is one line with a hint.
2. Command-line mistakes are one line (exit 2, "did you mean"), abbreviations are refused, and the
   command line's own mistakes are found before Lightning is imported.
5. Resuming mid-epoch and logging without ``batch_size=`` bring no Lightning warnings about our
   loaders, and the resume is still exact.
7. Peeking at a batch (``next(iter(loader))``) does not use up an epoch of a blend.

The user's model is a module of its own, ``mymodels.py`` in a temporary directory put on PYTHONPATH,
as a user's would be.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from conftest import LAMBDA
from lightning.pytorch.utilities import data as lightning_data

from bionemo_wds.cli import fit_args
from bionemo_wds.cli.main import main
from bionemo_wds.cli.parsing import suggestion
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.models.tiny_lm import TinyDNALM
from bionemo_wds.prepare import PrepareOptions, prepare

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "configs" / "fit_demo.yaml"
SEQ = 1024  # the kleb_1024 fixture's

#: A user's model: argument names shared with TinyDNALM (lr, dropout, vocab_size, n_layers), other defaults.
USER_MODULE = """
import lightning as L
import torch
import torch.nn.functional as F


class MyLM(L.LightningModule):
    def __init__(
        self, lr: float = 0.01, dropout: float = 0.3, vocab_size: int = 16, n_layers: int = 1, hidden: int = 8
    ):
        super().__init__()
        self.save_hyperparameters()
        self.embed = torch.nn.Embedding(256, hidden)
        self.head = torch.nn.Linear(hidden, 256)

    def loss(self, batch):
        logits = self.head(self.embed(batch["tokens"]))
        return F.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())

    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("my_loss", loss, on_epoch=True)  # no batch_size=: Lightning works it out
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("my_val_loss", self.loss(batch))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
"""
MY_DEFAULTS = {"lr": 0.01, "dropout": 0.3, "vocab_size": 16, "n_layers": 1, "hidden": 8}


@pytest.fixture
def user_dir(tmp_path, monkeypatch) -> Path:
    """A directory holding the user's ``mymodels.py``, importable in this process and in subprocesses."""
    home = tmp_path / "user"
    home.mkdir()
    (home / "mymodels.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(home))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(home), str(ROOT)]))
    yield home
    sys.modules.pop("mymodels", None)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m bionemo_wds.cli ARGS` in `cwd` (PYTHONPATH as the test set it, the repository on it)."""
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}
    return subprocess.run(
        [sys.executable, "-m", "bionemo_wds.cli", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def one_error_line(rc: int, err: str, *words: str) -> str:
    """Exit code 2 and one ``bionemo-wds fit: error: ...`` line holding every word."""
    assert rc == 2, f"exit code {rc}; stderr: {err!r}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one line, got {len(lines)}: {err!r}"
    assert lines[0].startswith("bionemo-wds fit: error: "), lines[0]
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    return lines[0]


def printed_model(capsys, *args: str) -> dict:
    """The model section `fit ARGS --print_config` prints (in this process)."""
    with pytest.raises(SystemExit) as exit_:
        main(["fit", *args, "--print_config"])
    assert exit_.value.code == 0
    return yaml.safe_load(capsys.readouterr().out)["model"]


def small(dataset: Path, logs: Path, *extra: str) -> list[str]:
    """`fit` on the demo config cut down: the kleb_1024 shards, 2 samples a batch, 3 steps, 2 validation
    batches (``--trainer.limit_val_batches 1`` is one batch since issue 37; it was read as 1.0, every batch)."""
    return [
        "fit",
        "--config",
        str(DEMO),
        *("--data.shards", str(dataset), "--data.fasta", "null", "--data.seq_length", str(SEQ)),
        *("--data.micro_batch_size", "2", "--data.num_workers", "0", "--trainer.max_steps", "3"),
        *("--trainer.limit_val_batches", "2", "--trainer.logger.init_args.save_dir", str(logs)),
        *extra,
    ]


# --- 1. the user's model gets its own defaults ---------------------------------------------------------


@pytest.mark.slow
def test_flag_form_prints_the_users_defaults_through_the_real_cli(user_dir, tmp_path):
    """main: lr 0.002, dropout 0.0, vocab_size 256, n_layers 4 (TinyDNALM's), for the flag after the demo config."""
    run = cli("fit", "--config", str(DEMO), "--model", "mymodels.MyLM", "--print_config", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    model = yaml.safe_load(run.stdout)["model"]
    assert model == {"class_path": "mymodels.MyLM", "init_args": MY_DEFAULTS}


@pytest.mark.parametrize(
    "args",
    [
        ["--data.shards", "x", "--model", "mymodels.MyLM"],
        ["--data.shards", "x", "--model=mymodels.MyLM"],
        ["--data.shards", "x", "--model.class_path", "mymodels.MyLM"],
        ["--config", str(DEMO), "--model", "mymodels.MyLM"],
        ["--config", "{yaml}"],
        ["--config", str(DEMO), "--config", "{yaml}"],
    ],
    ids=["flag", "flag=", "class_path", "demo-config-then-flag", "yaml", "demo-config-then-yaml"],
)
def test_every_form_gives_the_users_defaults(user_dir, capsys, args):
    own = user_dir / "my.yaml"
    own.write_text("model:\n  class_path: mymodels.MyLM\ndata:\n  shards: x\n")
    args = [str(own) if a == "{yaml}" else a for a in args]
    assert printed_model(capsys, *args) == {"class_path": "mymodels.MyLM", "init_args": MY_DEFAULTS}


def test_init_args_given_for_the_new_class_apply(user_dir, capsys):
    """After a switch, what is given for the new class counts: a flag after it, a YAML's init_args."""
    flag = printed_model(capsys, "--config", str(DEMO), "--model", "mymodels.MyLM", "--model.lr", "0.05")
    assert flag["init_args"] == {**MY_DEFAULTS, "lr": 0.05}
    own = user_dir / "my.yaml"
    own.write_text("model:\n  class_path: mymodels.MyLM\n  init_args:\n    dropout: 0.1\ndata:\n  shards: x\n")
    assert printed_model(capsys, "--config", str(DEMO), "--config", str(own))["init_args"] == {
        **MY_DEFAULTS,
        "dropout": 0.1,
    }


def test_naming_the_same_class_again_keeps_the_configs_values(capsys):
    """The demo config's TinyDNALM values (warmup_steps 10) stay when the same class is named again."""
    model = printed_model(capsys, "--config", str(DEMO), "--model", "TinyDNALM")
    assert model["init_args"]["warmup_steps"] == 10
    assert printed_model(capsys, "--data.shards", "x")["class_path"] == fit_args.DEFAULT_MODEL


def test_fit_instantiates_the_users_model_with_its_defaults(user_dir, kleb_1024, tmp_path):
    """The model that trains, not only the printed config: its saved hyperparameters are its own."""
    logs = tmp_path / "logs"
    assert main(small(kleb_1024, logs, "--model", "mymodels.MyLM")) == 0
    saved = yaml.safe_load(next(logs.rglob("hparams.yaml")).read_text())
    assert {k: saved[k] for k in MY_DEFAULTS} == MY_DEFAULTS


@pytest.mark.parametrize("form", ["flag", "yaml"])
def test_a_model_module_that_cannot_be_imported_is_one_line_with_a_hint(tmp_path, form):
    config = tmp_path.parent / f"{tmp_path.name}-bad.yaml"
    config.write_text("model:\n  class_path: nosuch_models.MyLM\n")
    named = ["--model", "nosuch_models.MyLM"] if form == "flag" else ["--config", str(config)]
    run = cli("fit", *named, "--data.shards", "x", cwd=tmp_path)
    one_error_line(run.returncode, run.stderr, "nosuch_models.MyLM", "'nosuch_models'", "importable", "PYTHONPATH")
    assert list(tmp_path.iterdir()) == [], "a refused run wrote something"


# --- 2. one-line errors, did you mean, no abbreviations --------------------------------------------------


@pytest.mark.parametrize(
    ("option", "suggested"),
    [
        ("--trainer.max_step", "--trainer.max_steps"),  # an abbreviation: argparse would have expanded it
        ("--data.shard", "--data.shards"),
        ("--data.micro_batch", "--data.micro_batch_size"),
        ("--trainer.max_stesp", "--trainer.max_steps"),
        ("--model.d_modle", "--model.d_model"),
    ],
)
def test_misspelt_or_abbreviated_option_is_one_line_with_did_you_mean(tmp_path, option, suggested):
    run = cli("fit", "--data.shards", "x", option, "3", cwd=tmp_path)
    one_error_line(run.returncode, run.stderr, f"unrecognized option {option}", f"did you mean {suggested}")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--ckpt_pth", "x"], ["unrecognized option --ckpt_pth", "did you mean --ckpt_path"]),
        (["--model", "mymodels.MyLM", "--model.lrr", "3"], ["--model.lrr", "did you mean --model.lr"]),
        (["--model", "mymodels.MyLM", "--model.lr", "abc"], ["--model.lr", "float", "abc"]),
        (["--model", "mymodels.NoSuch"], ["--model mymodels.NoSuch", "NoSuch"]),
        (["--trainer.max_steps", "abc"], ["--trainer.max_steps", "int", "abc"]),
        (["--config", "{missing}"], ["--config", "missing.yaml"]),
    ],
    ids=["top-level", "users-model-option", "users-model-value", "no-such-class", "bad-value", "no-config"],
)
def test_what_the_real_parser_refuses_is_one_line(user_dir, tmp_path, capsys, args, words):
    """Errors only Lightning's parser can find: one line too (main: a 84-94 line usage dump)."""
    args = [str(tmp_path / "missing.yaml") if a == "{missing}" else a for a in args]
    rc = main(["fit", "--data.shards", "x", *args])
    one_error_line(rc, capsys.readouterr().err, *words)


def test_abbreviations_reach_the_real_parser_refused(capsys):
    """The real parser is strict too (allow_abbrev off), for options the quick check leaves to it."""
    rc = main(["fit", "--data.shards", "x", "--print_conf"])
    one_error_line(rc, capsys.readouterr().err, "unrecognized option --print_conf", "did you mean --print_config")


def test_the_quick_check_knows_the_real_argument_names():
    """The names read from the classes' source are their signatures' (so the check cannot drift)."""
    names = fit_args.group_arguments()
    for group, cls in (("trainer", L.Trainer), ("data", GenomicWebDataModule), ("model", TinyDNALM)):
        real = {p for p in inspect.signature(cls.__init__).parameters if p != "self"}
        assert real <= names[group] and names[group] - real <= {"help", "class_path", "init_args"}, group


@pytest.mark.parametrize(
    "args",
    [
        ["--trainer.callbacks+=lightning.pytorch.callbacks.EarlyStopping", "--trainer.callbacks.monitor", "x"],
        ["--model.init_args.lr", "0.1", "--model.help", "TinyDNALM", "--data.prepare_options", "{stride: 5}"],
        ["--trainer.logger.init_args.save_dir", "logs", "--print_config=skip_null", "--seed_everything", "-1"],
        ["--model", "mymodels.MyLM", "--model.hidden", "4"],  # another class's options are its parser's
    ],
)
def test_the_quick_check_lets_real_options_through(user_dir, args):
    fit_args.check_options(args)


def test_suggestion():
    assert suggestion("--trainer.max_step", ["--trainer.max_steps", "--accelerator"]) == (
        "; did you mean --trainer.max_steps?"
    )
    assert suggestion("--zzz", ["--trainer.max_steps"]) == ""
    assert suggestion("--seq-lenght", ["--seq-length", "--stride"]) == "; did you mean --seq-length?"


# --- 5. no warnings about our loaders; the resume stays exact --------------------------------------------


class KeysLM(L.LightningModule):
    """Logs without batch_size= (training on_epoch and validation) and records the keys it trains on."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.keys: list[list[str]] = []

    def training_step(self, batch, batch_idx):
        self.keys.append(list(batch["keys"]))
        loss = self.layer(batch["loss_mask"].sum(1, keepdim=True)).mean()
        self.log("loss", loss, on_epoch=True)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val", batch["loss_mask"].sum() * 0.0)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def fit(dataset: Path, root: Path, max_steps: int, ckpt: str | None = None) -> tuple[KeysLM, list[str]]:
    """A CPU fit of `KeysLM` on the dataset; returns the model and the warnings it raised."""
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=max_steps,
        limit_val_batches=2,
        val_check_interval=4,
        num_sanity_val_steps=0,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        callbacks=[L.pytorch.callbacks.ModelCheckpoint(dirpath=root, every_n_train_steps=5, save_top_k=-1)],
    )
    model = KeysLM()
    dm = GenomicWebDataModule(str(dataset), micro_batch_size=16, seed=5)
    lightning_data.warning_cache.clear()  # Lightning warns about a batch size once per process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.fit(model, datamodule=dm, ckpt_path=ckpt)
    return model, [str(w.message) for w in caught]


def test_resume_and_logging_bring_no_warnings_about_our_loaders_and_stay_exact(kleb_1024, tmp_path):
    """main: "...your dataloader is not resumable..." on the resume, "Trying to infer the `batch_size`
    from an ambiguous collection" for a model logging without batch_size="""
    whole, _ = fit(kleb_1024, tmp_path / "whole", 12)
    first, warned_first = fit(kleb_1024, tmp_path / "run", 5)
    resumed, warned_again = fit(kleb_1024, tmp_path / "run", 12, ckpt=str(tmp_path / "run" / "epoch=0-step=5.ckpt"))
    warned = warned_first + warned_again
    assert not [m for m in warned if "not resumable" in m]
    assert not [m for m in warned if "ambiguous collection" in m]
    assert first.keys + resumed.keys == whole.keys  # exactly the rest of the epoch


# --- 7. peeking at a blend's batch does not use up its epoch -----------------------------------------------


@pytest.fixture(scope="module")
def lambda_512(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lam") / "lam"
    prepare([LAMBDA], out, PrepareOptions(seq_length=512, stride=480, split=(1, 0, 0), progress=False))
    return out


@pytest.fixture(scope="module")
def kleb_512(tmp_path_factory) -> Path:
    from conftest import KLEBSIELLA

    out = tmp_path_factory.mktemp("kleb") / "kleb"
    prepare([KLEBSIELLA], out, PrepareOptions(seq_length=512, stride=500, progress=False))
    return out


def blend_module(kleb: Path, lam: Path) -> GenomicWebDataModule:
    datasets = [{"path": str(kleb), "weight": 0.7}, {"path": str(lam), "weight": 0.3}]
    dm = GenomicWebDataModule(micro_batch_size=8, datasets=datasets, samples_per_epoch=400, seed=3)
    dm.setup("fit")
    return dm


def test_peeking_at_a_blend_does_not_use_up_its_epoch(kleb_512, lambda_512):
    """main: the peek was epoch 0 (its one batch in ``source_counts[0]``) and the loop got epoch 1."""
    plain = blend_module(kleb_512, lambda_512)
    whole = [list(b["keys"]) for b in plain.train_dataloader()]
    peeked = blend_module(kleb_512, lambda_512)
    loader = peeked.train_dataloader()
    first = next(iter(loader))
    assert list(first["keys"]) == whole[0]
    assert [list(b["keys"]) for b in loader] == whole
    assert peeked.source_counts == plain.source_counts and list(peeked.source_counts) == [0]
    assert [list(b["keys"]) for b in loader] != whole  # a pass run to its end moves on to the next epoch


def test_a_peek_after_a_restore_still_continues_from_it(kleb_512, lambda_512):
    dm = blend_module(kleb_512, lambda_512)
    it = iter(dm.train_dataloader())
    taken = [list(next(it)["keys"]) for _ in range(5)]
    state = dm.state_dict()
    whole = taken + [list(b["keys"]) for b in it]
    again = blend_module(kleb_512, lambda_512)
    again.load_state_dict(state)
    loader = again.train_dataloader()
    assert list(next(iter(loader))["keys"]) == whole[5]
    assert taken + [list(b["keys"]) for b in loader] == whole


# --- 3. the demo: a small model that prints its validation loss, and what to do after ---------------------


@pytest.mark.slow
def test_demo_config_prints_the_validation_loss(kleb_1024, tmp_path, capsys):
    """main printed the training loss only (the progress bar, which shows val_loss, is off)."""
    args = small(kleb_1024, tmp_path / "logs", "--trainer.val_check_interval", "2", "--trainer.max_steps", "4")
    assert main(args) == 0
    shown = [line for line in capsys.readouterr().out.splitlines() if "val loss" in line]
    assert [line.split()[1] for line in shown] == ["2", "4"], shown


def test_demo_config_trains_a_model_small_enough_for_a_minute_on_a_cpu():
    """The demo's model and steps: at most 1/5 of main's transformer work (main: d_model 192, 4 blocks,
    100 steps of 8 x 512 tokens took 3.5 s of CPU each; the measured minute is in the docs)."""
    config = yaml.safe_load(DEMO.read_text())
    model, steps = config["model"]["init_args"], config["trainer"]["max_steps"]
    work = steps * model["n_layers"] * model["d_model"] ** 2  # per token, up to the attention's share
    assert work <= 100 * 4 * 192**2 / 5
    assert any(c["class_path"].endswith("PrintValidation") for c in config["trainer"]["callbacks"])


def test_demo_ends_saying_how_to_use_the_environment():
    text = (ROOT / "tools" / "demo.sh").read_text()
    tail = text[text.index("fit --config configs/fit_demo.yaml") :]
    assert "source .venv/bin/activate" in tail and "pip install -e ." in tail and "'.[remote]'" in tail
