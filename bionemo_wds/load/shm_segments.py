"""Our shared-memory segments: named so that the process that made them can be found, and those
whose maker is gone removed when a loader starts.

A loader's transfer rings (`load.transfer`) are POSIX shared memory (`multiprocessing.shared_memory`),
files in ``/dev/shm`` that outlive their process unless someone unlinks them. A normal exit, an
exception, SIGTERM, or a ``kill -9`` of the main process alone are cleaned up (the segment's
finalizer, or Python's resource tracker, which sees the main process go). A ``kill -9`` of the whole
process group (a scheduler's time limit, the OOM killer) takes the resource tracker too, and the
segments stay until the node reboots: with Python's default names (``psm_<random>``) nothing tells
them from another program's.

So every segment of ours is named ``bwds_<pid namespace>_<pid>_<random>`` (`new_segment`): the
package, the pid namespace and pid of the process that created it (and owns it: it unlinks it).
`remove_stale_segments`, run each time a loader creates its rings, removes the segments named so
whose owner no longer exists in this pid namespace, as MosaicML streaming's
``clean_stale_shared_memory`` does for its own, and that no live process maps or holds open (a
loader worker of a killed main process may still be writing into it: `in_use`). It never touches
a segment whose owner is alive (or may be: a pid that is in use again, another user's process,
another pid namespace) nor one not named ours. Only where shared memory is a listable directory
(``/dev/shm`` on Linux) and ``/proc`` shows who maps what; elsewhere nothing is removed.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
from multiprocessing import shared_memory
from pathlib import Path

log = logging.getLogger(__name__)

#: Where POSIX shared memory lives as files (Linux).
SHM_DIR = Path("/dev/shm")
#: The start of every segment name of this package.
PREFIX = "bwds"
#: ``bwds_<pid namespace>_<pid>_<random>``.
NAME = re.compile(rf"^{PREFIX}_(?P<namespace>\d+)_(?P<pid>\d+)_[0-9a-f]{{8}}$")


def pid_namespace() -> int:
    """This process's pid namespace (the inode of ``/proc/self/ns/pid``; 0 where there is none): a
    pid means the same process only within one namespace (containers sharing ``/dev/shm`` may not
    share pids)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def segment_name() -> str:
    """A fresh name for a segment this process creates (and owns)."""
    return f"{PREFIX}_{pid_namespace()}_{os.getpid()}_{secrets.token_hex(4)}"


def owner(name: str) -> tuple[int, int] | None:
    """(pid namespace, pid) of the process that created segment `name`; None when it is not ours."""
    found = NAME.match(name)
    return None if found is None else (int(found["namespace"]), int(found["pid"]))


def process_exists(pid: int) -> bool:
    """Whether a process `pid` exists in this pid namespace (alive, or a zombie not yet reaped)."""
    if pid <= 0:
        return True  # not a pid this package writes: treat as alive, never remove
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale_segments(directory: Path | None = None) -> list[str]:
    """Remove the segments of ours in `directory` (`SHM_DIR` when None) whose owner is gone
    (`owner`, `process_exists`); returns their names. Segments of other namespaces or programs, of
    live owners, and files that cannot be removed (another user's) are left."""
    directory = SHM_DIR if directory is None else directory
    try:
        names = os.listdir(directory)
    except OSError:  # no such directory here (macOS, Windows), or not listable
        return []
    namespace = pid_namespace()
    candidates = []
    for name in names:
        who = owner(name)
        if who is not None and who[0] == namespace and not process_exists(who[1]):
            candidates.append(name)
    busy = in_use([str(directory / name) for name in candidates]) if candidates else set()
    removed = []
    for name in candidates:
        if str(directory / name) in busy:
            continue
        try:
            os.unlink(directory / name)
        except OSError:  # gone meanwhile (another loader cleaning), or not ours to remove
            continue
        removed.append(name)
    if removed:
        log.warning(
            "removed %d shared-memory segment(s) of loaders that were killed (%s)", len(removed), ", ".join(removed)
        )
    return removed


def in_use(paths: list[str], proc: Path = Path("/proc")) -> set[str]:
    """Those of `paths` that a live process maps or holds open (``/proc/<pid>/maps`` and ``fd``,
    the processes this user may read; Linux). Where there is no ``/proc``, every path counts as in
    use: nothing is removed that cannot be checked."""
    wanted = set(paths)
    try:
        pids = [entry for entry in os.listdir(proc) if entry.isdigit()]
    except OSError:
        return wanted
    found: set[str] = set()
    for pid in pids:
        try:
            with open(proc / pid / "maps") as maps:
                found.update(line.rstrip("\n").split(maxsplit=5)[-1] for line in maps if "/" in line)
            fds = proc / pid / "fd"
            for fd in os.listdir(fds):
                try:
                    found.add(os.readlink(fds / fd))
                except OSError:  # closed meanwhile
                    continue
        except OSError:  # gone meanwhile, or another user's process (it cannot open our 0600 segments)
            continue
        if wanted <= found:
            break
    return wanted & found


def new_segment(size: int) -> shared_memory.SharedMemory:
    """Create a segment of `size` bytes named `segment_name`, after removing the stale ones; it is
    registered with Python's resource tracker as any `SharedMemory(create=True)` is."""
    remove_stale_segments()
    while True:
        try:
            return shared_memory.SharedMemory(name=segment_name(), create=True, size=size)
        except FileExistsError:  # 32 random bits taken by a live segment of the same pid: draw again
            continue
