"""How many windows of each train dataset a rank yielded, per epoch: counted on the main side as
batches go by (a blend's exact quotas, seen in the log and `GenomicDataset.source_counts`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

log = logging.getLogger("bionemo_wds.load.dataset")


def count_sources(
    src: Iterable[dict[str, Any]],
    names: Sequence[str],
    counts_by_epoch: dict[int, dict[str, int]],
    epoch: Callable[[], int],
    batches: Callable[[], int],
    rank: int,
) -> Iterator[dict[str, Any]]:
    """Yield `src`'s batches, keeping each dataset's windows of the pass in ``counts_by_epoch[epoch()]``
    as they go (a loop may stop at the epoch's length without exhausting the loader); logged when the
    pass's last planned batch (`batches()` of them) is out."""
    counts = np.zeros(len(names), dtype=np.int64)
    for n, batch in enumerate(src, 1):
        sources = np.asarray(batch["dataset"])
        counts += np.bincount(sources[sources >= 0], minlength=len(counts))
        counts_by_epoch[epoch()] = dict(zip(names, counts.tolist()))
        if n == batches():
            log.info("train epoch %d, rank %d, windows per dataset: %s", epoch(), rank, counts_by_epoch[epoch()])
        yield batch
