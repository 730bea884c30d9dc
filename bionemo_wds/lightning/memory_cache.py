"""A rank's batches of a small split kept in memory after they are first read (``cache_in_memory``).

Validation reads the same windows in the same order every epoch (`plan.eval_plan` depends on no
seed or epoch), so after one pass a rank can serve them from memory and read no shard bytes again,
as rank-cached HDF5 loaders do. `MemoryCachedLoader` wraps the split's loader: a pass yields the
batches held so far, then, when the pass goes on past them (the first pass, or one after a pass
that stopped early, as Lightning's sanity check does), asks the loader to start at the first
missing batch and keeps what it yields. Batches are held as the main process receives them
(compact uint8 tensors, about 1 byte per base), optionally in pinned or shared memory.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import torch

from bionemo_wds.errors import OptionError

#: Where cached batches live: ordinary memory, page-locked (fast host-to-GPU copies), or shared
#: memory (the tensors can be handed to other processes without copying).
CACHE_MEMORY = ("plain", "pinned", "shared")


def check_cache_memory(memory: str) -> None:
    """`memory` is one of `CACHE_MEMORY`, and page-locked memory has an accelerator to serve."""
    if memory not in CACHE_MEMORY:
        raise OptionError(f"cache_memory must be one of {', '.join(CACHE_MEMORY)}, got {memory!r}")
    if memory == "pinned" and not accelerator_available():
        raise OptionError(
            'cache_memory="pinned" needs an accelerator (page-locked memory speeds up copies to it) and none '
            'is available; use "plain" or "shared"'
        )


def accelerator_available() -> bool:
    """Whether torch sees an accelerator (CUDA, ROCm, MPS, XPU...)."""
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        return bool(accelerator.is_available())
    return torch.cuda.is_available()


def hold(batch: dict[str, Any], memory: str) -> dict[str, Any]:
    """`batch` with its tensors in the `memory` kind (`CACHE_MEMORY`)."""
    if memory == "plain":
        return batch
    out = {}
    for key, value in batch.items():
        if isinstance(value, torch.Tensor):
            value = value.pin_memory() if memory == "pinned" else value.share_memory_()
        out[key] = value
    return out


class MemoryCachedLoader:
    """A split's loader whose batches are kept after they are first read.

    Args:
        make_loader: builds the split's loader (called once, when a pass first needs to read).
        start_at: makes the loader's next pass start at batch k of the plan (the batches before it
            are in memory).
        length: batches in a full pass (what ``len()`` reports).
        memory: one of `CACHE_MEMORY`.
    """

    def __init__(
        self, make_loader: Callable[[], Any], start_at: Callable[[int], None], length: int, memory: str = "plain"
    ):
        check_cache_memory(memory)
        self.make_loader, self.start_at, self.length, self.memory = make_loader, start_at, length, memory
        self.loader: Any = None
        self.batches: list[dict[str, Any]] = []
        self.passes_read = 0  # passes that had to read shards (the first, or after an early stop)

    def __len__(self) -> int:
        return self.length

    @property
    def complete(self) -> bool:
        """Whether every batch of a pass is held (later passes read nothing)."""
        return len(self.batches) >= self.length

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from list(self.batches)
        if self.complete:
            return
        if self.loader is None:
            self.loader = self.make_loader()
        self.passes_read += 1
        self.start_at(len(self.batches))
        for batch in self.loader:
            batch = hold(batch, self.memory)
            self.batches.append(batch)
            yield batch

    @property
    def nbytes(self) -> int:
        """Bytes of tensor data held."""
        return sum(v.nbytes for b in self.batches for v in b.values() if isinstance(v, torch.Tensor))
