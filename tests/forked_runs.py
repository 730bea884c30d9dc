"""The tests' forked runs: `benchmarks.forked.Zygote` with what the test scripts import (torch, gloo,
Lightning and our data module), so each gloo rank, killed loader or fit starts without importing them."""

from __future__ import annotations

from benchmarks.forked import ForkedRun, Zygote

#: What the test scripts import: torch, gloo, Lightning and our data module.
PRELOAD = ("torch", "torch.distributed", "lightning", "lightning.pytorch.callbacks", "bionemo_wds.lightning.datamodule")

__all__ = ["PRELOAD", "ForkedRun", "Zygote"]
