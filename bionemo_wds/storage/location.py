"""Where data lives: a local path or a URL, checked before anything is read or written.

A location is a local path (``/data/run1``, ``run1``, ``file:///data/run1``) or a URL of an fsspec
protocol (``s3://bucket/run1``, ``https://host/run1``, ``gs://...``). `check_location` refuses what
would otherwise go wrong silently: ``s3:/bucket`` (one slash) would be a local directory named
``s3:``; an unknown protocol, a URL without a bucket or host, an HTTP URL to write to, or a protocol
whose fsspec implementation is not installed are each a clear `BadInputError`.

`filesystem` opens the fsspec filesystem of a URL. Endpoint, credentials and region come from the
standard variables (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_REGION``, ...), which botocore
reads itself, and from an optional ``storage_options`` dict (fsspec's keyword arguments).
"""

from __future__ import annotations

import os
import re
from typing import Any
from urllib.parse import unquote, urlparse

from bionemo_wds.errors import BadInputError

#: ``scheme:`` at the start of a location (RFC 3986); one letter is a Windows drive, not a scheme.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
#: Protocols that are the local filesystem.
LOCAL_PROTOCOLS = ("file", "local")
#: Protocols that can only be read.
READ_ONLY_PROTOCOLS = ("http", "https")
#: The package that implements a protocol, for the "not installed" message.
_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "http": "aiohttp", "https": "aiohttp", "gs": "gcsfs", "gcs": "gcsfs"}


def is_url(location: str | os.PathLike[str]) -> bool:
    """Is `location` a URL of a remote protocol (not a local path, not ``file://``)?"""
    text = str(location)
    return "://" in text and protocol_of(text) not in LOCAL_PROTOCOLS


def protocol_of(location: str) -> str:
    """The protocol of a URL ("" for a local path)."""
    match = _SCHEME.match(location)
    return match.group(1).lower() if match and location[match.end() :].startswith("//") else ""


def local_path(location: str) -> str:
    """The local path of a ``file://`` URL, or `location` itself."""
    if protocol_of(location) in LOCAL_PROTOCOLS:
        return unquote(urlparse(location).path)
    return location


def check_location(location: str | os.PathLike[str], write: bool = False, what: str = "location") -> str:
    """`location` as a string, or a `BadInputError` saying what is wrong with it as a URL.

    `write` also refuses read-only protocols. `what` names the location in messages (``--out``).
    """
    text = str(location)
    match = _SCHEME.match(text)
    if match is None:
        return text  # a local path
    scheme = match.group(1).lower()
    if not text[match.end() :].startswith("//"):
        raise BadInputError(
            f"{what} {text!r} is not a valid URL (write {scheme}://bucket/path); "
            f"as a local path it would create a directory named {text.split('/')[0]!r}"
        )
    if scheme in LOCAL_PROTOCOLS:
        return text
    from fsspec.registry import known_implementations, registry

    if scheme not in known_implementations and scheme not in registry:
        raise BadInputError(
            f"{what} {text!r}: unknown protocol {scheme}:// (use a local path, s3://, http(s):// or another "
            "fsspec protocol)"
        )
    if not text[match.end() + 2 :].split("/", 1)[0]:
        raise BadInputError(f"{what} {text!r} names no bucket or host")
    if write and scheme in READ_ONLY_PROTOCOLS:
        raise BadInputError(f"{what} {text!r}: {scheme}:// is read-only; write to a local path or s3://")
    try:
        from fsspec.registry import get_filesystem_class

        get_filesystem_class(scheme)
    except ImportError as exc:
        package = _PACKAGES.get(scheme, f"the fsspec implementation of {scheme}://")
        raise BadInputError(
            f"{what} {text!r} needs {package}, which is not installed (pip install 'bionemo-wds[remote]'): {exc}"
        ) from exc
    return text


def join(root: str, *parts: str) -> str:
    """`root` and relative `parts` joined with ``/`` (for URLs and local paths alike)."""
    return "/".join([root.rstrip("/"), *(p.strip("/") for p in parts if p)])


def _merged(defaults: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    out = dict(defaults)
    for key, value in options.items():
        out[key] = _merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def default_options(protocol: str, own_retries: bool) -> dict[str, Any]:
    """fsspec options this package sets unless the user's ``storage_options`` say otherwise.

    With `own_retries` (readers: `retry.retrying` backs off and counts), botocore makes one attempt
    per call, so a stopped endpoint is reported after our attempts, not after botocore's too.
    """
    if protocol in ("s3", "s3a") and own_retries:
        return {"config_kwargs": {"retries": {"max_attempts": 1}, "connect_timeout": 10, "read_timeout": 30}}
    return {}


def filesystem(url: str, storage_options: dict[str, Any] | None = None, own_retries: bool = True) -> Any:
    """The fsspec filesystem of `url` (a new instance per process; fsspec caches it by options)."""
    import fsspec

    protocol = protocol_of(url) or "file"
    options = _merged(default_options(protocol, own_retries), dict(storage_options or {}))
    fs = fsspec.filesystem(protocol, **options)
    if own_retries and hasattr(fs, "retries"):
        fs.retries = 1  # s3fs's own retry loop (5 attempts by default) would hide ours and multiply the waits
    return fs
