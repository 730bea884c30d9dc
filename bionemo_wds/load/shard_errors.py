"""What happens when a shard is damaged: a clear error by default, or skip-and-count.

One `ShardErrorPolicy` judges tar-level damage reported by the shard reader (truncation, bad
headers), records that do not decode, records that fail their checksum against the manifest's
record index, shards missing or not of their listed size, and shards whose window count disagrees
with the manifest, so every message names
the shard and the last good sample key (or the failing record's key).
The skip counter lives in shared memory, so counts from loader workers reach the main process.

What to do with each damaged record or shard is a plain handler function, as in webdataset's
``handlers.py``: it gets the `CorruptShardError` (a `ChecksumError`, `TruncatedShardError`,
`ShardSizeError` or the base class) and returns True to skip it (the policy counts the skip) or
raises. ``handler="raise"`` / ``"warn"`` / ``"skip"`` name `raise_on_error`, `warn_and_skip`
and `skip`; any such callable can be given instead (a module-level function, so that loader
workers can be started with it).
"""

from __future__ import annotations

import importlib
import multiprocessing as mp
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from bionemo_wds.errors import (
    ChecksumError,
    CorruptShardError,
    OptionError,
    ShardSizeError,
    TruncatedShardError,
)
from bionemo_wds.format import Manifest, shard_indexes
from bionemo_wds.storage.retry import ShortRead
from bionemo_wds.storage.store import Store

__all__ = [
    "HANDLERS",
    "HANDLER_MODES",
    "ChecksumError",
    "CorruptShardError",
    "Handler",
    "RecordChecks",
    "ShardErrorPolicy",
    "ShardSizeError",
    "TruncatedShardError",
    "raise_on_error",
    "resolve_handler",
    "size_problem",
    "skip",
    "warn_and_skip",
]

#: A damaged-shard handler: True skips (and counts) the damaged record or shard; otherwise it raises.
Handler = Callable[[CorruptShardError], bool]


def raise_on_error(exc: CorruptShardError) -> bool:
    """``handler="raise"``: the error itself, naming the shard (the default)."""
    raise exc


def warn_and_skip(exc: CorruptShardError) -> bool:
    """``handler="warn"``: a warning ("skipped: ..."), and the record or shard is skipped."""
    # stacklevel: this function, the policy's `_fail`, its public method, and that method's caller
    warnings.warn(f"skipped: {exc}", stacklevel=4)
    return True


def skip(exc: CorruptShardError) -> bool:
    """``handler="skip"``: skipped without a warning (still counted in `ShardErrorPolicy.skipped`)."""
    return True


#: The handlers named by the data modules' ``handler=`` strings.
HANDLERS: dict[str, Handler] = {"raise": raise_on_error, "warn": warn_and_skip, "skip": skip}
HANDLER_MODES = tuple(HANDLERS)


def resolve_handler(handler: str | Handler) -> Handler:
    """The handler function `handler` names: one of `HANDLER_MODES`, or an importable function's dotted
    path (``my_pkg.handlers.log_and_skip``, as a YAML config or the command line gives it); `handler`
    itself when callable."""
    if callable(handler):
        return handler
    if isinstance(handler, str) and handler in HANDLERS:
        return HANDLERS[handler]
    if isinstance(handler, str) and "." in handler:
        module, _, name = handler.rpartition(".")
        try:
            found = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            raise OptionError(f"handler {handler!r} cannot be imported: {exc}") from exc
        if callable(found):
            return found
    raise OptionError(f"handler must be one of {HANDLER_MODES} or a function, got {handler!r}")


def size_problem(url: str, size: int | None, listed: int, manifest_url: str) -> str:
    """What is wrong with a shard that is missing (`size` None) or not of the size its manifest lists."""
    if size is None:
        return f"shard {url} is listed in {manifest_url} but missing"
    return (
        f"shard {url} has {size} bytes but the manifest lists {listed}: "
        "the manifest disagrees with the file (run `bionemo-wds verify`)"
    )


class RecordChecks(NamedTuple):
    """What the record index expects of each record of one shard, by position in the shard
    (numpy columns: 4 + 4 bytes per record in every loader worker)."""

    crc32: np.ndarray  # uint32
    windows: np.ndarray  # int32


class ShardErrorPolicy:
    """Raise or skip-and-count; holds no per-stream state, so one policy serves every loader, pass
    and worker (streams keep their own position and counts, see `reading.iter_blocks`).

    `expected` maps shard URLs to their window counts, `records` to their `RecordChecks`
    (`record_checks` builds it from a manifest); shards in neither are read unchecked.
    """

    def __init__(
        self,
        mode: str | Handler = "raise",
        expected: Mapping[str, int | None] | None = None,
        context: Any = None,
        records: Mapping[str, RecordChecks] | None = None,
    ):
        self.handler = resolve_handler(mode)
        # a column-backed mapping (`shard_urls.UrlValues`) is kept as it is: a dict would cost ~100 B per shard
        self.expected = (
            expected if isinstance(expected, Mapping) and not isinstance(expected, dict) else dict(expected or {})
        )
        self.records = dict(records or {})
        # a counter in shared memory, from the context the loader workers are started with
        self._skipped = (context or mp.get_context()).Value("q", 0)

    @staticmethod
    def record_checks(root: str | Path | Store, manifest: Manifest) -> dict[str, RecordChecks]:
        """Shard URL (as the loader names shards) -> the checks of its records, for every shard with
        a record index (`format.shard_indexes`: none before format version 3)."""
        store = root if isinstance(root, Store) else Store(root)
        checks = {}
        for split, info in manifest.splits.items():
            for shard, index in zip(info.shards, shard_indexes(store, manifest, split) or []):
                if index is not None:
                    checks[store.url(shard.path)] = RecordChecks(
                        index.crc32.astype(np.uint32), index.windows.astype(np.int32)
                    )
        return checks

    @property
    def raises(self) -> bool:
        """Whether the handler is `raise_on_error` (every process then reports what it finds)."""
        return self.handler is raise_on_error

    @property
    def mode(self) -> str | None:
        """The ``handler=`` name of the handler ("raise", "warn", "skip"), None for another callable."""
        return next((name for name, handler in HANDLERS.items() if handler is self.handler), None)

    @property
    def skipped(self) -> int:
        """Damaged records or shards skipped so far, over all processes (``handler="warn"`` or ``"skip"``)."""
        return int(self._skipped.value)

    def _fail(self, error: CorruptShardError) -> None:
        """`error` to the handler: counted when it skips, raised when it returns False."""
        if not self.handler(error):
            raise error
        with self._skipped.get_lock():
            self._skipped.value += 1

    def damaged_shard(self, url: str, exc: Exception, after_key: str | None) -> None:
        """A shard that could not be read to its end."""
        where = f"after sample {after_key}" if after_key else "before its first sample"
        self._fail(TruncatedShardError(f"shard {url} is truncated or corrupt ({where}): {exc}"))

    def wrong_size(self, url: str, size: int | None, listed: int, manifest_url: str) -> None:
        """A shard missing or not of its listed size: an error, or under ``handler="warn"`` one counted
        skip for the shard (its records past the end of the file, all of a missing one's, become filler)."""
        message = size_problem(url, size, listed, manifest_url)
        if self.raises:
            raise ShardSizeError(message)
        filler = "its records are" if size is None else "its records past the end of the file are"
        self._fail(ShardSizeError(f"{message}; {filler} read as filler"))

    def unreachable(self, url: str, key: str | None, exc: Exception) -> None:
        """A shard that could not be fetched after every retry: `exc` itself (it names the URL, the
        attempts and the last cause), or under ``handler="warn"`` the shard is skipped and counted
        (another handler gets a `CorruptShardError` caused by `exc`)."""
        if self.raises:
            raise exc
        error = CorruptShardError(f"shard {url} (record {key}) could not be fetched: {exc}")
        error.__cause__ = exc
        self._fail(error)

    def bad_record(self, url: str | None, key: str | None, exc: Exception) -> None:
        """A record that could not be read or decoded."""
        # a record cut short by the end of its file: truncated; anything else: corrupt
        error = TruncatedShardError if isinstance(exc, ShortRead | EOFError) else CorruptShardError
        self._fail(error(f"shard {url}: record {key} cannot be decoded: {exc}"))

    def unindexed_record(self, url: str, key: str | None, position: int, listed: int) -> None:
        """Record number `position` (from 0) of a shard whose index lists fewer records."""
        self._fail(
            CorruptShardError(
                f"record {key} of shard {url} is record {position + 1} of the shard but the manifest's record "
                f"index lists {listed}: the manifest disagrees with the file"
            )
        )

    def bad_checksum(self, url: str, key: str | None, crc: int, expected: int) -> None:
        """A record whose bytes changed since `prepare` wrote the record index."""
        self._fail(
            ChecksumError(
                f"record {key} of shard {url} fails its crc32 check: its bytes give {crc:08x}, the manifest's "
                f"record index says {expected:08x} (the shard changed after it was written; see `bionemo-wds verify`)"
            )
        )

    def bad_window_count(self, url: str, key: str | None, windows: int, expected: int) -> None:
        self._fail(
            CorruptShardError(
                f"record {key} of shard {url} holds {windows} windows but the manifest's record index lists "
                f"{expected}: the manifest disagrees with the file"
            )
        )

    def check_count(self, url: str, count: int) -> None:
        """A shard read to its end: does it hold the windows the manifest lists?"""
        if url in self.expected and count != self.expected[url]:
            self._fail(
                CorruptShardError(
                    f"shard {url} holds {count} samples but the manifest lists "
                    f"{self.expected[url]}: the manifest disagrees with the file"
                )
            )
