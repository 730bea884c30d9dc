"""Open files at scale: a rank holds a bounded number of descriptors whatever the number of datasets
or shards, and the system refusing a file is reported as that, never as damaged data.

- A blend of 1,000 copies of a small lambda dataset is set up and read under ``ulimit -n 256`` (a
  child process): before, the index files' memory maps kept a descriptor each and the 244th
  dataset failed with "record-index.npy is damaged ... Too many open files".
- `storage.mapped.load_npy` maps an ``.npy`` file with no descriptor left open; `OpenFiles` keeps
  at most its limit of shard files open and never closes one under a read.
- A real EMFILE (the soft limit lowered to the descriptors already open) and EACCES (``chmod 000``;
  as root, where permissions do not deny, a refusing ``open``) are `FileSystemError`s naming the
  file and what happened, exit code 2 in the CLI, also under ``handler="warn"``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import LAMBDA

from bionemo_wds.cli.exit_codes import user_error
from bionemo_wds.cli.main import main
from bionemo_wds.errors import FileSystemError, OptionError
from bionemo_wds.format import read_manifest
from bionemo_wds.format.split_index_file import read_split_index
from bionemo_wds.load.dataset import GenomicDataset
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.storage import mapped
from bionemo_wds.storage import store as store_module
from bionemo_wds.storage.open_files import MAX_OPEN_ENV, OpenFiles, default_limit
from bionemo_wds.storage.shards import LocalShards
from bionemo_wds.storage.store import Store

resource = pytest.importorskip("resource")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def lam(tmp_path_factory) -> Path:
    """Lambda, all train, in 5 shards of 10 windows (2 per record)."""
    out = tmp_path_factory.mktemp("open_files") / "lam"
    opts = PrepareOptions(
        seq_length=1024, stride=1000, samples_per_shard=10, windows_per_record=2, split=(1, 0, 0), progress=False
    )
    prepare([LAMBDA], out, opts)
    return out


def copies(one: Path, where: Path, n: int) -> list[Path]:
    """`n` copies of a prepared dataset (hard links: every file its own name, as separate datasets are)."""
    out = []
    for i in range(n):
        dest = where / f"copy{i:04d}"
        if not dest.exists():
            shutil.copytree(one, dest, copy_function=os.link)
        out.append(dest)
    return out


def open_fds() -> int:
    """Descriptors open in this process (not counting the one that lists them)."""
    return len(os.listdir("/proc/self/fd")) - 1


@contextlib.contextmanager
def no_more_files() -> Iterator[None]:
    """The soft limit of open files lowered to the lowest free descriptor number (the one the next
    open would get): the next open is a real EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    free = os.open(os.devnull, os.O_RDONLY)
    os.close(free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (free, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


BLEND_RUN = textwrap.dedent(
    """
    import json, os, resource, sys, threading, time
    peak, done = [0], threading.Event()
    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], len(os.listdir("/proc/self/fd")))
            time.sleep(0.005)
    threading.Thread(target=watch, daemon=True).start()
    from bionemo_wds.load.dataset import GenomicDataset
    from bionemo_wds.storage.open_files import OPEN_FILES
    roots = sys.argv[1:]
    t0 = time.perf_counter()
    ds = GenomicDataset(
        datasets=[{"path": r, "weight": 1.0} for r in roots], micro_batch_size=16, samples_per_epoch=16 * 40
    )
    it = iter(ds)
    next(it)
    first = time.perf_counter() - t0
    rows = 16 + sum(len(next(it)["tokens"]) for _ in range(39))
    done.set()
    print(json.dumps({
        "first_batch_s": first, "rows": rows, "peak_fds": peak[0], "shards_opened": OPEN_FILES.opened,
        "limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))
    """
)


@pytest.mark.slow
def test_a_blend_of_1000_datasets_reads_under_ulimit_256(lam, tmp_path):
    """Set-up and 40 batches of a 1,000-dataset blend in a process that may open 256 files: more
    shard files are read than the limit allows open at once, and the descriptors stay bounded."""
    roots = copies(lam, tmp_path, 1000)
    script = tmp_path / "blend_run.py"
    script.write_text(BLEND_RUN)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = subprocess.run(
        ["bash", "-c", 'ulimit -n 256 && exec "$0" "$@"', sys.executable, str(script), *map(str, roots)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["limit"] == 256 and report["rows"] == 16 * 40
    assert report["shards_opened"] > 256  # the table closed files to open others
    assert report["peak_fds"] < 128  # 64 shard files, the interpreter's own, the transfer rings


def test_an_index_file_is_mapped_with_no_descriptor_left_open(lam):
    path = str(lam / "train" / "record-index.npy")
    before = open_fds()
    rows = mapped.load_npy(path)
    assert open_fds() == before
    want = np.load(path)
    assert isinstance(rows, np.memmap) and not rows.flags.writeable and rows.filename == os.path.abspath(path)
    assert rows.dtype == want.dtype and np.array_equal(rows, want)
    again = mapped.map_array(path, rows.dtype, rows.offset, rows.shape)  # as a spawned worker maps it
    assert np.array_equal(again, want) and open_fds() == before


def test_a_file_that_is_not_an_npy_array_is_a_value_error(tmp_path):
    bad = tmp_path / "x.npy"
    bad.write_bytes(b"not an array")
    with pytest.raises(ValueError):
        mapped.load_npy(str(bad))
    np.save(tmp_path / "short.npy", np.arange(100))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "short.npy").read_bytes()[:-8])
    with pytest.raises(ValueError, match="ends at byte"):
        mapped.load_npy(str(tmp_path / "cut.npy"))


def test_open_files_keeps_at_most_its_limit_and_never_closes_one_in_use(tmp_path):
    paths = []
    for i in range(6):
        paths.append(str(tmp_path / f"f{i}"))
        Path(paths[-1]).write_bytes(bytes([i]) * 10)
    table = OpenFiles(limit=2)
    shards = LocalShards(paths, files=table)
    for _ in range(2):
        for i in range(6):
            assert shards.read(i, 3, 2) == bytes([i]) * 2
            assert len(table) <= 2
    assert table.opened == 12
    held = open_fds()
    with table.descriptor(paths[0]) as a, table.descriptor(paths[1]) as b, table.descriptor(paths[2]) as c:
        # three in use over a limit of two: none is closed under its read
        assert [os.pread(fd, 1, 0) for fd in (a, b, c)] == [b"\0", b"\1", b"\2"]
    assert len(table) <= 2 and open_fds() <= held  # the one evicted while in use closed when its read ended
    before = open_fds()
    shards.close()
    assert len(table) == 0 and open_fds() <= before - 1


def test_the_limit_is_a_quarter_of_ulimit_or_the_environments(monkeypatch):
    monkeypatch.delenv(MAX_OPEN_ENV, raising=False)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    try:
        assert default_limit() == 64
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    monkeypatch.setenv(MAX_OPEN_ENV, "8")
    assert default_limit() == 8
    monkeypatch.setenv(MAX_OPEN_ENV, "many")
    with pytest.raises(OptionError, match=MAX_OPEN_ENV):
        default_limit()


def assert_refused(exc: BaseException, path: str | Path, what: str) -> None:
    text = str(exc)
    assert isinstance(exc, FileSystemError) and str(path) in text and what in text, text
    assert "damaged" not in text and "\n" not in text
    assert user_error(exc) == (exc, 2)  # one line, exit 2 in the CLI


def test_too_many_open_files_is_reported_as_that_not_as_damage(lam):
    store, manifest = Store(str(lam)), read_manifest(lam)
    index = lam / "train" / "record-index.npy"
    with no_more_files(), pytest.raises(FileSystemError) as got:
        read_split_index(store, manifest, "train")
    assert_refused(got.value, index, "too many open files")
    assert "ulimit -n" in str(got.value)
    with no_more_files(), pytest.raises(FileSystemError) as got:
        read_manifest(lam)
    assert_refused(got.value, lam / "manifest.json", "too many open files")
    shard = str(lam / "train" / "wdshards-000000.tar")
    shards = LocalShards([shard], files=OpenFiles(4))
    with no_more_files(), pytest.raises(FileSystemError) as got:
        shards.read(0, 0, 512)
    assert_refused(got.value, shard, "too many open files")


@pytest.fixture
def refuse(monkeypatch):
    """A function that makes a file unreadable: ``chmod 000``, or as root (where permissions do not
    deny) every ``open`` of it refused with EACCES, as the system would."""

    def deny(path: Path) -> None:
        if os.geteuid() != 0:
            path.chmod(0)
            return
        real_open, real_os_open = open, os.open

        def refusing(file, *args, **kwargs):
            if os.fspath(file) == str(path):
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_open(file, *args, **kwargs)

        def refusing_os(file, *args, **kwargs):
            if os.fspath(file) == str(path):
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_os_open(file, *args, **kwargs)

        monkeypatch.setattr(mapped, "open", refusing, raising=False)
        monkeypatch.setattr(store_module, "open", refusing, raising=False)
        monkeypatch.setattr(os, "open", refusing_os)

    return deny


def test_permission_denied_on_an_index_file_is_named_as_that(lam, tmp_path, refuse):
    (root,) = copies(lam, tmp_path, 1)
    shutil.copy(lam / "train" / "record-index.npy", tmp_path / "index")  # its own inode, not the shared one
    index = root / "train" / "record-index.npy"
    index.unlink()
    shutil.move(tmp_path / "index", index)
    refuse(index)
    with pytest.raises(FileSystemError) as got:
        read_split_index(Store(str(root)), read_manifest(root), "train")
    assert_refused(got.value, index, "permission denied")


def test_permission_denied_on_a_shard_is_no_damaged_shard_even_when_skipping(lam, tmp_path, refuse):
    (root,) = copies(lam, tmp_path, 1)
    shard = root / "train" / "wdshards-000000.tar"
    shutil.copy(lam / "train" / shard.name, tmp_path / "shard")
    shard.unlink()
    shutil.move(tmp_path / "shard", shard)
    refuse(shard)
    ds = GenomicDataset(str(root), micro_batch_size=8, handler="warn")
    with pytest.raises(FileSystemError) as got:
        list(ds)
    assert_refused(got.value, shard, "permission denied")


def test_verify_names_a_shard_it_may_not_read_as_refused_not_as_a_problem_of_the_shard(lam, tmp_path, refuse, capsys):
    (root,) = copies(lam, tmp_path, 1)
    shard = root / "train" / "wdshards-000002.tar"
    shutil.copy(lam / "train" / shard.name, tmp_path / "shard")
    shard.unlink()
    shutil.move(tmp_path / "shard", shard)
    refuse(shard)
    assert main(["verify", str(root), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(shard) in err and "permission denied" in err, err
