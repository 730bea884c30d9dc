"""Where `prepare` runs its shard tasks: in a local process pool or on a Dask cluster.

An executor is a module of this package with a `run` function of the `Executor` shape: given the
writers' setup (`writers.WriterSetup`, the plan included), the tasks still to do (split, shard
number) and the run's options, it writes every task's shard through `writers.write_shard_task` and
yields each `writers.ShardResult` as its shard is complete. `prepare` writes the manifest from those
results, so the output is byte for byte the same whichever executor ran the tasks.

`EXECUTORS` maps the names ``--executor`` takes (`options.EXECUTORS`) to their modules; a module is
imported only when its executor is used (``dask`` needs the optional ``[dask]`` extra).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from bionemo_wds.prepare.options import EXECUTORS as EXECUTOR_NAMES
from bionemo_wds.prepare.options import PrepareOptions

if TYPE_CHECKING:
    from bionemo_wds.prepare.writers import ShardResult, WriterSetup

#: ``--executor`` name -> the module whose `run` is that executor (a module of this package per name).
EXECUTORS = {name: f"{__name__}.{name}" for name in EXECUTOR_NAMES}


class Executor(Protocol):
    """What every executor's `run` is."""

    def __call__(
        self, setup: WriterSetup, tasks: list[tuple[str, int]], opts: PrepareOptions
    ) -> Iterator[ShardResult]: ...


def executor(name: str) -> Executor:
    """The `run` function of the executor called `name` (one of `EXECUTORS`)."""
    if name not in EXECUTORS:
        raise KeyError(f"unknown executor {name!r}; one of {', '.join(EXECUTORS)}")
    run: Executor = importlib.import_module(EXECUTORS[name]).run
    return run
