"""`GenomicIterableDataset`: the earlier name of `GenomicDataset`, taking every data module argument.

For teams without Lightning: a plain ``DataLoader(ds, batch_size=None, num_workers=N)`` over one
split (see `load.dataset`). It also accepts the arguments of `GenomicWebDataModule` that only
shape its loaders (workers, pinning, the worker transfer, in-memory caching, preparing from FASTA)
and ignores them: the `DataLoader` it is given decides those.
"""

from __future__ import annotations

from typing import Any

from bionemo_wds.load.dataset import GenomicDataset
from bionemo_wds.load.splits import Split

#: `GenomicWebDataModule` arguments that shape its own loaders, not the batches.
LOADER_ONLY = (
    "num_workers",
    "pin_memory",
    "transfer_bytes",
    "transfer_timeout",
    "cache_in_memory",
    "cache_memory",
    "fasta",
    "prepare_options",
)


class GenomicIterableDataset(GenomicDataset):
    """`GenomicDataset`, also taking (and ignoring) the data module's loader-only arguments."""

    def __init__(
        self,
        root: str | None = None,
        split: str | Split = "train",
        micro_batch_size: int = 8,
        model_inputs: bool = True,
        **options: Any,
    ):
        own = {name: value for name, value in options.items() if name not in LOADER_ONLY}
        super().__init__(root, split, micro_batch_size, model_inputs, **own)
