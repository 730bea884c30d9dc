"""Atomic files: the one way this package writes a file that readers may look at.

`atomic_write` writes to a hidden temporary name beside the target (a dot name ending in
``.tmp-<pid>``, so shard globs and manifest readers never see it), fsyncs the file, renames it onto
the target and fsyncs the directory, so after a crash the target is either the old file, the
whole new file, or absent, never a part. `atomic_path` is the same for writers that open the file
themselves. Nothing else in the package renames a temporary into place.
`remove_stale_temporaries` clears what a killed run left.
Hashing wrappers live here too: a writer that hashes what it writes reads nothing twice.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from bionemo_wds.storage.location import filesystem, is_url

#: Temporary names are ``.<name>.tmp-<pid>``; this glob finds them under a directory.
TEMPORARY_GLOB = ".*.tmp-*"


def temporary_name(final: Path) -> Path:
    """The hidden temporary path `atomic_write` uses for `final` in this process."""
    return final.with_name(f".{final.name}.tmp-{os.getpid()}")


def fsync_directory(directory: Path) -> None:
    """Make a rename in `directory` durable (a no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _publish(tmp: Path, final: Path) -> None:
    """Rename the (already fsynced) temporary onto `final` and make the rename durable."""
    os.replace(tmp, final)
    fsync_directory(final.parent)


@contextlib.contextmanager
def atomic_write(
    path: str | os.PathLike[str],
    mode: str = "wb",
    durable: bool = True,
    storage_options: dict[str, Any] | None = None,
    **open_kwargs: Any,
) -> Iterator[IO[Any]]:
    """Open a hidden temporary beside `path`; on a clean exit it replaces `path` durably.

    On any exception the temporary is removed and `path` is left as it was. `durable=False` skips
    the fsyncs (for a cache, whose entries are checked when read). A URL (``s3://...``) is written
    as one object through fsspec, which a store makes visible only when complete (a multipart
    upload for large objects); on an exception the upload is aborted (`discard`), so no part of it
    is ever visible either.
    """
    if is_url(path):
        fs = filesystem(str(path), storage_options, own_retries=False)
        handle = fs.open(str(path), mode, **open_kwargs)
        try:
            yield handle
        except BaseException:
            _discard(handle)
            raise
        handle.close()
        return
    final = Path(path)
    tmp = temporary_name(final)
    try:
        with open(tmp, mode, **open_kwargs) as fh:
            yield fh
            if durable:
                fh.flush()
                os.fsync(fh.fileno())
        if durable:
            _publish(tmp, final)
        else:
            os.replace(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def _discard(handle: Any) -> None:
    """Abort a remote upload so that nothing of it becomes visible (fsspec's ``discard``)."""
    discard = getattr(handle, "discard", None)
    if discard is None:  # a filesystem without abort: nothing visible is what its close must not do
        raise RuntimeError(f"{type(handle).__name__} cannot abort an upload; refusing to publish a partial object")
    discard()
    handle.closed = True  # the buffer is gone: closing again would try to upload it


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """`atomic_write` for a writer that opens the file itself (pyfaidx writing an index).

    Yields the hidden temporary path (nothing is there yet); on a clean exit the file the body
    wrote there is fsynced and replaces `path` durably, as `atomic_write` does. On any exception,
    or when the body wrote no file, the temporary is removed and `path` is left as it was.
    """
    final = Path(path)
    tmp = temporary_name(final)
    tmp.unlink(missing_ok=True)  # a dead process of the same pid may have left one
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)  # FileNotFoundError when the body wrote nothing
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        _publish(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)


def remove_stale_temporaries(directory: str | os.PathLike[str], of: str = "*", recursive: bool = True) -> int:
    """Delete the hidden temporaries a killed run left under `directory`; returns how many.

    `of` is a glob of the final names whose temporaries to remove (default: any); `recursive`
    searches subdirectories too (default), else only `directory` itself.
    """
    pattern = f".{of}.tmp-*"
    found = Path(directory).rglob(pattern) if recursive else Path(directory).glob(pattern)
    removed = 0
    for tmp in found:
        if tmp.is_file():
            tmp.unlink(missing_ok=True)
            removed += 1
    return removed


class HashingWriter(io.RawIOBase):
    """File wrapper that hashes and counts what goes through, so a written file is never re-read."""

    def __init__(self, raw: IO[bytes]):
        self.raw = raw
        self.sha = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.sha.update(data)
        self.size += len(data)
        return self.raw.write(data)


class HashingReader:
    """Read-through wrapper that hashes and counts what is read; `finish` hashes the rest."""

    def __init__(self, raw: IO[bytes]):
        self.raw = raw
        self.sha = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        self.sha.update(data)
        self.size += len(data)
        return data

    def finish(self) -> tuple[int, str]:
        """(size, sha256) of the whole stream, reading what the parser left (tar end padding)."""
        while self.read(1 << 22):
            pass
        return self.size, self.sha.hexdigest()


def file_sha256(path: str | os.PathLike[str]) -> tuple[int, str]:
    """(size, sha256) of a file."""
    with open(path, "rb") as fh:
        return HashingReader(fh).finish()
