"""What the workers of the Dask clusters we start (`dask_client.local_cluster`) leave out of their
log. Its own module because it imports `distributed` (the optional ``[dask]`` extra) as it loads:
a worker plugin must derive from Dask's `WorkerPlugin`, and a worker unpickles it by this name.
"""

from __future__ import annotations

import logging

from distributed import Worker, WorkerPlugin

#: What a worker logs when a heartbeat finds the scheduler gone. A LocalCluster shutting down after a
#: failed run (a full disk) may stop its scheduler while a worker's heartbeat is under way; that line
#: then came before the run's one error line (seen once in CI, 2026-12-07). A scheduler lost while a
#: run needs it still reaches the user, as the one line `dask_client.result_of` writes.
HEARTBEAT_LOSS = "Failed to communicate with scheduler during heartbeat"


def not_a_heartbeat_loss(record: logging.LogRecord) -> bool:
    """A `logging` filter: False for the record `HEARTBEAT_LOSS` names, True for every other."""
    return not record.getMessage().startswith(HEARTBEAT_LOSS)


class QuietHeartbeatLoss(WorkerPlugin):
    """Adds `not_a_heartbeat_loss` to the ``distributed.worker`` log of each worker process as the
    worker starts (Dask calls `setup` there); every other record of that log is kept."""

    name = "bionemo-wds-quiet-heartbeat-loss"

    def setup(self, worker: Worker) -> None:
        """Filter the worker's log, once per process."""
        log = logging.getLogger("distributed.worker")
        if not_a_heartbeat_loss not in log.filters:
            log.addFilter(not_a_heartbeat_loss)
