"""Errors the user can act on, as one hierarchy.

`BadInputError` marks input the user must fix (a file, a sequence, a parameter, an output
directory). The CLI turns it into a one-line message and exit code 2 (`cli.errors.EXIT_CODES` maps
types, never traceback locations); nothing else in the package should be caught that broadly::

    BadInputError
        OptionError          (also ValueError) an argument, option or parameter
        ManifestError        (also ValueError) a manifest.json or record index file
        BlendError           (also ValueError) datasets=/blend YAML entries, weights, datasets that disagree
        SourceError          (also ValueError) an input sequence file (FASTA, HDF5, Eden)
        CorruptShardError    (also RuntimeError) a shard damaged or disagreeing with its manifest
            ChecksumError        a record's crc32 or a shard's sha256 differs
            TruncatedShardError  a shard or record cut short
            ShardSizeError       a shard missing or not of its listed size
        FileSystemError      a file the OS refused to open or read: too many open files (with the
                             ulimit), permission denied; never "damaged"
            OutputWriteError     a file of an output that the OS refused to write (disk full,
                                 permission denied, read-only): the OS error, the file and what to do
    RemoteReadError          (a RuntimeError) a remote read that failed after every retry

The `ValueError` / `RuntimeError` bases keep ``except ValueError`` (and ``pytest.raises``) that
predate the hierarchy working. This module imports no other module of the package.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator


class BadInputError(Exception):
    """Input, parameters or an output directory that cannot be used as given."""


class OptionError(BadInputError, ValueError):
    """An argument, option or parameter that is invalid or disagrees with the data (a batch size
    below 1, another seq_length than the shards were cut for, an unknown epoch mode or split name)."""


class BlendError(BadInputError, ValueError):
    """A blend that cannot be used: ``datasets=`` / blend YAML entries, their weights, or blended
    datasets that disagree (seq_length, tokenizer, splits)."""


class SourceError(BadInputError, ValueError):
    """An input sequence file that cannot be prepared (unreadable, unknown characters, duplicate
    sequence ids, a FASTA/HDF5/Eden file of the wrong shape); the message names file and sequence."""


class CorruptShardError(BadInputError, RuntimeError):
    """A shard that is truncated, corrupt, or disagrees with its manifest; the message names the
    shard (and the record or last good sample key where there is one)."""


class ChecksumError(CorruptShardError):
    """A record whose crc32, or a shard whose sha256, differs from what the manifest records."""


class TruncatedShardError(CorruptShardError):
    """A shard cut short: a truncated tar, a record past the end of the file, a short read."""


class ShardSizeError(CorruptShardError):
    """A shard missing, or not of the size its manifest lists."""


class FileSystemError(BadInputError):
    """The operating system refused to open, map or read a file for a reason of its own (too many
    open files, permission denied, no memory to map it), not because of what the file holds: the
    message says which and names the file, never "damaged" (an output it refused to write is an
    `OutputWriteError`). Made by `os_error`; ``errno`` is the cause's.
    Not an `OSError`, so that no ``except OSError`` that judges a file damaged or missing takes it."""

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        self.errno = code

    def __reduce__(self) -> tuple:  # crosses process boundaries (loader, pool and cluster workers) whole
        return (type(self), (str(self), self.errno))


class OutputWriteError(FileSystemError):
    """A file of an output that the OS refused to write (no space left, over quota, permission
    denied, a read-only filesystem): the message names the file, what it is and what to do. What
    the OS said, never a claim about the data (`format.write_errors` makes it from the `OSError`)."""


#: What each refusal `os_error` reports means, and what to do about it.
_REFUSALS: dict[int, str] = {
    errno.EACCES: "permission denied (check the file's and its folders' permissions)",
    errno.EPERM: "operation not permitted (check the file's and its folders' permissions)",
    errno.ENFILE: "too many open files in the system (the kernel's fs.file-max); close other programs' files",
    errno.ENOSPC: "no space left on the device; free space and run again",
    errno.EDQUOT: "disk quota exceeded; free space and run again",
    errno.ENOMEM: "not enough memory to map or read it",
    errno.EROFS: "the file system is read-only",
}


def open_file_limit() -> int | None:
    """This process's limit of open files (the soft ``ulimit -n``), None where it cannot be read."""
    try:
        import resource
    except ImportError:  # not POSIX
        return None
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return None if soft == resource.RLIM_INFINITY else int(soft)


@contextlib.contextmanager
def refusal_named(path: str | os.PathLike[str]) -> Iterator[None]:
    """Raise an `OSError` inside that is the system refusing `path` (`os_error`) as its
    `FileSystemError` (the `OSError` its cause); any other error passes unchanged, for the caller to
    judge (missing, short, damaged)."""
    try:
        yield
    except OSError as exc:
        error = os_error(exc, path)
        if error is None:
            raise
        raise error from exc


def os_error(exc: OSError, path: str | os.PathLike[str]) -> FileSystemError | None:
    """`exc` as a `FileSystemError` naming `path` when it is the system refusing the file (too many
    open files, with the limit; permission denied; no space; ...), else None (the caller judges it:
    missing, short, not the format it should be)."""
    code = exc.errno
    if code == errno.EMFILE:
        limit = open_file_limit()
        text = (
            f"too many open files (this process may open {limit}: `ulimit -n`); raise the limit or open fewer at once"
            if limit is not None
            else "too many open files in this process; raise the limit or open fewer at once"
        )
    elif code in _REFUSALS:
        text = _REFUSALS[code]
    else:
        return None
    return FileSystemError(f"{os.fspath(path)}: {text}", code)


class RemoteReadError(RuntimeError):
    """A remote read that failed after every attempt (the URL, attempts and last cause are in the text).

    Defined here (raised by `storage.retry`) so that the CLI and the loaders can name it without
    importing storage."""

    def __init__(self, url: str, attempts: int | None = None, cause: BaseException | None = None):
        self.url, self.attempts, self.cause = url, attempts, cause
        if attempts is None:  # re-raised from a message alone (a loader worker's error in the main process)
            super().__init__(url)
            return
        detail = " ".join(f"{type(cause).__name__}: {cause}".split())
        super().__init__(f"{url}: read failed after {attempts} attempt(s); last error {detail}")


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


class ManifestError(BadInputError, ValueError):
    """A ``manifest.json`` (or the record index file it lists) that cannot be used (not JSON, foreign,
    another version, keys missing, an index file missing or not the listed one); the message names
    the file. A `BadInputError` (one line, exit 2 in the CLI) and, as before, a `ValueError`.
    Defined here, not in `format.manifest`, so that `format.split_index_file` raises it too."""
