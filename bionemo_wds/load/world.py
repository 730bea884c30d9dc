"""Where this process stands: data-parallel rank and size, and loader worker. Detected here only.

Everything that depends on the rank or the worker asks this module, so tests can inject a `World`
and a loader worker reports the same identity to every stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from bionemo_wds.errors import OptionError


@dataclass(frozen=True)
class World:
    """Data-parallel rank and size of this process."""

    rank: int = 0
    size: int = 1

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise OptionError(f"rank {self.rank} is not within a world of {self.size}")

    @classmethod
    def detect(cls, trainer: Any = None, dp_rank: int | None = None, dp_size: int | None = None) -> World:
        """The data-parallel rank and size, from the first that says:

        1. `dp_rank` / `dp_size` given explicitly (ranks of one tensor- or context-parallel group
           pass the same `dp_rank`, so they read identical batches);
        2. the Lightning trainer's strategy (``trainer.distributed_sampler_kwargs``: the data-parallel
           mesh of `ModelParallelStrategy`, the world of DDP/FSDP), else its global rank and world size;
        3. torch.distributed;
        4. a single process.
        """
        if (dp_rank is None) != (dp_size is None):
            raise OptionError(f"give dp_rank and dp_size together (got dp_rank={dp_rank}, dp_size={dp_size})")
        if dp_rank is not None and dp_size is not None:
            return cls(dp_rank, dp_size)
        if trainer is not None:
            sampler = getattr(trainer, "distributed_sampler_kwargs", None)
            if sampler and sampler.get("num_replicas"):
                return cls(int(sampler["rank"]), int(sampler["num_replicas"]))
            return cls(int(trainer.global_rank), int(trainer.world_size))
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return cls(torch.distributed.get_rank(), torch.distributed.get_world_size())
        return cls()


@dataclass(frozen=True)
class Worker:
    """This loader worker's number and how many workers its loader has (0 of 1 in the main process)."""

    id: int = 0
    count: int = 1

    @classmethod
    def detect(cls) -> Worker:
        info = torch.utils.data.get_worker_info()
        return cls(info.id, info.num_workers) if info is not None else cls()


def in_loader_worker() -> bool:
    """Whether this code runs in a DataLoader worker process."""
    return torch.utils.data.get_worker_info() is not None
