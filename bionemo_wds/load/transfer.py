"""Compact batches from loader workers to the main process: the one way they cross, in shared memory.

Sending a 64 kB compact batch through DataLoader's queue costs about as much as building it
(pickle, pipe, unpickle: two copies each side, plus the queue round trip), which made loaders with
workers slower than without. Here each worker writes a group of batches into a slot of its own
ring in one `multiprocessing.shared_memory` segment and sends only the slot number and the small
columns (keys, seq ids); the main process copies the arrays out (one memcpy) and frees the slot.

- Works with ``fork`` and ``spawn``: the segment is attached by name and the free-slot semaphores
  travel with the dataset when a worker is spawned.
- A worker never waits forever: it takes a free slot with a timeout (DataLoader asks a worker for
  at most ``prefetch_factor`` batches ahead, so a slot is normally free at once) and raises an
  error naming itself when the main process has stopped taking batches.
- Passes do not interfere: each pass (`new_generation`, called before its workers start) gets new
  semaphores and the other half of the segment, so a worker of an abandoned pass that is still
  finishing a write cannot touch the slots of the next one; its messages are dropped unread.
- A loader killed with its whole process group leaves its segment behind; segments are named after
  the process that made them (`shm_segments`), and the next loader to start removes those whose
  maker is gone.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import weakref
from collections.abc import Iterable, Iterator
from multiprocessing import shared_memory
from multiprocessing.context import BaseContext
from typing import Any, TypeVar

import numpy as np
from webdataset.filters import pipelinefilter

from bionemo_wds.load.shm_segments import new_segment
from bionemo_wds.load.world import Worker, in_loader_worker

T = TypeVar("T")

#: Seconds a worker waits for a free slot before it reports the main process as stuck.
DEFAULT_TIMEOUT = 600.0


def chunks(src: Iterable[T], n: int, first: int | None = None) -> Iterator[list[T]]:
    """Lists of `n` consecutive items (the last may be shorter); with `first`, the lists before
    reach `n` by doubling from `first` items (a stream's first items go out without waiting for `n`)."""
    size, buf = min(first or n, n), []
    for item in src:
        buf.append(item)
        if len(buf) >= size:
            yield buf
            buf, size = [], min(2 * size, n)
    if buf:
        yield buf


def _release_segment(segment: shared_memory.SharedMemory) -> None:
    try:
        segment.close()
    except BufferError:  # a view is still alive somewhere; the name goes anyway, the memory with the view
        pass
    try:
        segment.unlink()
    except FileNotFoundError:
        pass


class BatchTransfer:
    """`workers` rings of `slots` slots of `slot_bytes` bytes, twice (one half per pass parity)."""

    def __init__(
        self,
        workers: int,
        slots: int,
        slot_bytes: int,
        context: BaseContext | None = None,
        timeout: float = DEFAULT_TIMEOUT,
    ):
        if workers < 1 or slots < 1 or slot_bytes < 1:
            raise ValueError("a batch transfer needs at least one worker, slot and byte")
        self.workers, self.slots, self.slot_bytes, self.timeout = workers, slots, slot_bytes, timeout
        self.context = context or mp.get_context()
        self.segment = new_segment(2 * workers * slots * slot_bytes)  # named ours; stale ones removed first
        self._finalizer = weakref.finalize(self, _release_segment, self.segment)
        self.generation = 0
        self.free: list[Any] = []
        self.new_generation()

    def __getstate__(self) -> dict[str, Any]:
        # pickled only when a worker is spawned: the semaphores may travel then, and only then
        return {
            "workers": self.workers,
            "slots": self.slots,
            "slot_bytes": self.slot_bytes,
            "timeout": self.timeout,
            "name": self.segment.name,
            "generation": self.generation,
            "free": self.free,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({k: v for k, v in state.items() if k != "name"})
        self.segment = shared_memory.SharedMemory(name=state["name"])  # attach; the main process owns it

    # -- main process ----------------------------------------------------------------------------

    def new_generation(self) -> None:
        """Start a pass: fresh free-slot counts, and the other half of the segment."""
        self.generation += 1
        self.free = [self.context.Semaphore(self.slots) for _ in range(self.workers)]

    def close(self) -> None:
        """Free the shared memory (also done when the object is garbage-collected)."""
        self._finalizer()

    def slot(self, generation: int, worker: int, index: int) -> memoryview:
        """The bytes of one slot (a view into the segment)."""
        start = (((generation % 2) * self.workers + worker) * self.slots + index) * self.slot_bytes
        buf = self.segment.buf
        assert buf is not None
        return buf[start : start + self.slot_bytes]

    def to_main(self, per_message: int) -> Any:
        """The worker-side stage (the last of the dataset's pipeline): groups of `per_message` batches per message."""
        return to_main(self, per_message)

    def from_workers(self) -> Any:
        """The main-side stage (the first of the loader's pipeline)."""
        return from_workers(self)


def _to_main(src: Iterable[dict[str, Any]], transfer: BatchTransfer, per_message: int) -> Iterator[tuple]:
    """(worker side) Groups of up to `per_message` compact batches -> slots; yields the small messages.
    A pass's first groups are smaller (1, 2, 4, ... batches: `stages.chunks` from 1), so its first batch
    goes out as soon as it is made instead of after a whole group."""
    if not in_loader_worker():
        raise RuntimeError("the batch transfer's sending stage runs in DataLoader worker processes only")
    worker, generation = Worker.detect().id, transfer.generation
    free = transfer.free[worker]
    for produced, group in enumerate(chunks(src, per_message, first=1)):
        if not free.acquire(timeout=transfer.timeout):
            raise RuntimeError(
                f"loader worker {worker} waited {transfer.timeout:g} s for the main process to take one of its "
                f"{transfer.slots} batch slots (pass {generation}); the main process has stopped reading batches"
            )
        index = produced % transfer.slots
        view = transfer.slot(generation, worker, index)
        slot = np.frombuffer(view, dtype=np.uint8)
        offset, metas = 0, []
        for batch in group:
            meta = {k: v for k, v in batch.items() if not isinstance(v, np.ndarray)}
            layout = {}
            for key in [k for k, v in batch.items() if isinstance(v, np.ndarray)]:  # every array field
                arr = np.ascontiguousarray(batch[key])
                if offset + arr.nbytes > transfer.slot_bytes:  # does not fit: it travels in the message
                    meta[key] = arr
                    continue
                slot[offset : offset + arr.nbytes] = arr.reshape(-1).view(np.uint8)
                layout[key] = (arr.dtype.str, arr.shape, offset)
                offset += -(-arr.nbytes // 8) * 8
            meta["__layout__"] = layout
            metas.append(meta)
        del slot
        view.release()
        yield ("batches", generation, worker, index, metas)


def _from_workers(src: Iterable[tuple], transfer: BatchTransfer) -> Iterator[dict[str, Any]]:
    """(main side) Messages -> compact batches, arrays copied out of the slot, which is then freed."""
    for _, generation, worker, index, metas in src:
        if generation != transfer.generation:
            continue  # a message of an abandoned pass
        view = transfer.slot(generation, worker, index)
        batches = []
        for meta in metas:
            batch = {k: v for k, v in meta.items() if k != "__layout__"}
            for key, (dtype, shape, offset) in meta["__layout__"].items():
                count = math.prod(shape)  # numpy.prod costs microseconds per call, for a tuple of one or two ints
                batch[key] = np.frombuffer(view, dtype=dtype, count=count, offset=offset).reshape(shape).copy()
            batches.append(batch)
        view.release()
        transfer.free[worker].release()
        yield from batches


to_main = pipelinefilter(_to_main)
from_workers = pipelinefilter(_from_workers)
