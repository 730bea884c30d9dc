"""Where this process stands: data-parallel rank and size, and loader worker. Detected here only.

Everything that depends on the rank or the worker asks this module, so tests can inject a `World`
and a loader worker reports the same identity to every stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class World:
    """Data-parallel rank and size of this process."""

    rank: int = 0
    size: int = 1

    def __post_init__(self) -> None:
        if self.size < 1 or not 0 <= self.rank < self.size:
            raise ValueError(f"rank {self.rank} is not within a world of {self.size}")

    @classmethod
    def detect(cls, trainer: Any = None) -> World:
        """From the Lightning trainer when there is one, else torch.distributed, else a single process."""
        if trainer is not None:
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
