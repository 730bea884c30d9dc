"""Values of `prepare`'s options read from text (the command line, YAML): split ratios, split
lists, the shard name prefix. Pure functions; `prepare.options` attaches them to its fields."""

from __future__ import annotations

import argparse
import re
from typing import Any

from bionemo_wds.prepare.splits import SPLIT_NAMES

#: A shard file name prefix: a plain file-name stem, so `<split>/<prefix>-NNNNNN.tar` stays in its split
#: directory, is not hidden (a dot name is a temporary to `remove_stale_temporaries`) and is no glob.
STEM = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,199}")


def prefix_problem(prefix: Any) -> str | None:
    """What is wrong with a shard name prefix (`--prefix`), or None for a plain file-name stem."""
    if isinstance(prefix, str) and STEM.fullmatch(prefix):
        return None
    return "must be a plain file-name stem (up to 200 letters, digits, '_', '-', '.'; not starting with '.' or '-')"


def column_problem(name: Any) -> str | None:
    """What is wrong with a field or column name (`--text-column`, `--id-column`), or None: non-empty text."""
    return None if isinstance(name, str) and name else "must be a field or column name"


def parse_ratios(text: str) -> tuple[float, ...]:
    """`--split 0.8,0.1,0.1` -> one ratio per split, in `SPLIT_NAMES` order."""
    try:
        values = tuple(float(x) for x in text.split(","))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected {len(SPLIT_NAMES)} comma-separated numbers, got {text!r}") from exc
    if len(values) != len(SPLIT_NAMES):
        raise argparse.ArgumentTypeError(f"expected {len(SPLIT_NAMES)} ratios {','.join(SPLIT_NAMES)}, got {text!r}")
    return values


def parse_split_list(text: str) -> tuple[str, str]:
    """`--split-list train=FILE` (also `--split-parquet`, `--window-db`) -> (split name, file)."""
    split, sep, path = text.partition("=")
    if not sep or split not in SPLIT_NAMES:
        raise argparse.ArgumentTypeError(
            f"expected SPLIT=FILE with SPLIT one of {', '.join(SPLIT_NAMES)}; got {text!r}"
        )
    return split, path
