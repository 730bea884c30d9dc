"""bionemo-wds: genomes to WebDataset shards for DNA language models, and back into Lightning.

The data modules are imported lazily so that `bionemo-wds prepare` does not pay for torch and
Lightning start-up.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "Split": "bionemo_wds.load.splits",
    "WebDataModule": "bionemo_wds.compat.webdatamodule",
    "PickledDataWDS": "bionemo_wds.compat.webdatamodule",
    "pickles_to_tars": "bionemo_wds.compat.pickles",
    "GenomicWebDataModule": "bionemo_wds.lightning.datamodule",
    "GenomicDataset": "bionemo_wds.load.dataset",
    "GenomicIterableDataset": "bionemo_wds.load.iterable",
    "GenomicMapDataset": "bionemo_wds.load.map_dataset",
    "Provenance": "bionemo_wds.load.provenance",
    "encode": "bionemo_wds.inference",
    "contains": "bionemo_wds.homology.membership",
    "leakage": "bionemo_wds.homology.leakage",
    "to_model_inputs": "bionemo_wds.load.batch.model_inputs",
    "untuple": "bionemo_wds.compat.stages",
    "decode_sample": "bionemo_wds.compat.stages",
    "shuffle": "bionemo_wds.compat.stages",
    "reverse_complement": "bionemo_wds.compat.stages",
    "batch": "bionemo_wds.compat.stages",
    "tag_dropout": "bionemo_wds.compat.stages",
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bionemo_wds' has no attribute {name!r}")
