"""Suggestions ("did you mean --x?") for a misspelt option: one helper for every subcommand's one-line errors.

`closest` picks the nearest of the valid spellings (difflib's ratio, as Python's own argparse does
from 3.14 on); `did_you_mean` is the tail a one-line error ends with, empty when nothing is close.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

#: How alike (difflib's ratio, 0..1) a valid option must be to the given one to be suggested.
CUTOFF = 0.6


def closest(given: str, choices: Iterable[str], cutoff: float = CUTOFF) -> str | None:
    """The choice most like `given` (``--trainer.max_steps`` for ``--trainer.max_step``), or None."""
    matches = difflib.get_close_matches(given, list(dict.fromkeys(choices)), n=1, cutoff=cutoff)
    return matches[0] if matches else None


def did_you_mean(given: str, choices: Iterable[str], cutoff: float = CUTOFF) -> str:
    """``"; did you mean --x?"`` for the closest of `choices` to `given`, or ``""`` when none is close."""
    match = closest(given, choices, cutoff)
    return f"; did you mean {match}?" if match else ""
