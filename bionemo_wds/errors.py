"""Errors the user can act on.

`BadInputError` marks input the user must fix (a file, a sequence, a parameter, an output
directory). The CLI turns it into a one-line message and exit code 2; nothing else in the package
should be caught that broadly.
"""

from __future__ import annotations

from collections.abc import Iterator


class BadInputError(Exception):
    """Input, parameters or an output directory that cannot be used as given."""


def exception_chain(exc: BaseException, suppressed: bool = False) -> Iterator[BaseException]:
    """`exc`, then the exceptions it was raised from or while handling, innermost last (each once).

    A context hidden with ``raise ... from None`` is followed only when `suppressed` (retrying wants
    every network cause; the CLI reports what the raiser chose to show)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        hidden = current.__suppress_context__ and not suppressed
        current = current.__cause__ or (None if hidden else current.__context__)


class OptionError(BadInputError, ValueError):
    """An argument, option or parameter that is invalid or disagrees with the data it is used on."""


class BlendError(BadInputError, ValueError):
    """Several datasets that cannot be mixed as given (entries, weights, datasets that disagree)."""


class ManifestError(BadInputError, ValueError):
    """A ``manifest.json`` (or the record index file it lists) that cannot be used (not JSON, foreign,
    another version, keys missing, an index file missing or not the listed one); the message names
    the file. A `BadInputError` (one line, exit 2 in the CLI) and, as before, a `ValueError`.
    Defined here, not in `format.manifest`, so that `format.index_file` raises it too."""
