"""The benchmark's peers for the batch format a `transformers` model takes (``batch_format="hf"``).

- ``ours_hf``: ``ours`` (format 4 windows, the same data module and options) with
  ``batch_format="hf"``: ``input_ids``, ``attention_mask``, ``labels`` (not shifted, -100 where not
  trained), ``position_ids``; the two rows give the cost of the format.
- ``ours_packed_hf``: ``ours_packed`` with ``batch_format="hf"``: the packed batch with the
  flattened varlen keys (``cu_seq_lens_q/k``, ``max_length_q/k``).

Each prepares its own copy of its peer's dataset (the same options), so its prepare row repeats
that peer's.
"""

from __future__ import annotations

import inspect
from typing import Any

from benchmarks.packing_peers import OursPacked
from benchmarks.peers import Ours

#: The peers of this module.
FORMAT_PEERS = ("ours_hf", "ours_packed_hf")


def format_missing() -> str | None:
    """Why this checkout cannot run these peers (a data module without ``batch_format``), or None."""
    from bionemo_wds.lightning.datamodule import GenomicWebDataModule

    if "batch_format" not in inspect.signature(GenomicWebDataModule).parameters:
        return "this checkout's GenomicWebDataModule has no batch_format option"
    return None


class OursHF(Ours):
    name = "ours_hf"

    def load_options(self) -> dict[str, Any]:
        return {**super().load_options(), "batch_format": "hf"}


class OursPackedHF(OursPacked):
    name = "ours_packed_hf"

    def load_options(self) -> dict[str, Any]:
        return {**super().load_options(), "batch_format": "hf"}
