"""The ``--memory-baseline`` of `tools/benchmark.py`: what the memory target needs of an earlier run's
``--json`` (its genome size and ours' peak PSS per worker count), read and checked before any peer
runs, so that a wrong path costs nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


class BaselineUnreadable(RuntimeError):
    """The ``--memory-baseline`` file is missing, is not this benchmark's JSON, or has no `ours`."""


def memory_baseline(path: str | Path, catalog: str | None = None) -> dict[str, Any]:
    """What the memory target needs of an earlier run's ``--json`` (`path`): its genome size and
    ours' peak PSS per worker count; read before any peer runs, so that a wrong path costs nothing.
    From the JSON of a run of several catalogs, catalog `catalog`'s (default: the genome's)."""

    def unreadable(why: str) -> BaselineUnreadable:
        return BaselineUnreadable(f"--memory-baseline {path}: {why}")

    try:
        earlier = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise unreadable(f"cannot read it as JSON ({exc})") from exc
    if isinstance(earlier, dict) and "catalogs" in earlier:
        try:
            earlier = earlier["catalogs"][catalog or "genome"]
        except (KeyError, TypeError) as exc:
            raise unreadable(f"no run of the {catalog or 'genome'} catalog in it") from exc
    try:
        ours = earlier["peers"]["ours"]
    except (KeyError, TypeError) as exc:
        raise unreadable("no `ours` peer in it (not this benchmark's --json?)") from exc
    try:
        pss = {w: int(load["peak_pss_bytes"]) for w, load in ours["load"].items()}
        bases = int(earlier["bases"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise unreadable(f"no `bases` or `ours` peak PSS in it ({exc!r})") from exc
    if not pss or min(pss.values()) <= 0:
        raise unreadable("no `ours` peak PSS in it")
    return {"path": str(path), "bases": bases, "ours_peak_pss_bytes": pss}


def memory_baselines(path: str | Path, names: list[str]) -> dict[str, dict[str, Any]]:
    """The memory baseline (`memory_baseline`) of each catalog run now, by name. One catalog takes
    the earlier run's (its namesake where that run had several); several take their namesakes
    only (a run of one catalog is named by its ``catalog``, the genome before there were names),
    and at least one of them must have one."""
    if len(names) == 1:
        return {names[0]: memory_baseline(path, names[0])}
    try:
        earlier = json.loads(Path(path).read_text())
        ran = set(earlier["catalogs"]) if "catalogs" in earlier else {earlier.get("catalog", "genome")}
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError):
        return {names[0]: memory_baseline(path, names[0])}  # unreadable: its error, as one catalog's
    found = {name: memory_baseline(path, name) for name in names if name in ran}
    if not found:
        raise BaselineUnreadable(f"--memory-baseline {path}: no run of {' or '.join(names)} in it")
    return found
