"""`prepare` whose output the OS refuses to write (a full disk, a quota, permissions, a read-only
filesystem): one line naming the file and the output, exit 2, no half file under a final name, and
the same command, run again once the fault is gone, resumes to the bytes of an uninterrupted run.

The fault is injected where every local file of the package is opened for writing
(`storage.atomic`'s ``open``): the file it returns writes a few bytes, then fails as a full disk does.
Pool workers are forked after the hook is set, so they fail the same way. A slow test fills a real
1 MiB tmpfs where this process may mount one.
"""

from __future__ import annotations

import errno
import gzip
import io
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import KLEBSIELLA, LAMBDA, tree_bytes

import bionemo_wds.storage.atomic as atomic
from bionemo_wds.cli.main import main
from bionemo_wds.errors import OutputWriteError
from bionemo_wds.format.write_errors import output_write_error, writing_output

#: Small shards of the lambda genome: several train shards, every end file (index, table, manifest).
ARGS = [
    "--seq-length",
    "1024",
    "--stride",
    "1000",
    "--samples-per-shard",
    "8",
    "--windows-per-record",
    "2",
    "--split",
    "1,0,0",
    "--quiet",
]
#: Bytes a failing file takes before the disk is "full" (a part of the smallest file, the table).
WRITTEN_BEFORE_FAULT = 64


class FillingFile(io.FileIO):
    """A file on a disk that fills up after `WRITTEN_BEFORE_FAULT` bytes, failing with `code`."""

    code = errno.ENOSPC

    def write(self, data) -> int:  # type: ignore[override]
        if self.tell() + len(data) > WRITTEN_BEFORE_FAULT:
            raise OSError(self.code, os.strerror(self.code))
        return super().write(data)


def fail_writes_of(monkeypatch: pytest.MonkeyPatch, final_name: str, code: int = errno.ENOSPC, at_open: bool = False):
    """Make every write of a file named `final_name` fail with `code` (at its open when `at_open`,
    as a directory one may not write does; else after a few bytes, as a full disk does)."""

    def fault_open(path, mode="r", *args, **kwargs):
        if Path(path).name.startswith(f".{final_name}.tmp-") and "w" in mode:
            if at_open:
                raise OSError(code, os.strerror(code), os.fspath(path))
            filling = type("Filling", (FillingFile,), {"code": code})
            return filling(path, mode.replace("b", "") or "w")
        return open(path, mode, *args, **kwargs)

    monkeypatch.setattr(atomic, "open", fault_open, raising=False)


def run_prepare(out: Path, *extra: str, inputs: tuple[Path, ...] = (LAMBDA,)) -> int:
    return main(["prepare", *map(str, inputs), "--out", str(out), *ARGS, *extra])


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("whole") / "out"
    assert run_prepare(out, "--workers", "1") == 0
    return tree_bytes(out)


def error_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


def no_partial_files(out: Path, final_name: str) -> None:
    assert not list(out.rglob(final_name)), f"{final_name} is visible under its final name"
    assert not list(out.rglob(f".{final_name}.tmp-*")), "a temporary of the failed write is left"


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_full_disk_while_writing_a_shard_is_one_line_and_the_rerun_resumes(
    tmp_path, monkeypatch, capsys, uninterrupted, workers
):
    if workers != "1" and mp.get_start_method() != "fork":
        pytest.skip("the write hook reaches pool workers only when they are forked")
    out = tmp_path / "made by the run" / "out"  # the directories a run makes are kept too
    shard = "wdshards-000002.tar"
    fail_writes_of(monkeypatch, shard)
    assert run_prepare(out, "--workers", workers) == 2
    line = error_line(capsys)
    assert line.startswith("bionemo-wds prepare: error: no space left on device writing "), line
    assert f"{out / 'train' / shard}" in line and f"shard train/{shard} of --out {out}" in line, line
    assert "run the same command again" in line and "damaged" not in line, line
    no_partial_files(out, shard)
    assert not (out / "manifest.json").exists()
    if workers == "1":  # shards in order: those before the failed one are kept for the rerun
        assert (out / "train" / "wdshards-000000.tar").exists() and (out / "train" / "wdshards-000001.tar").exists()

    monkeypatch.undo()
    assert run_prepare(out, "--workers", workers) == 0
    assert tree_bytes(out) == uninterrupted  # manifest, shards, index files, table: byte for byte


def test_a_pool_worker_full_disk_is_the_in_process_line(tmp_path, monkeypatch, capsys):
    """The same fault in a pool worker (its error crosses the process boundary) and in this process
    give the same line, not the worker's traceback."""
    if mp.get_start_method() != "fork":
        pytest.skip("the write hook reaches pool workers only when they are forked")
    fail_writes_of(monkeypatch, "wdshards-000001.tar")
    lines = []
    for workers in ("1", "3"):
        out = tmp_path / "out"
        assert run_prepare(out, "--workers", workers) == 2
        lines.append(error_line(capsys))
        shutil.rmtree(out)
    assert lines[0] == lines[1], lines


@pytest.mark.parametrize(
    ("final_name", "what"),
    [
        ("record-index.npy", "the record index of split train"),
        ("sequences.tsv", "the sequence table"),
        ("manifest.json", "the manifest, written last"),
        (".prepare-plan.json", "the run's plan, written first"),
    ],
)
def test_a_full_disk_while_writing_an_end_file_names_it_and_the_rerun_resumes(
    tmp_path, monkeypatch, capsys, uninterrupted, final_name, what
):
    out = tmp_path / "out"
    fail_writes_of(monkeypatch, final_name)
    assert run_prepare(out, "--workers", "1") == 2
    line = error_line(capsys)
    assert "no space left on device writing " in line and f"({what})" in line, line
    assert final_name in line, line
    no_partial_files(out, final_name)
    monkeypatch.undo()
    assert run_prepare(out, "--workers", "1") == 0
    assert tree_bytes(out) == uninterrupted


@pytest.mark.parametrize(
    ("code", "said", "advice"),
    [
        (errno.EACCES, "permission denied", "make it writable"),
        (errno.EROFS, "read-only file system", "choose another --out"),
    ],
)
def test_an_output_that_may_not_be_written_is_one_line_naming_the_file(
    tmp_path, monkeypatch, capsys, code, said, advice
):
    out = tmp_path / "out"
    fail_writes_of(monkeypatch, "wdshards-000000.tar", code, at_open=True)
    assert run_prepare(out, "--workers", "1") == 2
    line = error_line(capsys)
    assert f"error: {said} writing {out / 'train' / 'wdshards-000000.tar'}" in line, line
    assert advice in line and "damaged" not in line and "not a" not in line, line


def test_only_errors_about_the_output_are_turned(tmp_path):
    out = str(tmp_path / "out")
    inside = OSError(errno.EACCES, "Permission denied", os.path.join(out, "train", ".x.tmp-1"))
    outside = OSError(errno.EACCES, "Permission denied", str(tmp_path / "input.fa"))
    unnamed = OSError(errno.ENOSPC, "No space left on device")
    for exc, turned in ((inside, True), (outside, False), (unnamed, True), (OSError(errno.EIO, "I/O"), False)):
        error = output_write_error(exc, f"{out}/f", "a file", out)
        assert (error is not None) is turned, exc
    with pytest.raises(OSError) as raised, writing_output(f"{out}/f", "a file", out):
        raise outside
    assert raised.value is outside  # an input's error passes unchanged
    with pytest.raises(OutputWriteError, match=r"^no space left on device writing .*/f \(a file\)") as turned_error:
        with writing_output(f"{out}/f", "a file", out):
            raise unnamed
    assert turned_error.value.errno == errno.ENOSPC and turned_error.value.__cause__ is unnamed


# -- a real full filesystem ---------------------------------------------------------------------


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 1 MiB tmpfs mounted at a fresh directory (skipped where this process may not mount one)."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


#: the full-disk runs' options (beside the input, --out and --executor)
FULL_DISK_ARGS = ["--seq-length", "1024", "--samples-per-shard", "400", "--workers", "2", "--quiet"]


@pytest.fixture(scope="module")
def plain_klebsiella(tmp_path_factory) -> Path:
    """The Klebsiella assembly as plain FASTA (so nothing is unpacked into the output's cache)."""
    plain = tmp_path_factory.mktemp("plain") / "kleb.fa"
    with open(plain, "wb") as fh:
        fh.write(gzip.decompress(KLEBSIELLA.read_bytes()))
    return plain


@pytest.fixture(scope="module")
def roomy_klebsiella(plain_klebsiella, tmp_path_factory) -> Path:
    """The full-disk runs' output where there is room: one run (in this process, the local executor)
    for both executors, whose outputs are the same bytes (`test_dask_executor`)."""
    roomy = tmp_path_factory.mktemp("roomy") / "out"
    assert main(["prepare", str(plain_klebsiella), *FULL_DISK_ARGS, "--out", str(roomy)]) == 0
    return roomy


@pytest.mark.slow
@pytest.mark.parametrize("executor", ["local", "dask"])
def test_a_real_full_disk_is_one_line_from_the_cli_and_the_rerun_resumes(
    tmp_path, small_tmpfs, executor, plain_klebsiella, roomy_klebsiella
):
    """The Klebsiella assembly into a 1 MiB tmpfs through the real command line and two worker
    processes (a process pool, or a Dask LocalCluster); then the tmpfs grows and the same command
    resumes to the bytes of a run that had room."""
    if executor == "dask":
        pytest.importorskip("distributed")
    argv = [str(plain_klebsiella), *FULL_DISK_ARGS]
    command = [sys.executable, "-m", "bionemo_wds.cli", "prepare", *argv, "--executor", executor]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    out = small_tmpfs / "out"
    full = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert full.returncode == 2, full.stderr[-3000:]
    assert "Traceback" not in full.stderr, full.stderr[-3000:]
    lines = full.stderr.splitlines()  # the one line, also from Dask (its LocalCluster logs errors only)
    assert len(lines) == 1, full.stderr[-3000:]
    assert lines[0].startswith("bionemo-wds prepare: error: no space left on device writing "), lines[0]
    assert f"of --out {out})" in lines[0], lines[0]
    shard = lines[0].split(" writing ", 1)[1].split(" ", 1)[0]
    assert not Path(shard).exists() and not list(out.rglob(".*.tmp-*"))

    subprocess.run(["mount", "-o", "remount,size=64m", str(small_tmpfs)], check=True)
    again = subprocess.run([*command, "--out", str(out)], capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0, again.stderr[-3000:]
    assert tree_bytes(out) == tree_bytes(roomy_klebsiella)


def test_a_full_disk_while_writing_a_sequence_index_names_it_and_the_rerun_resumes(tmp_path, monkeypatch, capsys):
    layout = ["--layout", "sequences", "--seq-length", "1024", "--samples-per-shard", "8", "--split", "1,0,0"]
    whole, out = tmp_path / "whole", tmp_path / "out"
    assert main(["prepare", str(LAMBDA), "--out", str(whole), *layout, "--quiet"]) == 0
    fail_writes_of(monkeypatch, "sequence-index.npy")
    assert main(["prepare", str(LAMBDA), "--out", str(out), *layout, "--quiet"]) == 2
    line = error_line(capsys)
    assert f"writing {out / 'train' / 'sequence-index.npy'} (the sequence index of split train)" in line, line
    no_partial_files(out, "sequence-index.npy")
    monkeypatch.undo()
    assert main(["prepare", str(LAMBDA), "--out", str(out), *layout, "--quiet"]) == 0
    assert tree_bytes(out) == tree_bytes(whole)


def test_any_other_refused_write_under_the_output_is_one_line_naming_it(tmp_path, monkeypatch, capsys):
    """A write no writer names (the output's cache directory, on an output mounted read-only) is
    still one line naming the file and the output, never a traceback."""
    real_mkdir = Path.mkdir

    def read_only_mkdir(self, *args, **kwargs):
        if self.name == ".cache":
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only_mkdir)
    out = tmp_path / "out"
    assert run_prepare(out, "--workers", "1") == 2
    line = error_line(capsys)
    assert line.endswith(
        f"read-only file system writing {out / '.cache'} (in --out {out}): "
        "the filesystem is read-only: choose another --out"
    ), line
