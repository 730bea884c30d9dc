"""Suggestions ("did you mean --x?") for a misspelt option, the tail of a one-line error.

The same rule as `prepare`'s: the valid spellings closest to the given one by difflib's ratio (as
Python's own argparse does from 3.14 on), at most two, none when nothing is close.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: How alike (difflib's ratio, 0..1) a valid option must be to the given one to be suggested.
CUTOFF = 0.6


def suggestion(word: str, choices: Iterable[str]) -> str:
    """``"; did you mean --x?"`` (or ``--x or --y``) for the choices closest to `word`, or ``""``."""
    close = difflib.get_close_matches(word, list(dict.fromkeys(choices)), n=2, cutoff=CUTOFF)
    return f"; did you mean {' or '.join(close)}?" if close else ""
