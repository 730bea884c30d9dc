"""Errors the user can act on.

`BadInputError` marks input the user must fix (a file, a sequence, a parameter, an output
directory). The CLI turns it into a one-line message and exit code 2; nothing else in the package
should be caught that broadly.
"""

from __future__ import annotations


class BadInputError(Exception):
    """Input, parameters or an output directory that cannot be used as given."""
