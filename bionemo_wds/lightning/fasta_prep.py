"""A data module's ``fasta=``: the FASTA files prepared into its dataset once (`prepare_data`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def prepare_fasta(fasta: Sequence[str], root: str, options: dict[str, Any], storage_options: Any) -> None:
    """Prepare `fasta` into `root` with `options` (`PrepareOptions` fields) unless done. `prepare`
    holds the output's lock (`prepare.run.lock_path`): another process or node waits, then finds it
    done, so every rank may call this."""
    from bionemo_wds.prepare import PrepareOptions, prepare

    result = prepare(list(fasta), root, PrepareOptions(**options), storage_options)
    if result.status not in ("unchanged", "table-added"):
        print(f"prepared {root}: {result.shards_written} shard(s) in {result.seconds:.1f} s")
