"""What happens when a shard is damaged: a clear error by default, or skip-and-count.

One `ShardErrorPolicy` judges tar-level damage reported by the shard reader (truncation, bad
headers), records that do not decode, and shards whose window count disagrees with the manifest,
so every message names the shard and the last good sample key.
The skip counter lives in shared memory, so counts from loader workers reach the main process.
"""

from __future__ import annotations

import multiprocessing as mp
import warnings
from collections.abc import Mapping
from typing import Any


class CorruptShardError(RuntimeError):
    """A shard that is truncated, corrupt, or disagrees with its manifest."""


HANDLER_MODES = ("raise", "warn")


class ShardErrorPolicy:
    """Raise or skip-and-count; holds no per-stream state, so one policy serves every loader, pass
    and worker (streams keep their own position and counts, see `pipeline.iter_blocks`)."""

    def __init__(self, mode: str = "raise", expected: Mapping[str, int] | None = None, context: Any = None):
        if mode not in HANDLER_MODES:
            raise ValueError(f"handler must be one of {HANDLER_MODES}, got {mode!r}")
        self.mode = mode
        self.expected = dict(expected or {})
        # a counter in shared memory, from the context the loader workers are started with
        self._skipped = (context or mp.get_context()).Value("q", 0)

    @property
    def skipped(self) -> int:
        """Damaged records or shards skipped so far, over all processes (``handler="warn"``)."""
        return int(self._skipped.value)

    def _fail(self, message: str) -> None:
        if self.mode == "raise":
            raise CorruptShardError(message)
        with self._skipped.get_lock():
            self._skipped.value += 1
        warnings.warn(f"skipped: {message}", stacklevel=3)

    def damaged_shard(self, url: str, exc: Exception, after_key: str | None) -> None:
        """A shard that could not be read to its end."""
        where = f"after sample {after_key}" if after_key else "before its first sample"
        self._fail(f"shard {url} is truncated or corrupt ({where}): {exc}")

    def bad_record(self, url: str | None, key: str | None, exc: Exception) -> None:
        self._fail(f"shard {url}: record {key} cannot be decoded: {exc}")

    def check_count(self, url: str, count: int) -> None:
        """A shard read to its end: does it hold the windows the manifest lists?"""
        if url in self.expected and count != self.expected[url]:
            self._fail(
                f"shard {url} holds {count} samples but the manifest lists "
                f"{self.expected[url]}: the manifest disagrees with the file"
            )
