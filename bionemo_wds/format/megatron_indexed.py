"""Megatron indexed datasets (``PREFIX.bin`` / ``PREFIX.idx``): how bionemo's ``preprocess_evo2`` writes
them, and megatron-core's module that reads and writes them, for ``--source megatron`` and
``export-megatron`` alike.

megatron-core is optional (the ``megatron`` extra, then ``pip install --no-deps megatron-core``):
without it, either command says what to install.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

from bionemo_wds.errors import OptionError

#: The end-of-document id ``preprocess_evo2`` appends to every document (its ``append_eod``).
EOD_ID = 0
#: What to install when megatron-core is missing.
INSTALL = "pip install 'bionemo-wds[megatron]' && pip install --no-deps 'megatron-core>=0.12'"


def indexed_dataset_module(purpose: str) -> Any:
    """``megatron.core.datasets.indexed_dataset``, or an `OptionError` saying that `purpose` (the command
    or option asking) needs megatron-core and how to install it."""
    try:
        with warnings.catch_warnings():  # megatron-core warns on import when Transformer Engine is absent
            warnings.simplefilter("ignore")
            return importlib.import_module("megatron.core.datasets.indexed_dataset")
    except ImportError as exc:
        raise OptionError(
            f"{purpose} needs megatron-core's indexed datasets, which are not installed: {INSTALL}"
        ) from exc
