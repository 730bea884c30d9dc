"""An output file the OS refused to write, as one line: which file, what the OS said, what to do.

A long `prepare` on a shared node meets a full disk, a quota, a directory it may not write or a
filesystem remounted read-only. Each is an `OSError` from deep inside a writer (a tar member, an
fsync, a close) that names no file; left alone it reaches the user as tracebacks (one per process
of a pool). `writing_output` turns it, where the file being written is known, into an
`errors.OutputWriteError` naming the file and the output, which the CLI prints as one line (exit 2)
and which crosses a process pool or a Dask cluster whole. Every file is written under a hidden
temporary name and renamed only when complete (`storage.atomic`), so a failed write leaves nothing
under the file's name, and running the same `prepare` again after freeing space resumes.

Only the errors that are about the output are turned: no space (``ENOSPC``), over quota
(``EDQUOT``), too large (``EFBIG``), permission (``EACCES``, ``EPERM``) and read-only (``EROFS``),
when the error names no file or a file under the output. Anything else (an input that cannot be
read while its bases are written into a shard) passes unchanged.
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator

from bionemo_wds.errors import OutputWriteError

#: errno -> what to do about it (after "<what the OS said> writing <file> (<what it is>): ").
ADVICE = {
    errno.ENOSPC: "free space there, then run the same command again: it resumes, keeping what is written",
    errno.EFBIG: "the filesystem refuses a file this large: choose another --out, or smaller shards",
    errno.EACCES: "make it writable for this user, or choose another --out",
    errno.EPERM: "make it writable for this user, or choose another --out",
    errno.EROFS: "the filesystem is read-only: choose another --out",
}
if hasattr(errno, "EDQUOT"):  # not on every platform
    ADVICE[errno.EDQUOT] = "free space within the quota (or raise it), then run the same command again: it resumes"


def output_write_error(exc: BaseException, path: str, what: str, under: str) -> OutputWriteError | None:
    """The one-line error for `exc`, raised while writing `path` (`what` it is) of the output at
    `under`; None when `exc` is not about the output (not an `OSError` of `ADVICE`, or one that names
    a file outside `under`)."""
    if not isinstance(exc, OSError) or exc.errno not in ADVICE:
        return None
    if exc.filename is not None and not _is_under(os.fsdecode(exc.filename), under):
        return None
    said = exc.strerror or os.strerror(exc.errno)
    said = said[:1].lower() + said[1:]
    return OutputWriteError(f"{said} writing {path} ({what}): {ADVICE[exc.errno]}", exc.errno)


@contextlib.contextmanager
def writing_output(path: str | os.PathLike[str] | None, what: str, under: str | os.PathLike[str]) -> Iterator[None]:
    """Turn an `OSError` of `ADVICE` raised inside into `output_write_error`'s one line (from the
    original, which stays the cause); any other exception passes unchanged. `path` None: the file
    the error names (else `under` itself), for a whole run's worth of writes."""
    try:
        yield
    except OSError as exc:
        named = os.fsdecode(exc.filename) if exc.filename is not None else os.fspath(under)
        error = output_write_error(exc, named if path is None else os.fspath(path), what, os.fspath(under))
        if error is None:
            raise
        raise error from exc


def _is_under(name: str, root: str) -> bool:
    """Whether `name` (a file an `OSError` names) lies in the output `root` (a path or a URL)."""
    if "://" in root:
        return name.startswith(root.split("://", 1)[1]) or name.startswith(root)
    root_path = os.path.abspath(root)
    try:
        return os.path.commonpath([os.path.abspath(name), root_path]) == root_path
    except ValueError:  # another drive
        return False
