"""Peak memory: of a process tree, sampled from outside (PSS summed over the process and its children), and
of this process itself (`peak_rss_mb`).

PSS (proportional set size) splits shared pages between the processes that map them, so a loader
whose workers share the parent's pages is not counted twice, as RSS would.
"""

from __future__ import annotations

import subprocess
import threading
import time
from pathlib import Path


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def tree_pss_bytes(pid: int) -> int:
    """PSS of `pid` and all its descendants now (0 for processes that are gone)."""
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        try:
            for line in Path(f"/proc/{p}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
        except OSError:
            continue
        todo += _children(p)
    return total


class PeakPss:
    """Run a command, sampling its tree's PSS every `interval` seconds; keeps the peak.

    Reading ``smaps_rollup`` walks the process's whole memory map (tens of ms for a process that
    has imported torch), so a sampler at 10 ms keeps a core busy and slows the process it watches.
    Given a `ready` file, `run` samples the command's start-up (its imports, before it creates
    that file) only every `startup_interval` seconds, and everything after every `interval`."""

    def __init__(self, interval: float = 0.01, startup_interval: float = 0.25):
        self.interval = interval
        self.startup_interval = startup_interval
        self.peak = 0

    def run(self, cmd: list[str], ready: Path | None = None, **kwargs) -> subprocess.CompletedProcess:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)
        done = threading.Event()

        def sample() -> None:
            started, due = ready is None, 0.0
            while not done.is_set():
                if not started:
                    started = ready is not None and ready.exists()
                if started or time.monotonic() >= due:
                    self.peak = max(self.peak, tree_pss_bytes(proc.pid))
                    due = time.monotonic() + self.startup_interval
                time.sleep(self.interval)

        watcher = threading.Thread(target=sample, daemon=True)
        watcher.start()
        out, err = proc.communicate()
        done.set()
        watcher.join()
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def peak_rss_mb() -> float:
    """This process's peak resident memory in MB: ``VmHWM`` of ``/proc/self/status`` where there is one.

    Not ``getrusage``'s ``ru_maxrss``: Linux carries that across ``execve``, so a tool started by a
    large process (a long pytest session, through fork and exec) reported its parent's size, not
    its own. ``ru_maxrss`` (KiB on Linux) only where ``/proc`` is missing."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
