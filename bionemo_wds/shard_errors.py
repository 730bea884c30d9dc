"""What happens when a shard is damaged: a clear error by default, or skip-and-count.

One `ShardErrorPolicy` judges tar-level damage reported by the shard reader (truncation, bad
headers), records that do not decode, and shards whose window count disagrees with the manifest,
so every message names the shard and the last good sample key.
The skip counter lives in shared memory, so counts from loader workers reach the main process.
"""

from __future__ import annotations

import multiprocessing as mp
import warnings
from typing import Mapping


class CorruptShardError(RuntimeError):
    """A shard that is truncated, corrupt, or disagrees with its manifest."""


HANDLER_MODES = ("raise", "warn")


class ShardErrorPolicy:
    def __init__(self, mode: str = "raise", expected: Mapping[str, int] | None = None):
        if mode not in HANDLER_MODES:
            raise ValueError(f"handler must be one of {HANDLER_MODES}, got {mode!r}")
        self.mode = mode
        self.expected = dict(expected or {})
        self._skipped = mp.get_context("fork").Value("q", 0)
        self._url: str | None = None
        self._count = 0
        self._last_key: dict[str, str] = {}
        self._reported: set[str] = set()

    @property
    def skipped(self) -> int:
        """Damaged records or shards skipped so far, over all processes (``handler="warn"``)."""
        return int(self._skipped.value)

    def _fail(self, url: str | None, message: str) -> None:
        if self.mode == "raise":
            raise CorruptShardError(message)
        if url is not None:
            self._reported.add(url)
        with self._skipped.get_lock():
            self._skipped.value += 1
        warnings.warn(f"skipped: {message}", stacklevel=3)

    def damaged_shard(self, url: str, exc: Exception) -> None:
        """A shard that could not be read to its end (our tar reader's report)."""
        after = self._last_key.get(url)
        where = f"after sample {after}" if after else "before its first sample"
        self._fail(url, f"shard {url} is truncated or corrupt ({where}): {exc}")

    def saw(self, url: str | None, key: str | None, n_windows: int) -> None:
        if url != self._url:
            self._check_count()
            self._url, self._count = url, 0
        self._count += n_windows
        if url is not None and key is not None:
            self._last_key[url] = key

    def bad_record(self, url: str | None, key: str | None, exc: Exception) -> None:
        self._fail(url, f"shard {url}: record {key} cannot be decoded: {exc}")

    def end_of_stream(self) -> None:
        self._check_count()
        self._url, self._count = None, 0

    def _check_count(self) -> None:
        url = self._url
        if url is None or url not in self.expected or url in self._reported:
            return
        if self._count != self.expected[url]:
            self._fail(url, f"shard {url} holds {self._count} samples but the manifest lists "
                            f"{self.expected[url]}: the manifest disagrees with the file")
