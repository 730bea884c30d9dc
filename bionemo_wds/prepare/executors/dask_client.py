"""A Dask client for `prepare`'s tasks: a scheduler given by address or scheduler file, or a
`LocalCluster` on this machine; one client per run (`client_session`), and a lost cluster or a task
that keeps taking workers down as one line (`result_of`).

Used by the shard writers (`executors.dask`) and by the passes over the inputs (`executors.tasks`);
`distributed` is imported only when a client is opened (it is the optional ``[dask]`` extra).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from concurrent.futures import CancelledError
from typing import Any

from bionemo_wds.errors import BadInputError

#: Seconds to wait for a scheduler given with ``--scheduler`` to answer.
CONNECT_TIMEOUT = 30


def distributed_module() -> Any:
    """The `distributed` package, or a `BadInputError` saying how to install it."""
    try:
        import distributed
    except ImportError as exc:
        raise BadInputError(
            "--executor dask needs dask.distributed, which is not installed: pip install 'bionemo-wds[dask]'"
        ) from exc
    return distributed


#: Dask settings of the clusters we start (`local_cluster`): without a dashboard nobody reads the
#: workers' statistical profiles (a sample of every thread's stack each 10 ms) or the system
#: monitor's series, and the event loops' 20 ms watchdog tick only times warnings. With these, a
#: LocalCluster of 2 workers waiting for tasks took 1.0 s of CPU in 20 s on our 2-core machines
#: against 4.0 s with Dask's defaults (2026-11-28); the memory monitor and work stealing keep theirs.
LOCAL_CLUSTER_CONFIG = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "2s",
}


def local_cluster(workers: int, threads: int = 1) -> Any:
    """A `distributed.LocalCluster` of `workers` worker processes with `threads` threads each, on
    127.0.0.1 only, without the dashboard (what ``--executor dask`` without ``--scheduler`` starts),
    with `LOCAL_CLUSTER_CONFIG` (the scheduler reads it as it starts, and each worker process gets
    it from its nanny) and `QuietHeartbeatLoss` in each worker."""
    distributed = distributed_module()
    import dask

    from bionemo_wds.prepare.executors.dask_worker_log import QuietHeartbeatLoss

    with dask.config.set(LOCAL_CLUSTER_CONFIG):
        return distributed.LocalCluster(
            n_workers=workers,
            threads_per_worker=threads,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            # the scheduler's HTTP server (health and metrics routes) still starts without a dashboard,
            # by default on port 8787: on any free port instead, so a second cluster on the machine
            # (another run's, a notebook's) does not add Dask's "Port 8787 is already in use" lines
            scheduler_kwargs={"dashboard": False, "dashboard_address": "127.0.0.1:0"},
            # its processes log errors only: its own shutdown's notes (tasks cancelled when a run stops
            # on a full disk) would precede the one line that says what happened
            silence_logs=logging.ERROR,
            plugins=(QuietHeartbeatLoss(),),
        )


#: The clients a `prepare` run keeps open until it ends (`client_session`), by (scheduler, workers).
SESSIONS: list[tuple[contextlib.ExitStack, dict[tuple[str | None, int], Any]]] = []


@contextlib.contextmanager
def client_session() -> Iterator[None]:
    """Keep each client `dask_client` opens inside this block open until the block ends, so the
    passes of one run (index, check, sketch, write) share one cluster: a LocalCluster starts once."""
    with contextlib.ExitStack() as stack:
        SESSIONS.append((stack, {}))
        try:
            yield
        finally:
            SESSIONS.pop()


@contextlib.contextmanager
def dask_client(scheduler: str | None, workers: int) -> Iterator[Any]:
    """A client of the scheduler at `scheduler` (``tcp://host:8786``, or a scheduler file written by
    ``dask scheduler --scheduler-file``), or of a `LocalCluster` of `workers` single-threaded
    worker processes on 127.0.0.1 when `scheduler` is None; closed (and the local cluster shut
    down) on exit, or at the end of the `client_session` it was opened in."""
    if SESSIONS:
        stack, clients = SESSIONS[-1]
        key = (scheduler, workers)
        if key not in clients:
            clients[key] = _open_client(stack, scheduler, workers)
        yield clients[key]
        return
    with contextlib.ExitStack() as stack:
        yield _open_client(stack, scheduler, workers)


def _open_client(stack: contextlib.ExitStack, scheduler: str | None, workers: int) -> Any:
    """A client as `dask_client` describes it, closed by `stack`."""
    distributed = distributed_module()
    if scheduler is None:
        cluster = stack.enter_context(local_cluster(workers))
        return stack.enter_context(distributed.Client(cluster))
    kind = "scheduler_file" if scheduler.endswith(".json") else "address"
    try:
        return stack.enter_context(distributed.Client(**{kind: scheduler}, timeout=CONNECT_TIMEOUT))
    except (OSError, ValueError) as exc:
        raise BadInputError(f"--scheduler {scheduler}: cannot reach the Dask scheduler ({exc})") from exc


def result_of(future: Any, task: str, scheduler: str | None, lost: str) -> Any:
    """``future.result()``, where a task that kept taking workers down, or a lost cluster (`lost`
    says what was under way and what to do), is one line."""
    distributed = distributed_module()
    try:
        return future.result()
    except distributed.KilledWorker as exc:
        raise RuntimeError(
            f"{task} took down Dask workers too often (distributed.scheduler.allowed-failures): {exc}"
        ) from exc
    except (CancelledError, distributed.comm.CommClosedError) as exc:
        where = scheduler or "the LocalCluster"
        raise RuntimeError(f"lost the Dask cluster ({where}) {lost} ({type(exc).__name__}: {exc})") from exc
