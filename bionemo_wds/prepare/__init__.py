"""Prepare: sources -> catalog -> splits -> windows -> plan -> writers -> shards + manifest.

`prepare(inputs, out, PrepareOptions(...))` is the entry point; `report` holds inspect/verify.
"""

from bionemo_wds.prepare.options import PrepareOptions
from bionemo_wds.prepare.run import PrepareResult, prepare

__all__ = ["PrepareOptions", "PrepareResult", "prepare"]
