"""Which errors the command line reports as the user's, by exception type.

Every subcommand ends an error the same way: the first exception of its chain (itself, then what it
was raised from or while handling, as `errors.exception_chain` walks it) whose type `EXIT_CODES`
lists is printed as one line, ``bionemo-wds <command>: error: <message>``, and its code is the exit
code. Anything else is a bug and keeps its traceback. The chain is walked because Lightning and
jsonargparse wrap what a data module's or a model's ``__init__`` raises; the type decides, never
where the traceback points.
"""

from __future__ import annotations

import sys

from bionemo_wds.errors import BadInputError, RemoteReadError, exception_chain

#: Exception type -> exit code; the first type an error is an instance of (in this order) wins.
#: `BadInputError` covers its subclasses (`OptionError`, `ManifestError`, `BlendError`,
#: `SourceError`, `CorruptShardError` and its `ChecksumError`, `TruncatedShardError`, `ShardSizeError`).
EXIT_CODES: dict[type[BaseException], int] = {
    BadInputError: 2,
    RemoteReadError: 2,
    FileNotFoundError: 2,
}


def user_error(exc: BaseException) -> tuple[BaseException, int] | None:
    """The user error behind `exc` (itself or one in its chain) and its exit code, or None (a bug)."""
    for error in exception_chain(exc):
        for kind, code in EXIT_CODES.items():
            if isinstance(error, kind):
                return error, code
    return None


def report_error(command: str, exc: BaseException) -> int | None:
    """Print the user error behind `exc` as one line on stderr and return its exit code; None (and
    nothing printed) when `exc` is not the user's: the caller re-raises it."""
    found = user_error(exc)
    if found is None:
        return None
    error, code = found
    print(f"bionemo-wds {command}: error: {worker_message(str(error))}", file=sys.stderr)
    return code


def worker_message(text: str) -> str:
    """The user's one line of an error a DataLoader worker raised (bad input found when a batch is
    built: a base a tokenizer cannot spell, a damaged shard): torch re-raises it in the main process
    as "Caught X in DataLoader worker process N." and the worker's traceback, whose last line is
    ``X: <message>``; other messages unchanged."""
    if not text.startswith("Caught ") or "Original Traceback" not in text:
        return text
    last = [line for line in text.splitlines() if line.strip()][-1]
    head, _, message = last.partition(": ")
    if message and all(part.isidentifier() for part in head.split(".")):  # "module.ErrorType: message"
        return message
    return last
