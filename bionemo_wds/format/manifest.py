"""The manifest and shard names: what a prepared dataset holds, as ``<root>/manifest.json``."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bionemo_wds.format.atomic import atomic_write

FORMAT_NAME = "bionemo-wds"
FORMAT_VERSION = 1
#: Version 2 = version 1 with a compressed ``tokens`` field (``codec`` says how); written only
#: when a codec is asked for, so uncompressed datasets stay readable by version-1 readers.
COMPRESSED_FORMAT_VERSION = 2
READABLE_VERSIONS = (1, 2)
MANIFEST_NAME = "manifest.json"
DEFAULT_PREFIX = "wdshards"


def shard_name(index: int, prefix: str = DEFAULT_PREFIX) -> str:
    """File name of shard `index` of a split."""
    return f"{prefix}-{index:06d}.tar"


@dataclass
class ShardInfo:
    path: str  # relative to the dataset root
    n_samples: int
    n_tokens: int
    bytes: int
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def write_manifest(path: Path, obj: dict[str, Any]) -> None:
    """Write a manifest (or any JSON) so readers see the old file or the whole new one, never a part."""
    with atomic_write(path, "w") as fh:
        fh.write(json.dumps(obj, indent=1, sort_keys=False) + "\n")


def read_manifest(root: Path) -> dict[str, Any]:
    """The manifest of a prepared dataset; a clear error when it is missing or foreign."""
    path = Path(root) / MANIFEST_NAME
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist: {root} is not a prepared dataset (run `bionemo-wds prepare`)")
    manifest = json.loads(path.read_text())
    if manifest.get("format") != FORMAT_NAME:
        raise ValueError(f"{path} is not a bionemo-wds manifest")
    if manifest.get("format_version") not in READABLE_VERSIONS:
        raise ValueError(
            f"{path} has format version {manifest.get('format_version')}; this bionemo-wds reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}"
        )
    return manifest
