"""tools/upstream_tests.py, on a small suite laid out as bionemo-webdatamodule's is: its imports of
``bionemo.webdatamodule.datamodule`` / ``.utils`` reach `bionemo_wds.compat.bionemo`, a
``Trainer(accelerator="gpu")`` runs on CPU here, pytest's result and exit code come through, and a
folder without the suite is one clear line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "upstream_tests.py"

CONFTEST = """
import pytest
from bionemo.webdatamodule.datamodule import Split, WebDataModule
from bionemo.webdatamodule.utils import pickles_to_tars


@pytest.fixture
def splits():
    return list(Split)
"""

TESTS = """
import lightning as L
import bionemo_wds.compat.bionemo as ours
from bionemo.webdatamodule.datamodule import PickledDataWDS, WebDataModule


def test_the_names_are_ours(splits):
    assert WebDataModule is ours.WebDataModule and PickledDataWDS is ours.PickledDataWDS
    assert [s.name for s in splits] == ["train", "val", "test"]


def test_a_gpu_trainer_runs_here():
    trainer = L.Trainer(max_epochs=1, accelerator="gpu", devices=1, logger=False)
    assert trainer.num_devices == 1


def test_FAILS():
    assert WebDataModule is None
"""


def suite(root: Path, failing: bool) -> Path:
    """A bionemo-framework-like checkout under `root` with the small suite in its place."""
    tests = root / "sub-packages" / "bionemo-webdatamodule" / "tests" / "bionemo" / "webdatamodule"
    tests.mkdir(parents=True)
    (tests / "__init__.py").write_text("")
    (tests / "conftest.py").write_text(CONFTEST)
    body = TESTS if failing else TESTS[: TESTS.index("\n\ndef test_FAILS")] + "\n"
    (tests / "test_datamodule.py").write_text(body)
    return root


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_the_suite_runs_against_our_module(tmp_path: Path) -> None:
    checkout = suite(tmp_path / "bionemo-framework", failing=False)
    done = run(str(checkout), "--", "-q")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 passed" in done.stdout
    assert not list(checkout.rglob(".pytest_cache")) and not list(checkout.rglob("__pycache__"))  # only read


@pytest.mark.slow
def test_a_failing_upstream_test_fails_the_run(tmp_path: Path) -> None:
    checkout = suite(tmp_path / "bionemo-framework", failing=True)
    done = run(str(checkout / "sub-packages" / "bionemo-webdatamodule" / "tests"), "--", "-q")
    assert done.returncode == 1 and "1 failed, 2 passed" in done.stdout, done.stdout[-3000:]


def test_a_folder_without_the_suite_is_one_line(tmp_path: Path) -> None:
    done = run(str(tmp_path))
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and f"{tmp_path} holds no bionemo-webdatamodule tests" in done.stderr
