"""Side-by-side benchmark of bionemo-wds against the loaders it replaces (see `run.py`).

Not part of the wheel: it runs from a source checkout (``python tools/benchmark.py``,
``bionemo-wds benchmark`` in a checkout), with the repository root (`ROOT`) on ``sys.path``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

#: The repository root: the folder that holds this package.
ROOT = Path(__file__).resolve().parents[1]


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) with `ROOT` first on ``PYTHONPATH``, so that a
    child started with ``python -m benchmarks.child`` or ``-c`` finds this package from any directory."""
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env
