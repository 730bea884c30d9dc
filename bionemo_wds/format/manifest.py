"""The manifest and shard names: what a prepared dataset holds, as ``<root>/manifest.json``.

Format versions (``format_version``; the shard bytes are the same in all of them):

1. records with plain ``tokens`` (`format.records`), a manifest with each shard's path, sample
   and token counts, size and sha256;
2. version 1 with zstd-compressed ``tokens`` (``params.codec`` is ``"zstd"``; each record says so
   too): what ``--compress zstd`` wrote before version 3;
3. version 1 or 2 (for either codec: ``params.codec`` says which) plus each shard's record index
   ``records`` in its manifest entry, as JSON columns: per record its data offset in the tar, size,
   window count and crc32 (`format.record_index`);
4. version 3 with the record index moved out of the manifest into one binary file
   per split, ``<split>/record-index.npy`` (`format.split_index_file`): each split entry lists it as
   ``"record_index": {"path", "records", "bytes", "sha256"}``, each shard entry says how many of
   its rows are the shard's (``"n_records"``, in place of ``records``). At 100,000 shards of
   2048 records that is a manifest of tens of MB instead of 6.3 GB, and 20 bytes per record that
   the loader memory-maps instead of ~27 GB of parsed JSON.
5. (``prepare --layout sequences``) version 4 holding the sequence layout: ``params.layout``
   ``"sequences"``; every base of a split stored once, as pieces of ``window_length`` bases of
   whole sequences in a seeded sequence order (windows are cut at load), and each split entry
   lists its sequence index file, ``"sequence_index": {"path", "sequences", "bytes", "sha256"}``
   (`format.sequence_index`). The windows layout was still written as version 4.
6. (written now, both layouts) version 5 whose split entries name no sequences: the names are in
   the sequence table alone (``sequences.tsv``, `format.sequence_table`), which version 6 requires
   (``"sequence_table"``). Versions 3-5 named them twice (``seq_ids`` in each split entry, and the
   table where it exists); `sequence_table.split_names` reads them for any version.

Since version 3 the loader checks every record against its index as it decodes, `verify` checks
all of it (and, in version 4, the index file against its listed size and sha256). One new version
for both codecs rather than one per codec: the codec has been in ``params`` (and in each record)
since version 1, so a second number per feature would say nothing new. Readers take every version
in `READABLE_VERSIONS`; a dataset of version 1 or 2 has no record index, so its records are decoded
without per-record checks and `verify` says so.

Versions 3-5 also name each split's sequences in its entry, ``seq_ids`` (in input order: a key added
without a new version, as no reader needs it; datasets written before it lack it).
`read_manifest` gives a `Manifest` (`format.manifest_types`: typed objects, parsed by the reader
registered for the file's version in `READERS`; `Manifest.to_json` is the JSON again, key for key),
and refuses a manifest without what every reader does need (`REQUIRED_PARAMS`, ...) with a
`ManifestError` naming the file. Writers (`prepare`) build the manifest as a JSON object and
`write_manifest` it (a `Manifest` too).
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
from collections.abc import Container, Iterable
from typing import Any

from bionemo_wds.errors import ManifestError, refusal_named
from bionemo_wds.format.manifest_types import (
    COMPRESSED_FORMAT_VERSION,
    FORMAT_NAME,
    FORMAT_VERSION,
    INDEX_FILE_FORMAT_VERSION,
    INDEX_FILE_SHARD_KEY,
    INDEX_FILE_SPLIT_KEY,
    INDEXED_FORMAT_VERSION,
    READABLE_VERSIONS,
    READERS,
    REQUIRED_PARAMS,
    REQUIRED_SHARD_KEYS,
    REQUIRED_SPLIT_KEYS,
    Manifest,
    Params,
    RecordIndexEntry,
    SequenceIndexEntry,
    ShardInfo,
    SplitInfo,
    reader,
)
from bionemo_wds.format.record_index import RecordIndex, paused_gc
from bionemo_wds.format.split_index_file import record_index_path, write_record_index
from bionemo_wds.format.tar import index_shard
from bionemo_wds.format.write_errors import writing_output
from bionemo_wds.storage.store import Store

__all__ = [
    "CASE_MODES",
    "COMPRESSED_FORMAT_VERSION",
    "DEFAULT_PREFIX",
    "FORMAT_NAME",
    "FORMAT_VERSION",
    "INDEXED_FORMAT_VERSION",
    "INDEX_FILE_SHARD_KEY",
    "INDEX_FILE_SPLIT_KEY",
    "MANIFEST_NAME",
    "READABLE_VERSIONS",
    "READERS",
    "REQUIRED_PARAMS",
    "REQUIRED_SHARD_KEYS",
    "REQUIRED_SPLIT_KEYS",
    "Manifest",
    "ManifestError",
    "Params",
    "RecordIndexEntry",
    "SequenceIndexEntry",
    "ShardInfo",
    "SplitInfo",
    "complete_record_index",
    "dumps_manifest",
    "has_record_index",
    "read_manifest",
    "reader",
    "shard_name",
    "stored_case",
    "unlisted_shards",
    "write_index_files",
    "write_manifest",
]

MANIFEST_NAME = "manifest.json"
DEFAULT_PREFIX = "wdshards"
#: How bases are stored (``params.case``): ``keep`` the source's case (soft-masked repeats stay
#: lower case), ``upper`` every base upper-cased (all that was written before the option existed).
CASE_MODES = ("keep", "upper")
# `ManifestError` is defined in `errors` (`format.split_index_file` raises it too) and imported from here as before


def shard_name(index: int, prefix: str = DEFAULT_PREFIX) -> str:
    """File name of shard `index` of a split."""
    return f"{prefix}-{index:06d}.tar"


def unlisted_shards(split: str, names: Iterable[str], prefix: str, listed: Container[str]) -> list[str]:
    """``<split>/<name>`` of the shard files among `names` (a split folder's listing) that the
    manifest does not list (`listed`: its ``path`` entries), sorted."""
    # one compiled pattern for the whole listing (`fnmatch.fnmatch` per name: 0.2 s for 100,000 shards)
    matching = fnmatch.filter(names, f"{prefix}-*.tar")
    return sorted(rel for rel in (f"{split}/{name}" for name in matching) if rel not in listed)


def has_record_index(manifest: Manifest | dict[str, Any]) -> bool:
    """Does this manifest's version give every shard a record index?"""
    if isinstance(manifest, Manifest):
        return manifest.has_record_index
    return int(manifest.get("format_version", 0)) >= INDEXED_FORMAT_VERSION


# a JSON list of numbers as `json.dumps(indent=...)` writes it, one number per line (a string
# cannot hold a raw newline, so this only ever matches a list)
_NUMBER_LIST = re.compile(r"\[\n[\s\d.,eE+-]*\]")
# a JSON list of strings as `json.dumps(indent=...)` writes it, one string per line
_STRING_LIST = re.compile(r'\[\n(?:[ ]*"(?:[^"\\\n]|\\.)*",?\n)+[ ]*\]')


def dumps_manifest(obj: dict[str, Any]) -> str:
    """JSON text of a manifest: indented, but lists of numbers (the index columns) and of strings
    (each split's `seq_ids`) on one line."""
    text = json.dumps(obj, indent=1, sort_keys=False)
    text = _NUMBER_LIST.sub(lambda m: "".join(m.group(0).split()), text)
    return _STRING_LIST.sub(lambda m: json.dumps(json.loads(m.group(0)), separators=(",", ":")), text) + "\n"


def complete_record_index(root: str | os.PathLike[str] | Store, manifest: dict[str, Any]) -> int:
    """Give every shard entry of a manifest being written (version 3 or 4) its record index
    (``records``): entries without one (a shard `prepare` did not write in this run but reused,
    finished by a killed run) are indexed from the shard file, which must match the entry's size and
    sha256. A version-4 split already written (its ``record_index`` listed, no entry carrying
    ``records``: a manifest as read) is left as it is. Returns how many entries were indexed."""
    if not has_record_index(manifest):
        return 0
    store = root if isinstance(root, Store) else Store(root)
    as_file = int(manifest["format_version"]) >= INDEX_FILE_FORMAT_VERSION
    filled = 0
    for info in manifest.get("splits", {}).values():
        if as_file and not _to_write(info):
            continue
        for shard in info["shards"]:
            records = shard.get("records")
            if records is not None:
                if as_file and not isinstance(records, RecordIndex):
                    shard["records"] = RecordIndex.from_dict(records)
                elif not as_file and isinstance(records, RecordIndex):
                    shard["records"] = records.as_dict()
                continue
            with store.open(shard["path"]) as stream:
                size, sha, index = index_shard(store.url(shard["path"]), stream)
            if (size, sha) != (shard["bytes"], shard["sha256"]):
                raise ManifestError(
                    f"{store.url(shard['path'])}: {size} bytes, sha256 {sha[:12]}..., but the manifest "
                    f"entry being written says {shard['bytes']} bytes, sha256 {str(shard['sha256'])[:12]}..."
                )
            shard["records"] = index if as_file else index.as_dict()
            filled += 1
    return filled


def _to_write(info: dict[str, Any]) -> bool:
    """Is this version-4 split's index file still to be written (no ``record_index`` yet, or shard
    entries carrying their ``records``)?"""
    return INDEX_FILE_SPLIT_KEY not in info or any("records" in shard for shard in info["shards"])


def write_index_files(store: Store, manifest: dict[str, Any]) -> None:
    """Write the index file of every split of a version-4 manifest that needs one (`_to_write`)
    from its shard entries' ``records`` (`complete_record_index` gave every entry one), then put
    ``n_records`` in their place and the file's ``record_index`` entry before the split's shards.
    A file the OS refuses to write is an `errors.OutputWriteError` naming it."""
    for split, info in manifest["splits"].items():
        if not _to_write(info):
            continue
        indexes = [shard["records"] for shard in info["shards"]]
        rel = record_index_path(split)
        with writing_output(store.url(rel), f"the record index of split {split}", store.root):
            entry = write_record_index(store, split, indexes)
        for shard, index in zip(info["shards"], indexes):
            del shard["records"]
            shard[INDEX_FILE_SHARD_KEY] = len(index)
        shards = info.pop("shards")
        info[INDEX_FILE_SPLIT_KEY] = entry
        info["shards"] = shards


def write_manifest(
    path: str | os.PathLike[str], obj: Manifest | dict[str, Any], storage_options: dict | None = None
) -> None:
    """Write a manifest (or any JSON) so readers see the old file or the whole new one, never a part
    (`path` may be a URL: one object, visible when complete).

    A dataset manifest of a version with a record index is first completed by
    `complete_record_index` (a no-op when the writers filled in every shard), so no such manifest
    is ever written with a shard that lacks its index; for version 4 each split's record index file
    is then written (`write_index_files`), before the manifest that lists it. `obj` becomes what
    the file holds (a `Manifest`: its `Manifest.to_json`). A manifest or index file the OS refuses
    to write (a full disk) is an `errors.OutputWriteError` naming it.
    """
    if isinstance(obj, Manifest):
        obj = obj.to_json()
    where = str(path)
    root, _, name = where.rpartition("/")
    store = Store(root or ".", storage_options, write=True)
    if obj.get("format") == FORMAT_NAME and "splits" in obj:
        complete_record_index(store, obj)
        if int(obj.get("format_version", 0)) >= INDEX_FILE_FORMAT_VERSION:
            write_index_files(store, obj)
    if name != MANIFEST_NAME:  # another JSON file (a run's plan): its caller says what it is
        store.write_text(name, dumps_manifest(obj))
        return
    with writing_output(where, "the manifest, written last", store.root):
        store.write_text(name, dumps_manifest(obj))


def read_manifest(root: str | os.PathLike[str] | Store, storage_options: dict | None = None) -> Manifest:
    """The manifest ``<root>/manifest.json`` of a prepared dataset (a local path or a URL), read by
    the reader of its format version (`Manifest.from_json`); a clear error when it is missing,
    unreadable, foreign or of a version this package does not read."""
    store = root if isinstance(root, Store) else Store(root, storage_options)
    path = store.url(MANIFEST_NAME)
    try:  # the system refusing the file (too many open files, permission denied) is said as that
        with paused_gc(), refusal_named(path):  # a manifest of 100,000 shards is millions of objects (`paused_gc`)
            # the bytes unnamed: json.loads drops them once decoded, before the objects are made
            obj = json.loads(store.read_bytes(MANIFEST_NAME))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path} does not exist: {store.root} is not a prepared dataset (run `bionemo-wds prepare`)"
        ) from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise ManifestError(f"{path} is not valid JSON: {exc}") from exc
    with paused_gc():
        return Manifest.from_json(obj, path)


def stored_case(manifest: Manifest) -> str:
    """How a dataset stores bases, ``"keep"`` or ``"upper"`` (`CASE_MODES`): its ``params.case``, or
    ``"upper"`` for a manifest written before ``--case`` existed (prepare upper-cased every base then)."""
    case = manifest.params.case
    return case if case in CASE_MODES else "upper"
