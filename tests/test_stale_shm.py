"""Shared-memory segments of loaders killed with their whole process group are removed by the next
loader (`load.shm_segments`); a live loader's segments and other programs' are never touched."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from forked_runs import ForkedRun, Zygote

from bionemo_wds.load import shm_segments
from bionemo_wds.load.shm_segments import SHM_DIR, owner, pid_namespace, remove_stale_segments, segment_name
from bionemo_wds.load.transfer import BatchTransfer


def dead_pid() -> int:
    """The pid of a process that has ended and been reaped."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_names_say_whose_they_are():
    name = segment_name()
    assert owner(name) == (pid_namespace(), os.getpid())
    assert len(f"/{name}") <= 31 or sys.platform.startswith("linux")  # macOS's limit on names: Linux only here
    assert owner("psm_5de15595") is None and owner(f"{name}x") is None and owner("bwds_1_2_zzzzzzzz") is None


def test_only_our_segments_of_gone_owners_are_removed(tmp_path):
    ns, gone = pid_namespace(), dead_pid()
    files = {
        "stale": f"bwds_{ns}_{gone}_0123abcd",
        "live": f"bwds_{ns}_{os.getpid()}_0123abcd",
        "parent": f"bwds_{ns}_{os.getppid()}_89abcdef",
        "other namespace": f"bwds_{ns + 1}_{gone}_0123abcd",
        "python's": "psm_0123abcd",
        "not quite ours": f"bwds_{ns}_{gone}_0123abcd.old",
    }
    for name in files.values():
        (tmp_path / name).write_bytes(b"x")
    assert remove_stale_segments(tmp_path) == [files["stale"]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(v for k, v in files.items() if k != "stale")
    assert remove_stale_segments(tmp_path / "missing") == []  # no shared-memory directory: nothing to do


@pytest.mark.skipif(not SHM_DIR.is_dir(), reason="shared memory is not a directory here")
def test_a_transfer_segment_is_named_ours_and_unlinked_on_close():
    transfer = BatchTransfer(workers=1, slots=2, slot_bytes=64)
    name = transfer.segment.name.lstrip("/")
    assert owner(name) == (pid_namespace(), os.getpid()) and (SHM_DIR / name).exists()
    transfer.close()
    assert not (SHM_DIR / name).exists()


LOADER = """
import sys, time
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.load.splits import Split

dm = GenomicWebDataModule({root!r}, micro_batch_size=4, num_workers=2, transfer_timeout=60)
dm.setup("fit")
names = [loaders[0].transfer.segment.name.lstrip("/") for loaders in dm.split_loaders.values()]
batches = iter(dm.train_dataloader())
first = next(batches)
print(" ".join(names), len(first["keys"]), flush=True)
if sys.argv[1] == "stay":
    time.sleep(600)
"""


def start_loader(zygote: Zygote, script: Path, mode: str) -> tuple[ForkedRun, list[str]]:
    """A loader in its own process group (session), forked by the `zygote` (which imported the data
    module once); returns it once its first batch is out, with the names of its segments."""
    log = script.with_name(f"{script.stem}-{len(zygote.runs)}.log")
    run = zygote.run(script, [mode], log)
    deadline = time.monotonic() + 120
    line: list[str] = []
    while not line and time.monotonic() < deadline and run.poll() is None:
        time.sleep(0.05)
        text = log.read_text() if log.exists() else ""  # its stderr too: a warning may come first
        found = re.search(r"^((?:bwds_\S+ )+\d+)\n", text, re.MULTILINE)
        line = found.group(1).split() if found else []
    assert line, log.read_text()[-3000:] if log.exists() else "no output"
    assert line[-1] == "4"  # a whole first batch came through the rings
    return run, line[:-1]


def kill_group(proc: ForkedRun) -> None:
    """What a scheduler's time limit does: SIGKILL to every process of the loader's group."""
    os.killpg(os.getpgid(proc.pid), signal.SIGKILL)
    proc.wait(timeout=60)
    deadline = time.monotonic() + 10  # the workers, reparented, may take a moment to be reaped
    while time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.skipif(not SHM_DIR.is_dir(), reason="no /dev/shm here")
def test_a_loader_removes_the_segments_of_a_killed_process_group(tmp_path, kleb_1024, zygote):
    script = tmp_path / "loader.py"
    script.write_text(LOADER.format(root=str(kleb_1024)))
    killed, stale = start_loader(zygote, script, "stay")
    live, kept = start_loader(zygote, script, "stay")
    held: list[int] = []
    try:
        assert len(stale) == 2 and all(owner(n) == (pid_namespace(), killed.pid) for n in stale), stale
        assert all((SHM_DIR / n).exists() for n in stale + kept)
        # held open here, so no other loader on this machine (the other test worker's, say) removes
        # them once their owner is gone: only the killed group itself could have unlinked them now
        held = [os.open(SHM_DIR / n, os.O_RDONLY) for n in stale]
        kill_group(killed)
        assert all((SHM_DIR / n).exists() for n in stale), "the killed group's segments were not left"
        for fd in held:
            os.close(fd)
        held = []

        after, fresh = start_loader(zygote, script, "exit")  # the next loader: starts, reads, exits normally
        assert after.wait(timeout=120) == 0
        assert not any((SHM_DIR / n).exists() for n in stale), "stale segments were not removed"
        assert all((SHM_DIR / n).exists() for n in kept), "a live loader's segments were removed"
        # a normal exit unlinks its own; a forked run ends in os._exit, so here Python's resource
        # tracker does it once it sees the process gone, a moment later on a busy machine
        deadline = time.monotonic() + 30
        while any((SHM_DIR / n).exists() for n in fresh) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any((SHM_DIR / n).exists() for n in fresh)
    finally:
        for fd in held:
            os.close(fd)
        for proc in (killed, live):
            if proc.poll() is None:
                kill_group(proc)
        remove_stale_segments()  # what the live loader, now killed too, left
    assert not any((SHM_DIR / n).exists() for n in kept)


def test_stale_segments_are_removed_before_a_new_one_is_made(tmp_path, monkeypatch):
    stale = tmp_path / f"bwds_{pid_namespace()}_{dead_pid()}_0123abcd"
    stale.write_bytes(b"x")
    monkeypatch.setattr(shm_segments, "SHM_DIR", tmp_path)
    transfer = BatchTransfer(workers=1, slots=1, slot_bytes=64)
    transfer.close()
    assert not stale.exists()


#: A loader whose workers run ahead with large messages (many batches of many keys each), then a
#: main process that stops reading: the workers' next messages fill the pipe and block their writer.
FILLING = """
import sys, time
from bionemo_wds.lightning.datamodule import GenomicWebDataModule

dm = GenomicWebDataModule({root!r}, micro_batch_size=32, num_workers=2, transfer_timeout=60, transfer_bytes=2 << 20)
dm.setup("fit")
names = [loaders[0].transfer.segment.name.lstrip("/") for loaders in dm.split_loaders.values()]
batches = iter(dm.train_dataloader())
for _ in range(12):
    first = next(batches)
print(" ".join(names), 4, flush=True)
time.sleep(600)
"""


def children(pid: int) -> list[int]:
    """The pids of `pid`'s child processes (Linux: /proc/<pid>/task/*/children)."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting for a reaper that never comes in a container counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads child pids from /proc (Linux)")
def test_loader_workers_leave_within_seconds_of_a_kill_9_of_their_main_process(tmp_path, kleb_1024, zygote):
    """The main process stops taking batches after its first (the workers fill their rings and
    block on a slot or a pipe), then gets SIGKILL alone, as a crashed or killed `fit` does."""
    script = tmp_path / "loader.py"
    script.write_text(FILLING.format(root=str(kleb_1024)))
    proc, segments = start_loader(zygote, script, "stay")
    workers: list[int] = []
    try:
        # its children: the two loader workers and Python's resource tracker
        workers = [p for p in children(proc.pid) if "resource_tracker" not in Path(f"/proc/{p}/cmdline").read_text()]
        assert len(workers) == 2, [Path(f"/proc/{p}/cmdline").read_text() for p in children(proc.pid)]
        time.sleep(2)  # the workers run ahead until every slot is full, then wait
        assert all(alive(pid) for pid in workers)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 10
        while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in workers if alive(pid)], "loader workers outlived their main process by 10 s"
    finally:
        if proc.poll() is None:
            kill_group(proc)
        for pid in workers:  # what a failure left
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
    remove_stale_segments()
    assert not any((SHM_DIR / n).exists() for n in segments)


HOLDER = """
import mmap, os, sys, time
with open(sys.argv[1], "r+b") as fh:
    view = mmap.mmap(fh.fileno(), 0)
print("mapped", flush=True)
time.sleep(600)
"""


@pytest.mark.skipif(not Path("/proc/self/maps").is_file(), reason="reads mappings from /proc (Linux)")
def test_a_segment_of_a_gone_owner_stays_while_a_live_process_maps_it(tmp_path):
    """The owner (named in the segment) is gone, but a worker it started still writes into the segment."""
    segment = tmp_path / f"bwds_{pid_namespace()}_{dead_pid()}_0123abcd"
    segment.write_bytes(bytes(4096))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(segment)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "mapped"
        assert shm_segments.in_use([str(segment), str(tmp_path / "other")]) == {str(segment)}
        assert remove_stale_segments(tmp_path) == [] and segment.exists()
    finally:
        holder.kill()
        holder.wait()
        if holder.stdout is not None:
            holder.stdout.close()
    assert remove_stale_segments(tmp_path) == [segment.name] and not segment.exists()
