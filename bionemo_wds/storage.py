"""Where shards live: local directories today, URLs through fsspec (the seam for object stores)."""

from __future__ import annotations

import glob
import os


def is_url(location: str | os.PathLike) -> bool:
    return "://" in str(location)


def list_shards(directory: str | os.PathLike, prefix: str) -> list[str]:
    """Sorted shard paths or URLs matching ``{directory}/{prefix}-*.tar``."""
    directory = str(directory)
    pattern = f"{directory.rstrip('/')}/{prefix}-*.tar"
    if not is_url(directory):
        return sorted(glob.glob(pattern))
    import fsspec

    fs, _, _ = fsspec.get_fs_token_paths(pattern)
    protocol = directory.split("://", 1)[0]
    return sorted(p if "://" in p else f"{protocol}://{p}" for p in fs.glob(pattern))
