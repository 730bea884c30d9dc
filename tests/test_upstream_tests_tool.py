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
def test_the_suite_runs_against_our_module_and_a_failing_test_fails_the_run(tmp_path: Path) -> None:
    """One run of the small suite (a run imports Lightning, about 10 s of CPU): the two tests that use
    our names and a GPU trainer pass, the failing one fails the run with pytest's exit code, and the
    checkout is only read."""
    checkout = suite(tmp_path / "bionemo-framework", failing=True)
    done = run(str(checkout), "--", "-q")
    assert done.returncode == 1 and "1 failed, 2 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-3000:]
    assert "test_FAILS" in done.stdout
    assert not list(checkout.rglob(".pytest_cache")) and not list(checkout.rglob("__pycache__"))  # only read


def test_the_suite_is_found_from_the_checkout_or_its_tests_folder(tmp_path: Path) -> None:
    import runpy

    find_suite = runpy.run_path(str(TOOL), run_name="upstream_tests")["find_suite"]
    checkout = suite(tmp_path / "bionemo-framework", failing=False)
    tests = checkout / "sub-packages" / "bionemo-webdatamodule" / "tests"
    assert find_suite(checkout) == tests and find_suite(tests) == tests
    with pytest.raises(SystemExit, match="holds no bionemo-webdatamodule tests"):
        find_suite(tmp_path)


def test_a_folder_without_the_suite_is_one_line(tmp_path: Path) -> None:
    done = run(str(tmp_path))
    assert done.returncode != 0
    assert done.stderr.strip().count("\n") == 0 and f"{tmp_path} holds no bionemo-webdatamodule tests" in done.stderr
