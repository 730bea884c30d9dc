"""Independent tasks of `prepare`'s passes over the inputs (indexing files, checking bases,
sketching) run where the shard writers run: here, in a local process pool, or on the Dask cluster.

`run_tasks` calls ``fn(context, task)`` for every task and yields the results **in task order**,
whatever finishes first, so a pass that merges them in that order produces the same catalog (and
so the same split, plan and shard bytes) for any number of workers and either executor. The
`context` (a source, a table) is sent to each process once: a pool worker's initializer, or
``Client.scatter(broadcast=True)`` to every Dask worker.

Failures: a `BadInputError` raised by a task (a bad base, a damaged input, a full disk) is the
input's verdict, the same on every attempt, so it is returned by the task rather than raised (no
retry, no traceback logged by each worker) and raised here, once. Anything else raised on Dask is
retried ``retries`` times; a lost worker's tasks are moved by the scheduler; a task that keeps
taking workers down, or a lost cluster, ends the pass with one line saying what to do. A pool
worker dies with the process that started it (`parent.die_with_parent`).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from tqdm import tqdm

from bionemo_wds.errors import BadInputError
from bionemo_wds.prepare.executors.dask_client import dask_client, result_of
from bionemo_wds.prepare.executors.parent import die_with_parent

if TYPE_CHECKING:
    from bionemo_wds.prepare.options import PrepareOptions

C = TypeVar("C")
T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class TaskPlace:
    """Where a pass's tasks run: ``executor`` local (``workers`` processes; 1: this process) or dask
    (``scheduler``, or a LocalCluster of ``workers``), ``retries`` of a task that raised on Dask."""

    executor: str = "local"
    workers: int = 1
    scheduler: str | None = None
    retries: int = 2
    progress: bool = False

    @classmethod
    def of(cls, opts: PrepareOptions) -> TaskPlace:
        """The place of a run's options: ``--executor``, ``--workers`` (all CPUs when 0),
        ``--scheduler``, ``--retries``, ``--progress``."""
        workers = opts.workers or os.cpu_count() or 1
        return cls(opts.executor, workers, opts.scheduler, opts.retries, opts.progress)


@dataclass(frozen=True)
class Refused:
    """A task's `BadInputError`, returned instead of raised (see the module docstring)."""

    error: BadInputError


@dataclass(frozen=True)
class Call(Generic[C, T, R]):
    """``fn(context, task)`` with a `BadInputError` returned as `Refused`: picklable (`fn` is a
    module-level function), so a pool or a Dask worker runs it."""

    fn: Callable[[C, T], R]

    def __call__(self, context: C, task: T) -> R | Refused:
        try:
            return self.fn(context, task)
        except BadInputError as exc:
            return Refused(exc)


#: This pool worker's call and context (set once per process by `start_pool_worker`).
POOL_WORK: list[Any] = []


def start_pool_worker(call: Call, context: Any, parent: int, start_method: str) -> None:
    """A pool worker's initializer: end with `parent`, keep the call and its context."""
    die_with_parent(parent, start_method)
    POOL_WORK[:] = [call, context]


def pool_call(task: Any) -> Any:
    """One task in a pool worker, with the context its initializer was given."""
    call, context = POOL_WORK
    return call(context, task)


def run_tasks(
    fn: Callable[[C, T], R],
    context: C,
    tasks: Sequence[T],
    place: TaskPlace,
    what: str,
    sizes: Sequence[int] | None = None,
    unit: str = "base",
) -> Iterator[R]:
    """``fn(context, task)`` for each of `tasks`, yielded in task order, run at `place`; `what`
    names the pass (progress bar, task keys, errors), `sizes` each task's share of the bar (in `unit`)."""
    call = Call(fn)
    sizes = list(sizes) if sizes is not None else [1] * len(tasks)
    bar = tqdm(total=sum(sizes), desc=what, unit=unit, unit_scale=unit == "base", disable=not place.progress)
    try:
        for result, size in zip(_results(call, context, tasks, place, what), sizes):
            if isinstance(result, Refused):
                raise result.error
            yield result
            bar.update(size)
    finally:
        bar.close()


def _results(call: Call, context: Any, tasks: Sequence[Any], place: TaskPlace, what: str) -> Iterator[Any]:
    if place.executor == "dask":
        yield from _on_dask(call, context, tasks, place, what)
    elif place.workers <= 1 or len(tasks) <= 1:
        for task in tasks:
            yield call(context, task)
    else:
        start = mp.get_context()
        initargs = (call, context, os.getpid(), start.get_start_method())
        workers = min(place.workers, len(tasks))
        with ProcessPoolExecutor(workers, mp_context=start, initializer=start_pool_worker, initargs=initargs) as pool:
            yield from pool.map(pool_call, tasks, chunksize=1)


def _on_dask(call: Call, context: Any, tasks: Sequence[Any], place: TaskPlace, what: str) -> Iterator[Any]:
    with dask_client(place.scheduler, place.workers) as client:
        shared = client.scatter(context, broadcast=True, hash=False)
        futures = client.map(call, [shared] * len(tasks), tasks, key=_keys(what, len(tasks)), retries=place.retries)
        try:
            for number, future in enumerate(futures):
                task = f"{what}: task {number} of {len(tasks)}"
                yield result_of(future, task, place.scheduler, f"during {task}: run prepare again")
        finally:
            for future in futures:
                future.cancel()


def _keys(what: str, n: int) -> list[str]:
    """Dask keys of a pass's tasks, unique per call (a second pass of the same name is new work)."""
    run = os.urandom(6).hex()
    name = what.replace(" ", "-")
    return [f"bionemo-wds-{name}-{run}-{i}" for i in range(n)]
