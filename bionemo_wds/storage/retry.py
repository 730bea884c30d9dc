"""Retries with exponential backoff for remote reads, and the error after the last attempt.

Transient failures are retried: connection refused or reset, timeouts, HTTP 5xx (and 429), a
response shorter than asked for. Anything else (a missing object, no permission) fails at once.
After the last attempt `RemoteReadError` names the URL, the attempts and the last cause, so a stopped
server is a clear error, never a truncated sample.

A throttling answer (429, 503, S3's ``SlowDown``: `is_throttled`) is the store asking the crowd of
clients to slow down; if they all wait the same doubling times they come back together. So those
waits are jittered ("decorrelated jitter", as in the AWS Architecture Blog's "Exponential Backoff
And Jitter"): each is drawn between the policy's `throttle_backoff` and three times the previous
one, capped at `max_backoff`. Other failures (a refused connection, a cut response) wait the plain
doubling times of `RetryPolicy.waits`.
"""

from __future__ import annotations

import asyncio
import errno
import os
import random
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
    "is_throttled",
    "is_transient",
    "retrying",
    "timing_random",
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
#: Error codes of a service that throttles: "too many requests, slow down".
_THROTTLE_CODES = {
    "SlowDown",
    "ServiceUnavailable",
    "Throttling",
    "ThrottlingException",
    "ThrottledException",
    "RequestThrottled",
    "RequestLimitExceeded",
    "TooManyRequests",
    "TooManyRequestsException",
    "503",
    "429",
}
#: HTTP statuses of a throttling answer.
_THROTTLE_STATUSES = {429, 503}

_TIMING: tuple[int, random.Random] | None = None


def timing_random() -> random.Random:
    """The random source of waits and slot choices: timing only, never data, so it is seeded from
    the OS (not from the run's seed, which decides every data choice) and afresh in each process,
    so forked loader workers do not draw the same waits."""
    global _TIMING
    if _TIMING is None or _TIMING[0] != os.getpid():
        _TIMING = (os.getpid(), random.Random(os.urandom(16)))
    return _TIMING[1]


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
    first failure, doubling up to `max_backoff`; after a throttling answer, a jittered wait of at
    least `throttle_backoff` seconds (None: twice `backoff`) instead (`throttled_wait`)."""

    attempts: int = 5
    backoff: float = 0.5
    max_backoff: float = 30.0
    throttle_backoff: float | None = None

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise OptionError(f"retries must allow at least 1 attempt, got {self.attempts}")
        if self.backoff < 0:
            raise OptionError(f"retry backoff must be non-negative, got {self.backoff}")
        if self.throttle_backoff is not None and self.throttle_backoff < 0:
            raise OptionError(f"retry throttle_backoff must be non-negative, got {self.throttle_backoff}")

    def waits(self) -> Iterator[float]:
        """Seconds to wait before each retry (``attempts - 1`` of them) after failures that are not
        throttling answers."""
        wait = self.backoff
        for _ in range(self.attempts - 1):
            yield min(wait, self.max_backoff)
            wait *= 2

    @property
    def throttle_base(self) -> float:
        """The least wait after a throttling answer."""
        return self.throttle_backoff if self.throttle_backoff is not None else 2 * self.backoff

    def throttled_wait(self, previous: float | None, rng: random.Random | None = None) -> float:
        """Seconds to wait after a throttling answer, given the `previous` such wait of this request
        (None: the first): drawn uniformly between `throttle_base` and three times `previous`
        (decorrelated jitter), never above `max_backoff`."""
        base = min(self.throttle_base, self.max_backoff)
        high = 3 * previous if previous is not None else 2 * base  # the first: up to twice the base
        return min(self.max_backoff, (rng or timing_random()).uniform(base, max(base, high)))


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


def is_throttled(exc: BaseException) -> bool:
    """Is `exc` (or anything it was raised from) a throttling answer: HTTP 429 or 503, or an S3
    error code such as ``SlowDown``?"""
    for e in exception_chain(exc, suppressed=True):
        status = getattr(e, "status", None)  # aiohttp.ClientResponseError
        if isinstance(status, int) and status in _THROTTLE_STATUSES:
            return True
        response = getattr(e, "response", None)  # botocore.exceptions.ClientError
        if isinstance(response, dict):
            if response.get("Error", {}).get("Code") in _THROTTLE_CODES:
                return True
            if response.get("ResponseMetadata", {}).get("HTTPStatusCode") in _THROTTLE_STATUSES:
                return True
    return False


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
    on_throttled: Callable[[], Any] | None = None,
) -> T:
    """`call()`, retried under `policy` while it fails transiently; `RemoteReadError` after the last
    attempt. Other errors pass through unchanged. `on_retry` is told of each retry and `on_throttled`
    of each throttling answer, the last one included (for the counts). After a throttling answer
    the wait is jittered (`RetryPolicy.throttled_wait`); after other failures it doubles."""
    waits = policy.waits()
    attempt = 0
    throttled: float | None = None  # the last jittered wait
    while True:
        attempt += 1
        try:
            return call()
        except Exception as exc:
            if not is_transient(exc):
                raise
            slow_down = is_throttled(exc)
            if slow_down and on_throttled is not None:
                on_throttled()
            wait = next(waits, None)  # advanced either way: `attempts` bounds both kinds
            if wait is None:
                raise RemoteReadError(url, attempt, exc) from exc
            if slow_down:
                wait = throttled = policy.throttled_wait(throttled)
            if on_retry is not None:
                on_retry()
            sleep(wait)
