"""Shard tasks on a Dask cluster: ``prepare --executor dask [--scheduler ADDRESS]``.

The plan is computed once by `prepare` (in the calling process) and is small (`shard_plan.ShardPlan`:
per-row window counts and a few integers per split); it is sent to every worker once
(``Client.scatter(..., broadcast=True)``), then one task per shard runs the same
`writers.write_shard_task` as the local pool (`executors.local`) and returns its `writers.ShardResult`. `prepare`
writes the manifest last, from those results, so the output is byte for byte the local executor's,
whatever the cluster's size or scheduling.

Failures: a task that raises is retried `retries` times (``Client.submit(retries=...)``), except
when the OS refuses to write the output (a full disk: `errors.OutputWriteError`, which ends the
run at once with its one line, as with the local executor); a worker
that dies (killed, out of memory, its node lost) has its tasks moved to other workers by the
scheduler (its ``distributed.scheduler.allowed-failures`` setting, 3 by default, bounds how often
one task may take a worker down). A shard is written under a hidden temporary name and renamed
when complete (an object-store object appears when its upload completes), so a dead task leaves no
visible half shard; rerunning `prepare` after a lost cluster writes only the missing shards.

Every worker must see the inputs (and, for a local ``--out``, the output directory) at the same
paths as the process that runs `prepare`: a shared filesystem, or an object store for ``--out``.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Iterator
from concurrent.futures import CancelledError
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from bionemo_wds.errors import BadInputError, OutputWriteError
from bionemo_wds.format import shard_name
from bionemo_wds.prepare.writers import ShardResult, WriterSetup, write_shard_task

if TYPE_CHECKING:
    from bionemo_wds.prepare.options import PrepareOptions

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


def local_cluster(workers: int, threads: int = 1) -> Any:
    """A `distributed.LocalCluster` of `workers` worker processes with `threads` threads each, on
    127.0.0.1 only, without the dashboard (what ``--executor dask`` without ``--scheduler`` starts)."""
    return distributed_module().LocalCluster(
        n_workers=workers,
        threads_per_worker=threads,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        # its processes log errors only: its own shutdown's notes (tasks cancelled when a run stops on
        # a full disk) would precede the one line that says what happened
        silence_logs=logging.ERROR,
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


def write_shard_or_refusal(setup: WriterSetup, split: str, shard: int) -> ShardResult | OutputWriteError:
    """`write_shard_task`, whose `OutputWriteError` (a full disk, a read-only output) is returned
    rather than raised: retrying it would fail the same way, and a raised error is logged by every
    worker it fails on, where the client reports it once as one line."""
    try:
        return write_shard_task(setup, split, shard)
    except OutputWriteError as exc:
        return exc


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


def run_on_dask(
    setup: WriterSetup,
    tasks: list[tuple[str, int]],
    scheduler: str | None,
    workers: int,
    retries: int,
    progress: bool,
) -> Iterator[ShardResult]:
    """Write every task's shard on a Dask cluster (`dask_client`); yields each result as its shard
    is complete (in completion order). A shard that fails for good raises, naming it."""
    distributed = distributed_module()
    run_id = hashlib.sha256(setup.root.encode()).hexdigest()[:12]
    with dask_client(scheduler, workers) as client:
        shared = client.scatter(setup, broadcast=True, hash=False)
        futures = {
            client.submit(
                write_shard_or_refusal,
                shared,
                split,
                shard,
                key=f"bionemo-wds-write-{run_id}-{split}-{shard}",
                retries=retries,
                pure=False,
            ): (split, shard)
            for split, shard in tasks
        }
        bar = tqdm(total=len(tasks), desc="write (dask)", unit="shard", disable=not progress)
        done = 0
        try:
            for future in distributed.as_completed(futures):
                split, shard = futures[future]
                where = f"{split}/{shard_name(shard, setup.prefix)}"
                result = result_of(
                    future,
                    f"shard {where}",
                    scheduler,
                    f"while writing {where}: {done} of {len(tasks)} shards are complete; "
                    "run prepare again to write only the rest",
                )
                if isinstance(result, OutputWriteError):
                    raise result
                yield result
                done += 1
                bar.update()
        finally:
            bar.close()
            for future in futures:
                future.cancel()


def run(setup: WriterSetup, tasks: list[tuple[str, int]], opts: PrepareOptions) -> Iterator[ShardResult]:
    """The Dask executor (`executors.Executor`): `run_on_dask` with the run's ``--scheduler``,
    ``--workers`` (all CPUs when 0, for a LocalCluster) and ``--retries``."""
    workers = opts.workers or os.cpu_count() or 1
    return run_on_dask(setup, tasks, opts.scheduler, workers, opts.retries, opts.progress)
