"""What a new (or careless) user hits on the load side and around `prepare` (issue 10): a mistake gets
one clear error naming the culprit; a documented choice does what the README says; concurrent or
killed runs do not crash each other or leave processes behind; `verify` finds what the loader refuses.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest
from conftest import KLEBSIELLA, LAMBDA, shard_index

import bionemo_wds.compat.bionemo as bionemo10
from bionemo_wds import GenomicWebDataModule, PickledDataWDS, Split, WebDataModule
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import MANIFEST_NAME
from bionemo_wds.load.shard_errors import CorruptShardError
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.report import verify
from bionemo_wds.storage.store import Store

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
VAL_SHARD = "val/wdshards-000000.tar"
TEST_SHARD = "test/wdshards-000001.tar"


@pytest.fixture
def data(kleb_1024: Path, tmp_path: Path) -> Path:
    """A copy of the shared Klebsiella dataset (1024-token samples) that a test may damage."""
    root = tmp_path / "kleb"
    shutil.copytree(kleb_1024, root)
    return root


def load_manifest(root: Path) -> dict:
    return json.loads((root / MANIFEST_NAME).read_text())


def save_manifest(root: Path, manifest: dict) -> None:
    (root / MANIFEST_NAME).write_text(json.dumps(manifest))


def shard_entry(manifest: dict, rel: str) -> dict:
    return next(sh for info in manifest["splits"].values() for sh in info["shards"] if sh["path"] == rel)


def read_split(dm: GenomicWebDataModule, split: str) -> tuple[int, list[str], int]:
    """(batches, real window keys, filler windows) of one pass over the split's loader."""
    loader = getattr(dm, f"{split}_dataloader")()
    batches = list(loader)
    assert len(batches) == len(loader)  # every rank still yields its planned batches
    keys = [k for b in batches for k in b["keys"] if k]
    return len(batches), keys, sum(int(b["filler"].sum()) for b in batches)


def skip_warnings(record: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in record if str(w.message).startswith("skipped:")]


# --- 1: batch sizes, split keys, warnings --------------------------------------------------------


def test_batch_sizes_below_one_are_clear_value_errors(kleb_1024):
    with pytest.raises(ValueError, match=r"^micro_batch_size must be at least 1, got 0$"):
        GenomicWebDataModule(str(kleb_1024), micro_batch_size=0)
    for bad in (0, -8):  # 0 used to mean "the default" silently, -8 failed only at the first loader
        with pytest.raises(ValueError, match=rf"^global_batch_size must be at least 1 .*got {bad}$"):
            GenomicWebDataModule(str(kleb_1024), micro_batch_size=4, global_batch_size=bad)
    dirs = {Split.train: str(kleb_1024 / "train")}
    with pytest.raises(ValueError, match=r"^global_batch_size must be at least 1, got 0$"):
        WebDataModule(dirs, {Split.train: 10}, "msgpack", 0)  # at construction, not at the first loader


def first_items(loader, n: int = 3) -> list:
    it = iter(loader)
    return [next(it) for _ in range(n)]


@pytest.mark.parametrize("api", ["first release", "1.0"])
def test_split_keys_may_be_the_split_names(kleb_1024, api):
    """{"train": dir} (what a YAML config gives) is the same module as {Split.train: dir}."""
    dirs = {name: str(kleb_1024 / name) for name in ("train", "val")}

    def make(keyed):
        if api == "first release":
            return WebDataModule(keyed(dirs), keyed({"train": 20, "val": 20}), "msgpack", 4)
        return bionemo10.WebDataModule("msgpack", keyed(dirs), kwargs_wld=keyed({"train": {"batch_size": 2}}))

    by_name = make(lambda d: d)
    by_split = make(lambda d: {Split[k]: v for k, v in d.items()})
    for dm in (by_name, by_split):
        dm.setup("fit")
    assert first_items(by_name.train_dataloader()) == first_items(by_split.train_dataloader())
    assert first_items(by_name.val_dataloader()) == first_items(by_split.val_dataloader())


def test_an_unknown_split_name_is_a_clear_value_error(kleb_1024):
    train = str(kleb_1024 / "train")
    with pytest.raises(ValueError, match=r"^dirs_tars_wds: 'training' is not a split; use Split.train, .*'train'"):
        WebDataModule({"training": train}, None, "msgpack", 2)
    with pytest.raises(ValueError, match=r"^n_samples: 'bogus' is not a split"):
        WebDataModule({"train": train}, {"bogus": 3}, "msgpack", 2)
    with pytest.raises(ValueError, match=r"^kwargs_wld: 'Train' is not a split"):
        bionemo10.WebDataModule("msgpack", {"train": train}, kwargs_wld={"Train": {}})
    with pytest.raises(ValueError, match=r"^dirs_tars_wds names the train split twice"):
        WebDataModule({"train": train, Split.train: train}, None, "msgpack", 2)
    with pytest.raises(ValueError, match=r"names_subset: 'tets' is not a split"):
        PickledDataWDS("pickles", "pkl", {"tets": ["a"]}, "tars_", global_batch_size=2)


@pytest.mark.parametrize("api", ["first release", "1.0"])
def test_pickled_splits_may_be_named_by_strings(tmp_path, api):
    pickles = tmp_path / "pickles"
    pickles.mkdir()
    for i in range(4):
        (pickles / f"s{i}.pkl").write_bytes(pickle.dumps(i))
    names = {"train": ["s0", "s1"], "val": ["s2"], "test": ["s3"]}
    prefix = str(tmp_path / "tars_")
    if api == "first release":
        dm = PickledDataWDS(str(pickles), "pkl", names, prefix, global_batch_size=1)
    else:
        dirs = {name: f"{prefix}{name}" for name in names}
        dm = bionemo10.PickledDataWDS(str(pickles), names, "pkl", dirs)
    dm.prepare_data()
    assert sorted(p.name for p in tmp_path.glob("tars_*")) == ["tars_test", "tars_train", "tars_val"]
    dm.setup("fit")
    assert len(list(dm.train_dataloader())) == 2  # two samples: one batch each (global batch 1; DataLoader's 1)


def test_stray_shard_warning_once_on_rank_0_and_no_other_warning(data):
    """There is no worker-cap warning any more (the planned reader divides records, not shards); the
    one warning setup can give (a shard file the manifest does not list) comes once, from rank 0."""
    shutil.copy(data / "train/wdshards-000000.tar", data / "train/wdshards-000099.tar")
    for rank in (0, 1):
        dm = GenomicWebDataModule(str(data), micro_batch_size=4, num_workers=4, dp_rank=rank, dp_size=2)
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            for stage in ("fit", "validate", "test"):
                dm.setup(stage)
        messages = [str(w.message) for w in record]
        assert messages == (
            [f"{data}: ignoring 1 file(s) not listed in manifest.json: train/wdshards-000099.tar"] if rank == 0 else []
        ), messages


# --- 2: handler="warn" and a shard of the wrong size ---------------------------------------------


def test_warn_reads_a_truncated_shard_as_filler_instead_of_failing_setup(data):
    path = data / VAL_SHARD
    listed = path.stat().st_size
    cut = listed // 2
    os.truncate(path, cut)  # the manifest still lists the full size
    manifest = load_manifest(data)
    entry = shard_entry(manifest, VAL_SHARD)
    records = shard_index(data, "val", manifest["splits"]["val"]["shards"].index(entry))
    ends = (records.offset.astype(int) + records.size).tolist()
    whole = sum(w for end, w in zip(ends, records.windows.tolist()) if end <= cut)
    n_val = load_manifest(data)["splits"]["val"]["n_samples"]

    with pytest.raises(CorruptShardError, match=re.escape(f"shard {path} has {cut} bytes but the manifest lists")):
        GenomicWebDataModule(str(data), micro_batch_size=16).setup("validate")  # "raise": at setup, as before

    dm = GenomicWebDataModule(str(data), micro_batch_size=16, handler="warn")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        dm.setup("validate")
        assert dm.skipped == 1
        _, keys, filler = read_split(dm, "val")
    assert skip_warnings(record) == [
        f"skipped: shard {path} has {cut} bytes but the manifest lists {listed}: the manifest disagrees with the "
        "file (run `bionemo-wds verify`); its records past the end of the file are read as filler"
    ]
    assert dm.skipped == 1  # counted once, not again per record read
    assert len(keys) == len(set(keys)) == n_val - (entry["n_samples"] - whole)
    assert filler >= entry["n_samples"] - whole


def test_warn_reads_a_missing_shard_as_filler_when_its_split_is_read(data):
    (data / TEST_SHARD).unlink()
    entry = shard_entry(load_manifest(data), TEST_SHARD)
    n_test = load_manifest(data)["splits"]["test"]["n_samples"]
    dm = GenomicWebDataModule(str(data), micro_batch_size=16, handler="warn")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        dm.setup("fit")  # does not read the test split: nothing to say yet
        assert skip_warnings(record) == [] and dm.skipped == 0
        dm.setup("test")
        _, keys, filler = read_split(dm, "test")
    assert skip_warnings(record) == [
        f"skipped: shard {data / TEST_SHARD} is listed in {data}/manifest.json but missing; its records are read "
        "as filler"
    ]
    assert dm.skipped == 1
    assert len(keys) == len(set(keys)) == n_test - entry["n_samples"]
    assert filler >= entry["n_samples"]


# --- 3: one lock for prepare and prepare_data ----------------------------------------------------

# Imports the CLI, then waits for a go file before running it, so the slow imports of two runs do not
# decide which of them is inside `prepare` when.
WAITING_CLI = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from bionemo_wds.cli.main import main
    go = Path(sys.argv[1])
    print("ready", flush=True)
    while not go.exists():
        time.sleep(0.01)
    sys.exit(main(sys.argv[2:]))
    """
)


def test_the_lock_of_an_output(tmp_path):
    from bionemo_wds.prepare.run import lock_path

    assert lock_path(Store(tmp_path / "out")) == Path(f"{tmp_path / 'out'}.lock")
    remote = lock_path(Store("s3://bucket/run1"))
    assert remote.parent == Path(tempfile.gettempdir()) and re.fullmatch(r"bionemo-wds-[0-9a-f]{16}\.lock", remote.name)
    assert lock_path(Store("s3://bucket/run2")) != remote


@pytest.mark.slow
def test_two_prepare_runs_into_one_out_do_not_crash_each_other(tmp_path):
    """Two real `bionemo-wds prepare` processes into the same --out: the second starts while the first
    writes, waits for it, and finds the job done. (Before the lock: it resumed the same job and the
    two deleted each other's temporaries: FileNotFoundError.)"""
    out, go_a, go_b = tmp_path / "out", tmp_path / "go_a", tmp_path / "go_b"
    args = [str(KLEBSIELLA), "--out", str(out), "--seq-length", "2048", "--stride", "1900", "--workers", "1"]
    args += ["--samples-per-shard", "3", "--windows-per-record", "1"]  # ~1000 shards: a few seconds of writing
    runs = [
        subprocess.Popen(
            [sys.executable, "-c", WAITING_CLI, str(go), "prepare", *args],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for go in (go_a, go_b)
    ]
    try:
        for run in runs:
            assert run.stdout is not None and run.stdout.readline() == "ready\n"
        go_a.touch()
        deadline = time.time() + 60
        while not list(out.glob("train/*.tar")) and time.time() < deadline:
            time.sleep(0.01)
        assert not (out / MANIFEST_NAME).exists(), "the first run finished before the second started"
        go_b.touch()
        results = [run.communicate(timeout=300) for run in runs]
    finally:
        for run in runs:
            run.kill()
    for run, (_, err) in zip(runs, results):
        assert run.returncode == 0 and "Traceback" not in err, err
    assert f"waiting for another prepare into {out}" in results[1][1]
    assert "already prepared with these options; nothing to do" in results[1][0]
    assert verify(out, progress=False).ok


def test_prepare_data_takes_the_lock_prepare_takes(tmp_path):
    from filelock import FileLock

    from bionemo_wds.prepare.run import lock_path

    out = tmp_path / "lam"
    options = {"split": [1, 0, 0], "stride": 1000}
    dm = GenomicWebDataModule(
        str(out), micro_batch_size=4, seq_length=1024, fasta=[str(LAMBDA)], prepare_options=options
    )
    errors: list[BaseException] = []

    def prepare_data() -> None:
        try:
            dm.prepare_data()
        except BaseException as exc:  # re-raised by the test below
            errors.append(exc)

    holder = FileLock(str(lock_path(Store(out))))  # as another process or node would hold it
    holder.acquire()
    worker = threading.Thread(target=prepare_data)
    try:
        worker.start()
        worker.join(1.5)
        assert worker.is_alive() and not out.exists()  # waits: nothing written under another's lock
    finally:
        holder.release()
    worker.join(60)
    assert not errors and not worker.is_alive()
    assert (out / MANIFEST_NAME).exists()


def test_an_out_under_a_file_is_refused_by_the_lock_with_one_line(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    with pytest.raises(BadInputError, match=re.escape(f"--out {tmp_path}/file/sub")) as info:
        prepare([LAMBDA], tmp_path / "file" / "sub", PrepareOptions(seq_length=1024, split=(1, 0, 0), progress=False))
    assert "\n" not in str(info.value) and "not a directory" in str(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_a_refused_run_leaves_no_lock_file(tmp_path):
    bad = tmp_path / "bad.fa"
    bad.write_text(">x\nACGTXACGT\n")
    with pytest.raises(BadInputError):
        prepare([bad], tmp_path / "new" / "out", PrepareOptions(seq_length=1024, split=(1, 0, 0), progress=False))
    with pytest.raises(BadInputError):
        prepare([bad], tmp_path / "out", PrepareOptions(seq_length=1024, split=(1, 0, 0), progress=False))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.fa"]


# --- 4: pool workers die with a killed prepare ---------------------------------------------------


def children(pid: int) -> list[int]:
    """Live child processes of `pid` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def alive(pid: int) -> bool:
    """Running (not gone, not a zombie waiting for a reaper)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_pool_workers_exit_when_prepare_is_killed(tmp_path):
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "bionemo_wds.cli", "prepare", str(KLEBSIELLA), "--out", str(out), "--quiet"]
    cmd += ["--seq-length", "2048", "--stride", "1900", "--samples-per-shard", "3", "--windows-per-record", "1"]
    proc = subprocess.Popen([*cmd, "--workers", "2"], env=ENV)
    try:
        deadline = time.time() + 60
        while len(list(out.glob("*/*.tar"))) < 10 and time.time() < deadline:
            time.sleep(0.01)
        workers = children(proc.pid)
        assert len(workers) >= 2, "no pool workers found"
        assert not (out / MANIFEST_NAME).exists(), "killed too late"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.time() + 5
    while any(alive(w) for w in workers) and time.time() < deadline:
        time.sleep(0.05)
    survivors = [w for w in workers if alive(w)]
    for w in survivors:
        os.kill(w, signal.SIGKILL)
    assert not survivors, f"pool workers {survivors} outlived the killed prepare"


# --- 5: verify reports a manifest that disagrees with its shards ----------------------------------


def n_samples_off(root: Path) -> str:
    manifest = load_manifest(root)
    manifest["splits"]["train"]["n_samples"] += 5
    save_manifest(root, manifest)
    held = manifest["splits"]["train"]["n_samples"] - 5
    return f"manifest.json: the train split lists n_samples {held + 5} but its shards hold {held}"


def listed_twice(root: Path) -> str:
    manifest = load_manifest(root)
    val = manifest["splits"]["val"]
    val["shards"].append(dict(val["shards"][0]))
    val["n_samples"] += val["shards"][0]["n_samples"]  # the split agrees with its (doubled) list
    val["n_tokens"] += val["shards"][0]["n_tokens"]
    save_manifest(root, manifest)
    return f"{VAL_SHARD}: listed more than once in the manifest (val, val)"


def shard_not_listed(root: Path) -> str:
    manifest = load_manifest(root)
    test = manifest["splits"]["test"]
    dropped = test["shards"].pop()
    test["n_samples"] -= dropped["n_samples"]
    test["n_tokens"] -= dropped["n_tokens"]
    save_manifest(root, manifest)
    return f"{dropped['path']}: shard on disk but not in the manifest"


def split_dropped(root: Path) -> str:
    manifest = load_manifest(root)
    del manifest["splits"]["test"]  # its folder and shards stay
    save_manifest(root, manifest)
    return "test/wdshards-000000.tar: shard on disk but not in the manifest"


def listed_in_another_split(root: Path) -> str:
    manifest = load_manifest(root)
    val, train = manifest["splits"]["val"], manifest["splits"]["train"]
    moved = val["shards"].pop()
    train["shards"].append(moved)
    for key in ("n_samples", "n_tokens"):  # both splits agree with their lists
        val[key] -= moved[key]
        train[key] += moved[key]
    save_manifest(root, manifest)
    return f"{moved['path']}: listed in the train split but not in its folder train/"


@pytest.mark.parametrize(
    "damage", [n_samples_off, listed_twice, shard_not_listed, split_dropped, listed_in_another_split]
)
def test_verify_reports_a_manifest_that_disagrees_with_its_shards(data, damage):
    expected = damage(data)
    report = verify(data, progress=False)
    assert expected in report.problems, report.problems
    assert not report.ok


def test_verify_cli_exits_1_naming_each_disagreement(data):
    expected = [damage(data) for damage in (n_samples_off, listed_twice, shard_not_listed)]
    done = subprocess.run(
        [sys.executable, "-m", "bionemo_wds.cli", "verify", str(data), "--quiet"],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    bad = [line for line in done.stderr.splitlines() if line.startswith("BAD ")]
    for problem in expected:
        assert f"BAD {problem}" in bad, done.stderr
    assert "Traceback" not in done.stderr
