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

The cluster, its client and the one-line failures are `executors.dask_client`'s (the passes over
the inputs, `executors.tasks`, use them too).

Every worker must see the inputs (and, for a local ``--out``, the output directory) at the same
paths as the process that runs `prepare`: a shared filesystem, or an object store for ``--out``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

from tqdm import tqdm

from bionemo_wds.errors import OutputWriteError
from bionemo_wds.format import shard_name
from bionemo_wds.prepare.executors.dask_client import dask_client, distributed_module, result_of
from bionemo_wds.prepare.writers import ShardResult, WriterSetup, write_shard_task

if TYPE_CHECKING:
    from bionemo_wds.prepare.options import PrepareOptions


def write_shard_or_refusal(setup: WriterSetup, split: str, shard: int) -> ShardResult | OutputWriteError:
    """`write_shard_task`, whose `OutputWriteError` (a full disk, a read-only output) is returned
    rather than raised: retrying it would fail the same way, and a raised error is logged by every
    worker it fails on, where the client reports it once as one line."""
    try:
        return write_shard_task(setup, split, shard)
    except OutputWriteError as exc:
        return exc


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
