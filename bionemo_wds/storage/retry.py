"""Retries with exponential backoff for remote reads, and the error after the last attempt.

Transient failures are retried: connection refused or reset, timeouts, HTTP 5xx (and 429), a
response shorter than asked for. Anything else (a missing object, no permission) fails at once.
After the last attempt `RemoteReadError` names the URL, the attempts and the last cause, so a stopped
server is a clear error, never a truncated sample.
"""

from __future__ import annotations

import asyncio
import errno
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from bionemo_wds.errors import OptionError, RemoteReadError, exception_chain

__all__ = [
    "RangeIgnored",
    "RemoteReadError",
    "RetryPolicy",
    "ShortRead",
    "is_transient",
    "retrying",
]

T = TypeVar("T")

#: OSError numbers of a network that failed (not of data that is missing).
_TRANSIENT_ERRNOS = {
    errno.ECONNREFUSED,
    errno.ECONNRESET,
    errno.ECONNABORTED,
    errno.ETIMEDOUT,
    errno.EPIPE,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.EIO,  # s3fs turns an unknown service error (a 5xx) into EIO, with the cause chained
}
#: Error codes S3-compatible services send for "try again".
_RETRY_CODES = {"SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout", "Throttling", "503", "500"}


class ShortRead(IOError):
    """A response with fewer bytes than asked for (a cut connection): worth another attempt."""


class RangeIgnored(IOError):
    """A response with more bytes than asked for: the server ignores range requests (not retried).

    `body` is what it sent instead (the whole object), so a reader that falls back to whole objects
    (`shards.RemoteShards`) need not fetch it again."""

    def __init__(self, message: str, body: bytes | None = None):
        super().__init__(message)
        self.body = body


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry: `attempts` in all, waiting `backoff` seconds after the
    first failure, doubling up to `max_backoff`."""

    attempts: int = 5
    backoff: float = 0.5
    max_backoff: float = 30.0

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise OptionError(f"retries must allow at least 1 attempt, got {self.attempts}")
        if self.backoff < 0:
            raise OptionError(f"retry backoff must be non-negative, got {self.backoff}")

    def waits(self) -> Iterator[float]:
        """Seconds to wait before each retry (``attempts - 1`` of them)."""
        wait = self.backoff
        for _ in range(self.attempts - 1):
            yield min(wait, self.max_backoff)
            wait *= 2


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)  # aiohttp.ClientResponseError
    if isinstance(status, int):
        return status
    response = getattr(exc, "response", None)  # botocore.exceptions.ClientError
    if isinstance(response, dict):
        code = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if response.get("Error", {}).get("Code") in _RETRY_CODES:
            return 503
        return code if isinstance(code, int) else None
    return None


def is_transient(exc: BaseException) -> bool:
    """Is `exc` (or anything it was raised from) a failure worth another attempt?"""
    for e in exception_chain(exc, suppressed=True):
        if isinstance(e, FileNotFoundError | PermissionError | IsADirectoryError | RangeIgnored | RemoteReadError):
            return False
        if isinstance(e, ConnectionError | TimeoutError | asyncio.TimeoutError | ShortRead):
            return True
        if isinstance(e, OSError) and e.errno in _TRANSIENT_ERRNOS:
            if e.errno != errno.EIO or (e.__cause__ or e.__context__) is None:
                return True
            continue  # EIO with a cause: the cause (an HTTP status) decides
        status = _status(e)
        if status is not None:
            return status >= 500 or status == 429
        module, name = type(e).__module__, type(e).__name__
        if module.startswith(("aiohttp", "botocore", "urllib3")) and any(
            word in name for word in ("Connect", "Timeout", "Disconnected", "Payload", "IncompleteRead", "Streaming")
        ):
            return True
    return False


def retrying(
    call: Callable[[], T],
    url: str,
    policy: RetryPolicy,
    on_retry: Callable[[], Any] | None = None,
    sleep: Callable[[float], Any] = time.sleep,
) -> T:
    """`call()`, retried under `policy` while it fails transiently; `RemoteReadError` after the last
    attempt. Other errors pass through unchanged. `on_retry` is told of each retry (for the counts)."""
    waits = policy.waits()
    attempt = 0
    while True:
        attempt += 1
        try:
            return call()
        except Exception as exc:
            if not is_transient(exc):
                raise
            wait = next(waits, None)
            if wait is None:
                raise RemoteReadError(url, attempt, exc) from exc
            if on_retry is not None:
                on_retry()
            sleep(wait)
