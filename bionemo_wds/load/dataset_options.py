"""A dataset's batch, epoch and cache options, checked before anything is read: one place for
`GenomicDataset` and the Lightning data module, which take the same options."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bionemo_wds.errors import OptionError
from bionemo_wds.load.plan import training_modes
from bionemo_wds.load.splits import Split, as_split


def check_options(
    micro_batch_size: int,
    global_batch_size: int | None,
    epoch: str,
    cache_limit: int | None,
    samples_per_epoch: int | None,
    datasets: Any,
    blend: Any,
) -> None:
    """A dataset's batch, epoch and cache options, checked before anything is read."""
    if epoch not in training_modes():
        raise OptionError(f"epoch must be one of {', '.join(training_modes())}, got {epoch!r}")
    if micro_batch_size < 1:
        raise OptionError(f"micro_batch_size must be at least 1, got {micro_batch_size}")
    if global_batch_size is not None and global_batch_size < 1:
        raise OptionError(
            f"global_batch_size must be at least 1 (or None: micro x data-parallel size), got {global_batch_size}"
        )
    if cache_limit is not None and cache_limit < 0:
        raise OptionError(f"cache_limit must be non-negative bytes, got {cache_limit}")
    if samples_per_epoch is not None and datasets is None and blend is None:
        raise OptionError("samples_per_epoch sets the length of a mixed epoch: give datasets= or blend= with it")
    if epoch != "exact" and (datasets is not None or blend is not None):
        raise OptionError('a mixed epoch has exact quotas: use epoch="exact" with samples_per_epoch')


def check_module_options(fasta: Any, seq_length: int | None, datasets: Any, blend: Any) -> None:
    """The data module's own: ``fasta=`` prepares one dataset, at a given seq_length."""
    if fasta and (datasets is not None or blend is not None):
        raise OptionError("fasta= prepares one dataset; prepare each dataset of a blend first")
    if fasta and seq_length is None:
        raise OptionError("preparing from fasta needs seq_length")


def cached_splits(names: Iterable[str]) -> set[Split]:
    """The splits ``cache_in_memory`` names (val and test only: the train order changes every epoch)."""
    splits = {as_split(name, "cache_in_memory") for name in names}
    if Split.train in splits:
        raise OptionError("cache_in_memory is for val and test: the train order changes every epoch")
    return splits
