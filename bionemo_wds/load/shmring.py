"""Compact batches from loader workers to the main process through shared memory.

Measured on this 2-core machine: sending a 64 kB compact batch through DataLoader's queue costs
~150 us (pickle, pipe, unpickle: two copies each side, plus the queue round trip), as much as
building it; that is why loaders with workers were slower than without. Here each worker writes a
group of batches into a slot of its own ring in one anonymous shared mapping made before the
workers fork, and sends only the slot number and the small columns (keys, seq ids). The main
process copies the arrays out (one memcpy) and releases the slot.

Slots of generation ``g`` (one per loader pass) live in half ``g % 2`` of the mapping, so a worker
of an abandoned pass that is still finishing its last write cannot touch the slots of the next
pass (messages of older generations are dropped unread).
Needs the fork start method (the mapping is inherited); without it the data module falls back to
sending groups through the queue.
"""

from __future__ import annotations

import mmap
import multiprocessing as mp
import time
from typing import Any, Iterable, Iterator

import numpy as np
import torch
from webdataset.filters import pipelinefilter

from bionemo_wds.load.pipeline import _group

ARRAYS = ("bases", "lengths", "tags", "tag_lengths", "rc", "start")
_HEADER = 64  # generation counter, then per (half, worker) released counters


def fork_available() -> bool:
    """Whether loader workers will be forked (the only way they can share the mapping)."""
    return mp.get_start_method() == "fork"


class SharedRing:
    """`workers` rings of `slots` slots of `slot_bytes`, twice (two generations)."""

    def __init__(self, workers: int, slots: int, slot_bytes: int):
        self.workers, self.slots, self.slot_bytes = workers, slots, slot_bytes
        self._counters = _HEADER + 2 * workers * 8
        self._size = self._counters + 2 * workers * slots * slot_bytes
        self._mem = mmap.mmap(-1, self._size)  # MAP_SHARED | MAP_ANONYMOUS: shared with forked workers
        self._view = np.frombuffer(self._mem, dtype=np.uint8)
        self._gen = np.frombuffer(self._mem, dtype=np.int64, count=1)
        self._released = np.frombuffer(self._mem, dtype=np.int64, count=2 * workers, offset=_HEADER)

    def __getstate__(self):
        raise TypeError("SharedRing is shared by forking, not by pickling")

    # -- main process --------------------------------------------------------------------------

    def new_generation(self) -> None:
        """Called before a pass's workers start: fresh counters for the half this pass uses."""
        gen = int(self._gen[0]) + 1
        half = gen % 2
        self._released[half * self.workers : (half + 1) * self.workers] = 0
        self._gen[0] = gen

    @property
    def generation(self) -> int:
        return int(self._gen[0])

    def release(self, gen: int, worker: int) -> None:
        self._released[(gen % 2) * self.workers + worker] += 1

    # -- both ----------------------------------------------------------------------------------

    def slot(self, gen: int, worker: int, index: int) -> np.ndarray:
        start = self._counters + (((gen % 2) * self.workers + worker) * self.slots + index) * self.slot_bytes
        return self._view[start : start + self.slot_bytes]

    def released(self, gen: int, worker: int) -> int:
        return int(self._released[(gen % 2) * self.workers + worker])


def _to_ring(src: Iterable[dict[str, Any]], ring: SharedRing, per_message: int) -> Iterator[tuple]:
    """(worker side) Groups of compact batches -> ring slots; yields small messages."""
    info = torch.utils.data.get_worker_info()
    if info is None:  # not in a worker: nothing to share
        for batch in src:
            yield ("plain", batch)
        return
    worker, gen = info.id, ring.generation
    # counted from what is released now: webdataset's with_epoch may start a second DataLoader
    # pass (new workers) within one generation, after the main process consumed the first
    base = ring.released(gen, worker)
    produced = 0

    def send(group: list[dict[str, Any]]) -> tuple:
        nonlocal produced
        while produced - (ring.released(gen, worker) - base) >= ring.slots:
            if ring.generation != gen:
                return ("stale",)
            time.sleep(0.0002)  # the main process has every slot; it releases them in order
        index = produced % ring.slots
        slot = ring.slot(gen, worker, index)
        offset, metas = 0, []
        for batch in group:
            meta = {k: v for k, v in batch.items() if k not in ARRAYS}
            layout = {}
            for key in ARRAYS:
                arr = np.ascontiguousarray(batch[key])
                if offset + arr.nbytes > ring.slot_bytes:  # does not fit: send it inline
                    meta[key] = arr
                    continue
                slot[offset : offset + arr.nbytes] = arr.reshape(-1).view(np.uint8)
                layout[key] = (arr.dtype.str, arr.shape, offset)
                offset += -(-arr.nbytes // 8) * 8
            meta["__layout__"] = layout
            metas.append(meta)
        produced += 1
        return ("ring", gen, worker, index, metas)

    for group in _group(src, per_message):
        yield send(group)


def _from_ring(src: Iterable[tuple], ring: SharedRing) -> Iterator[dict[str, Any]]:
    """(main side) Messages -> compact batches (arrays copied out of the slot, which is released)."""
    for message in src:
        kind = message[0]
        if kind == "plain":
            yield message[1]
            continue
        if kind != "ring":
            continue
        _, gen, worker, index, metas = message
        if gen != ring.generation:
            continue  # a message of an abandoned pass
        slot = ring.slot(gen, worker, index)
        batches = []
        for meta in metas:
            batch = {k: v for k, v in meta.items() if k != "__layout__"}
            for key, (dtype, shape, offset) in meta["__layout__"].items():
                count = int(np.prod(shape))
                batch[key] = np.frombuffer(slot, dtype=dtype, count=count, offset=offset).reshape(shape).copy()
            batches.append(batch)
        ring.release(gen, worker)
        yield from batches


to_ring = pipelinefilter(_to_ring)
from_ring = pipelinefilter(_from_ring)
