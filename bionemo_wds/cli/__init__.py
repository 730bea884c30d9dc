"""`bionemo-wds` command line: prepare, inspect, verify, benchmark, and LightningCLI fit/validate/test/predict."""

from bionemo_wds.cli.main import main

__all__ = ["main"]
