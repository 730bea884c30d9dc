"""Sketches kept beside a dataset, so that a repeated `leakage` (or ``verify --leakage``) reads no shard.

The first `contains` or `leakage` of a split at some ``--ksize`` and ``--scaled`` sketches every
stored sequence in its pass over the shards (`stored.read_splits`) and keeps the result in
``<root>/sketches/<split>-k<K>-s<S>.npz`` (`Sketches.to_bytes`), listed in the side file
``<root>/sketches/index.json`` with its size, its sha256 and a fingerprint of the split's shards
(their paths and sha256s, as the manifest lists them). A later `leakage` with the same parameters
takes a kept file whose size, sha256 and fingerprint still agree instead of reading the shards; a
split prepared again (other shards) or a damaged file is read afresh. A dataset the caller may not
write to (a read-only directory, a bucket without write access) keeps nothing: one warning, the same
answer. ``prepare`` removes the folder with the rest of a run it replaces (`outdir.clear_ours`).
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Sequence
from typing import Any

from bionemo_wds.errors import BadInputError
from bionemo_wds.format.manifest_types import ShardInfo
from bionemo_wds.homology.sketch import Sketches, SketchParams

#: The folder of kept sketches, at the dataset root.
SKETCH_DIR = "sketches"
#: The side file listing them.
INDEX_PATH = f"{SKETCH_DIR}/index.json"
#: What the side file says it is.
INDEX_FORMAT = "bionemo-wds-sketches"


def cache_key(split: str, params: SketchParams) -> str:
    """The name of a split's kept sketches at `params`."""
    return f"{split}-k{params.ksize}-s{params.scaled}"


def shards_fingerprint(shards: Sequence[ShardInfo]) -> str:
    """The sha256 of the split's shard paths and sha256s, in order: what the sketches were made from."""
    digest = hashlib.sha256()
    for shard in shards:
        digest.update(f"{shard.path}\t{shard.sha256}\n".encode())
    return digest.hexdigest()


def _index(store: Any) -> dict[str, Any]:
    """The side file's entries (none when it is absent or not ours)."""
    try:
        obj = json.loads(store.read_bytes(INDEX_PATH))
    except (OSError, ValueError):
        return {}
    if not isinstance(obj, dict) or obj.get("format") != INDEX_FORMAT or not isinstance(obj.get("sketches"), dict):
        return {}
    return obj["sketches"]


def is_kept(store: Any, shards: Sequence[ShardInfo], split: str, params: SketchParams) -> bool:
    """Does the side file list `split`'s sketches at `params`, made from these shards?"""
    entry = _index(store).get(cache_key(split, params))
    return isinstance(entry, dict) and entry.get("shards") == shards_fingerprint(shards)


def kept_sketches(store: Any, shards: Sequence[ShardInfo], split: str, params: SketchParams) -> Sketches | None:
    """`split`'s kept sketches at `params`, or None when there are none that still agree with the shards
    (and with their listed size and sha256)."""
    entry = _index(store).get(cache_key(split, params))
    if not isinstance(entry, dict) or entry.get("shards") != shards_fingerprint(shards):
        return None
    try:
        data = store.read_bytes(str(entry["path"]))
    except (OSError, KeyError):
        return None
    if len(data) != entry.get("bytes") or hashlib.sha256(data).hexdigest() != entry.get("sha256"):
        return None
    try:
        sketches = Sketches.from_bytes(data, store.url(str(entry["path"])))
    except BadInputError:
        return None
    return sketches if sketches.params == params else None


def keep_sketches(store: Any, shards: Sequence[ShardInfo], split: str, sketches: Sketches) -> bool:
    """Keep `split`'s sketches beside the dataset and list them; False (with one warning) when the
    dataset cannot be written to."""
    key = cache_key(split, sketches.params)
    rel = f"{SKETCH_DIR}/{key}.npz"
    data = sketches.to_bytes()
    try:
        store.makedirs(SKETCH_DIR)
        with store.write(rel) as fh:
            fh.write(data)
        entries = _index(store)
        entries[key] = {
            "path": rel,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "shards": shards_fingerprint(shards),
        }
        store.write_text(INDEX_PATH, json.dumps({"format": INDEX_FORMAT, "sketches": entries}, indent=1) + "\n")
    except (OSError, BadInputError) as exc:
        warnings.warn(f"the sketches of {split} are not kept beside {store.root} ({exc})", stacklevel=2)
        return False
    return True
