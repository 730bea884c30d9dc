"""A model batch's values on their way to torch: numpy arrays as tensors (zero-copy, pinned on
request; Megatron's keys of a batch laid out in numpy: `megatron_inputs`), and the per-sample names
as `SampleNames`, which Lightning's batch-size walk passes over."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np
import torch
from webdataset.filters import pipelinefilter

from bionemo_wds.load.batch.packed_columns import boundaries


@dataclasses.dataclass(init=False, eq=False, repr=False)
class SampleNames:
    """The per-sample names of a model batch (``keys``, ``seq_id``): a read-only sequence of str.

    ``names[i]``, ``len(names)``, ``for name in names``, ``list(names)`` and ``names == [...]`` work
    as with the list it holds (`tolist` gives one). Why not that list: Lightning works out the batch
    size of a value a step logs without ``batch_size=`` by walking the batch, and takes a list of
    str in it for something without a size, so every batch was "ambiguous" (a warning for every
    model that logs). This is a dataclass without fields and without ``__iter__`` (Python iterates
    it by index), which that walk passes over: the batch size Lightning finds is the tensors' first
    dimension, the same in every other entry of the batch.
    """

    __hash__ = None  # type: ignore[assignment]  # compared by value, like the list

    def __init__(self, names: Sequence[str]):
        self.names = list(names)

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: Any) -> Any:
        return self.names[index]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SampleNames):
            return self.names == other.names
        return isinstance(other, (list, tuple)) and self.names == list(other)

    def __repr__(self) -> str:
        return f"SampleNames({self.names!r})"

    def tolist(self) -> list[str]:
        """The names as a new list."""
        return list(self.names)


def keep_numpy(batch: Any) -> Any:
    """DataLoader ``collate_fn`` for ready-made batches: leave numpy arrays as they are.

    The default would turn them into tensors in the worker, and each tensor would then cross the
    process boundary through a shared-memory segment of its own; the data modules move numpy
    batches with `transfer.BatchTransfer` instead and make tensors in the main process (`to_tensors`).
    """
    return batch


def tensors(batch: dict[str, Any], pin_memory: bool = False) -> dict[str, Any]:
    """numpy arrays of a batch as torch tensors (zero-copy; pinned on request); lists unchanged."""
    out = {}
    for k, v in batch.items():
        if isinstance(v, np.ndarray):
            v = torch.from_numpy(v)
            if pin_memory:
                v = v.pin_memory()
        out[k] = v
    return out


def _to_tensors(src: Iterable[dict[str, Any]], pin_memory: bool = False) -> Iterator[dict[str, Any]]:
    """Stage form of `tensors`."""
    for item in src:
        yield tensors(item, pin_memory)


to_tensors = pipelinefilter(_to_tensors)


def megatron_inputs(
    tokens: np.ndarray, labels: np.ndarray, loss_mask: np.ndarray, positions: torch.Tensor, sizes: np.ndarray | None
) -> dict[str, Any]:
    """Megatron's keys of a batch laid out in numpy, as tensors (no copy): ``tokens``, ``labels``,
    ``loss_mask``, ``position_ids``, and a packed batch's boundaries (its documents' token counts
    `sizes`, `packed_columns.boundaries`; None: not packed)."""
    out = {
        "tokens": torch.from_numpy(tokens),
        "labels": torch.from_numpy(labels),
        "loss_mask": torch.from_numpy(loss_mask),
        "position_ids": positions,
    }
    if sizes is not None:
        out.update(boundaries(torch.from_numpy(sizes)))
    return out
