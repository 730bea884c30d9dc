"""The manifest as typed objects: `Manifest`, `Params`, `SplitInfo`, `ShardInfo`, `RecordIndexEntry`,
`SequenceIndexEntry`.

`Manifest.from_json` turns the JSON object of a ``manifest.json`` into them, by a reader chosen by
its ``format_version`` (`READERS`, filled by `reader`: one per version, see `format.manifest` for
what each version holds); `Manifest.to_json` gives the JSON object back, key for key and in the
order `prepare` writes them, so a manifest read and written again is the same file. Keys a reader
does not know are kept in each object's ``extra`` (and written back after the known ones): nothing
is lost on a round trip, and an older reader of a newer, compatible manifest keeps what it cannot use.
A split's shard entries are held as columns (`format.shard_columns`: a `ShardColumns` is the
sequence of `ShardInfo` entries, each made when asked for), so a rank holds about 90 bytes per
shard it does not read instead of a Python object per entry.

Values are those of the JSON (a number stays the number the file holds; nothing is converted here),
checked only for what every reader needs (`REQUIRED_PARAMS`, ...: a `ManifestError` naming the
file and the first missing key); the readers of the record index check their own parts
(`format.split_index_file`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from bionemo_wds.errors import ManifestError
from bionemo_wds.format.json_fields import json_of, known_fields, split_known
from bionemo_wds.format.shard_columns import ShardColumns, ShardInfo

FORMAT_NAME = "bionemo-wds"
#: The version `prepare` writes (both layouts, both codecs): version 5 whose sequence names are in
#: the sequence table alone (``sequences.tsv``, listed as `SEQUENCE_TABLE_KEY`, which it requires):
#: its split entries have no ``seq_ids``, so every rank's manifest is smaller.
TABLE_FORMAT_VERSION = 6
#: The manifest's top-level key listing the sequence table (`format.sequence_table`).
SEQUENCE_TABLE_KEY = "sequence_table"
#: The version whose record index is a file per split (`format.split_index_file`).
INDEX_FILE_FORMAT_VERSION = 4
#: What the manifest's ``record_index`` entry of a split holds.
INDEX_ENTRY_KEYS = ("path", "records", "bytes", "sha256")
#: The version that has the sequence layout (``params.layout`` ``"sequences"``; `format.sequence_index`).
SEQUENCE_FORMAT_VERSION = 5
#: The layouts ``params.layout`` names: ``windows`` (versions 1-4, and 5's absent key), ``sequences``.
LAYOUTS = ("windows", "sequences")
#: What the manifest's ``sequence_index`` entry of a split holds.
SEQUENCE_ENTRY_KEYS = ("path", "sequences", "bytes", "sha256")
#: The version `prepare` writes.
FORMAT_VERSION = TABLE_FORMAT_VERSION
#: The first version with a record index (in the shard entries; since version 4 in a file per split).
INDEXED_FORMAT_VERSION = 3
#: Version 2 = version 1 with a compressed ``tokens`` field (``codec`` says how); what
#: ``--compress zstd`` wrote before version 3 (kept for readers of such datasets).
COMPRESSED_FORMAT_VERSION = 2
#: The ``params`` every reader relies on (all versions have them).
REQUIRED_PARAMS = (
    "seq_length",
    "stride",
    "window_length",
    "tail",
    "tags",
    "max_tag_bytes",
    "seed",
    "windows_per_record",
    "prefix",
)
#: What every split entry and every shard entry holds (all versions).
REQUIRED_SPLIT_KEYS = ("n_samples", "shards")
REQUIRED_SHARD_KEYS = ("path", "n_samples", "n_tokens", "bytes", "sha256")
#: What version 4 adds to every split entry and every shard entry (its record index file, its rows).
INDEX_FILE_SPLIT_KEY, INDEX_FILE_SHARD_KEY = "record_index", "n_records"
#: What version 5 adds to every split entry: its sequence index file.
SEQUENCE_INDEX_SPLIT_KEY = "sequence_index"
_SHARD_KEYS = frozenset(REQUIRED_SHARD_KEYS)
_INDEX_FILE_SHARD_KEYS = frozenset((*REQUIRED_SHARD_KEYS, INDEX_FILE_SHARD_KEY))


@dataclass(frozen=True, kw_only=True)
class Params:
    """``params``: how the windows and records were made (all but the `REQUIRED_PARAMS` may be absent
    in a manifest written before they existed: None then)."""

    seq_length: int
    stride: int
    window_length: int
    tail: str
    tags: str
    max_tag_bytes: int
    case: str | None = None
    seed: int
    #: How the ratios split the sequences (``seeded`` or ``longest-first``); None: lists, file names or
    #: the source decided the split, or a manifest written before the rule was named (``longest-first``).
    split_rule: str | None = None
    samples_per_shard: int | None = None
    windows_per_record: int
    records_by: str | None = None
    prefix: str
    codec: str = "none"  # every version has it
    length_buckets: list[int] | None = None
    source: dict[str, Any] | None = None
    group_by: str | None = None
    split_at_n: dict[str, Any] | None = None
    tokenizer: dict[str, Any] | None = None
    #: ``windows`` (versions 1-4: the key is absent) or ``sequences`` (version 5: pieces of whole
    #: sequences, windows cut at load; `format.sequence_index`)
    layout: str = "windows"
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> Params:
        known, extra = split_known(obj, _PARAM_KEYS)
        return cls(**known, extra=extra)

    def to_json(self) -> dict[str, Any]:
        return json_of(self, _PARAM_KEYS)


@dataclass(frozen=True, kw_only=True)
class RecordIndexEntry:
    """A version-4 split's ``record_index``: its file (relative to the root), rows, size and sha256."""

    path: str
    records: int
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "records": self.records, "bytes": self.bytes, "sha256": self.sha256}


@dataclass(frozen=True, kw_only=True)
class SequenceIndexEntry:
    """A version-5 split's ``sequence_index``: its file (relative to the root), rows, size and sha256."""

    path: str
    sequences: int
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sequences": self.sequences, "bytes": self.bytes, "sha256": self.sha256}


@dataclass(frozen=True, kw_only=True)
class SplitInfo:
    """One split: its windows, sequences, bases, tokens, its shards in order and (version 4) its
    record index file."""

    n_samples: int
    n_sequences: int | None = None
    n_bases: int | None = None
    n_tokens: int | None = None
    length_mix: dict[str, Any] | None = None
    #: its sequences' names, in input order: versions 3-5 only (since version 6 in the sequence
    #: table alone: `format.sequence_table.split_names` reads them for any version)
    seq_ids: list[str] | None = None
    samples_per_shard: int | None = None
    sequence_index: SequenceIndexEntry | None = None  # version 5 (the sequence layout)
    record_index: RecordIndexEntry | None = None
    #: its shard entries in order: a `ShardColumns` (entries given as a tuple or list become one)
    shards: Sequence[ShardInfo]
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.shards, ShardColumns):
            object.__setattr__(self, "shards", ShardColumns.of(self.shards))

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> SplitInfo:
        known, extra = split_known(obj, _SPLIT_KEYS)
        known["shards"] = ShardColumns.from_json(known["shards"])
        entry = known.get("record_index")
        if entry is not None:
            if isinstance(entry, dict) and all(key in entry for key in INDEX_ENTRY_KEYS) and len(entry) == 4:
                known["record_index"] = RecordIndexEntry(**entry)
            else:  # kept as it is: `index_file` names what is wrong with it when the index is read
                del known["record_index"]
                extra = {**extra, "record_index": entry}
        entry = known.get(SEQUENCE_INDEX_SPLIT_KEY)
        if entry is not None:
            if isinstance(entry, dict) and all(key in entry for key in SEQUENCE_ENTRY_KEYS) and len(entry) == 4:
                known[SEQUENCE_INDEX_SPLIT_KEY] = SequenceIndexEntry(**entry)
            else:  # kept as it is: `read_sequence_index` says the split has no complete entry
                del known[SEQUENCE_INDEX_SPLIT_KEY]
                extra = {**extra, SEQUENCE_INDEX_SPLIT_KEY: entry}
        return cls(**known, extra=extra)

    def to_json(self) -> dict[str, Any]:
        out = json_of(self, _SPLIT_KEYS)
        if self.sequence_index is not None:
            out[SEQUENCE_INDEX_SPLIT_KEY] = self.sequence_index.to_json()
        if self.record_index is not None:
            out["record_index"] = self.record_index.to_json()
        out["shards"] = ShardColumns.of(self.shards).to_json()
        if "record_index" in self.extra or SEQUENCE_INDEX_SPLIT_KEY in self.extra:  # a damaged entry: before the shards
            out["shards"] = out.pop("shards")
        return out


@dataclass(frozen=True, kw_only=True)
class Manifest:
    """A prepared dataset's ``manifest.json``."""

    format: str = FORMAT_NAME
    format_version: int
    package_version: str | None = None
    request: dict[str, Any] | None = None
    params: Params
    splits: dict[str, SplitInfo]
    skipped: list[Any] | None = None
    unassigned_sequences: int | None = None
    #: The sequence table's entry (`format.sequence_table`): path, rows, bytes, sha256; None before it existed.
    sequence_table: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Any, where: str) -> Manifest:
        """The manifest of a JSON object read from `where` (a path or URL, for errors), by the reader
        of its ``format_version`` (`READERS`); a `ManifestError` naming `where` when it is not a
        manifest, of a version no reader takes, or lacks what every reader needs."""
        if not isinstance(obj, dict) or obj.get("format") != FORMAT_NAME:
            raise ManifestError(f"{where} is not a bionemo-wds manifest")
        version = obj.get("format_version")
        read = READERS.get(int(version)) if isinstance(version, int | float) and version == int(version) else None
        if read is None:
            raise ManifestError(
                f"{where} has format version {version}; this bionemo-wds reads versions "
                f"{', '.join(map(str, READABLE_VERSIONS))}"
            )
        return read(obj, where)

    def to_json(self) -> dict[str, Any]:
        """The JSON object `write_manifest` writes: the keys `from_json` read, in `prepare`'s order."""
        out = json_of(self, _MANIFEST_KEYS)
        out["params"] = self.params.to_json()
        out["splits"] = {name: split.to_json() for name, split in self.splits.items()}
        return out

    @property
    def has_record_index(self) -> bool:
        """Does this manifest's version give every shard a record index?"""
        return self.format_version >= INDEXED_FORMAT_VERSION


_PARAM_KEYS = known_fields(Params)
_SPLIT_KEYS = known_fields(SplitInfo)
_MANIFEST_KEYS = known_fields(Manifest)

#: The manifest reader of each format version: ``READERS[version](json_object, where)``.
READERS: dict[int, Callable[[dict[str, Any], str], Manifest]] = {}


def reader(*versions: int) -> Callable[[Callable[[dict[str, Any], str], Manifest]], Callable[..., Manifest]]:
    """Register the decorated function as the manifest reader of `versions`."""

    def register(read: Callable[[dict[str, Any], str], Manifest]) -> Callable[[dict[str, Any], str], Manifest]:
        for version in versions:
            READERS[version] = read
        return read

    return register


def _parse(obj: dict[str, Any], where: str, indexed_by_file: bool, sequences: bool = False) -> Manifest:
    missing = missing_key(obj, indexed_by_file, sequences)
    if missing is None and obj.get("format_version") == TABLE_FORMAT_VERSION and SEQUENCE_TABLE_KEY not in obj:
        missing = SEQUENCE_TABLE_KEY  # where version 6 keeps the names of the sequences
    if missing is not None:
        raise ManifestError(f"{where} is damaged: it has no {missing} (prepare the dataset again)")
    known, extra = split_known(obj, _MANIFEST_KEYS)
    known["params"] = Params.from_json(known["params"])
    known["splits"] = {name: SplitInfo.from_json(info) for name, info in known["splits"].items()}
    return Manifest(**known, extra=extra)


@reader(1, 2)
def _read_unindexed(obj: dict[str, Any], where: str) -> Manifest:
    """Versions 1 and 2: no record index (version 2: the records' ``tokens`` zstd-compressed)."""
    return _parse(obj, where, indexed_by_file=False)


@reader(INDEXED_FORMAT_VERSION)
def _read_json_index(obj: dict[str, Any], where: str) -> Manifest:
    """Version 3: each shard entry's record index as JSON columns (``records``)."""
    return _parse(obj, where, indexed_by_file=False)


@reader(INDEX_FILE_FORMAT_VERSION)
def _read_index_file(obj: dict[str, Any], where: str) -> Manifest:
    """Version 4: each split's ``record_index`` file, each shard entry's ``n_records``."""
    return _parse(obj, where, indexed_by_file=True)


@reader(SEQUENCE_FORMAT_VERSION, TABLE_FORMAT_VERSION)
def _read_sequence_layout(obj: dict[str, Any], where: str) -> Manifest:
    """Version 5: version 4 that may hold the sequence layout (``params.layout``; each split of a
    sequence-layout dataset then lists its ``sequence_index`` file); version 6: version 5 with the
    sequence table required and no ``seq_ids`` (`_parse` checks the one)."""
    params = obj.get("params")
    layout = params.get("layout", "windows") if isinstance(params, dict) else "windows"
    if layout not in LAYOUTS:
        raise ManifestError(f"{where} has params.layout {layout!r}; this bionemo-wds reads {', '.join(LAYOUTS)}")
    return _parse(obj, where, indexed_by_file=True, sequences=layout == "sequences")


READABLE_VERSIONS = tuple(sorted(READERS))


def missing_key(manifest: dict[str, Any], indexed_by_file: bool, sequences: bool = False) -> str | None:
    """The first key readers need that `manifest` lacks (`params.prefix`, `splits.train.shards[0].bytes`), or None."""
    params, splits = manifest.get("params"), manifest.get("splits")
    if not isinstance(params, dict):
        return "params"
    for key in REQUIRED_PARAMS:
        if key not in params:
            return f"params.{key}"
    if not isinstance(splits, dict):
        return "splits"
    split_keys = (*REQUIRED_SPLIT_KEYS, INDEX_FILE_SPLIT_KEY) if indexed_by_file else REQUIRED_SPLIT_KEYS
    if sequences:
        split_keys = (*split_keys, SEQUENCE_INDEX_SPLIT_KEY)
    shard_keys = (*REQUIRED_SHARD_KEYS, INDEX_FILE_SHARD_KEY) if indexed_by_file else REQUIRED_SHARD_KEYS
    all_keys = _INDEX_FILE_SHARD_KEYS if indexed_by_file else _SHARD_KEYS
    for name, info in splits.items():
        if not isinstance(info, dict):
            return f"splits.{name}"
        for key in split_keys:
            if key not in info:
                return f"splits.{name}.{key}"
        if not isinstance(info["shards"], list):
            return f"splits.{name}.shards list"
        shards = info["shards"]
        if set(map(type, shards)) <= {dict} and all(map(all_keys.issubset, shards)):
            continue  # every entry has every key (what nearly every split is): checked without a step per entry
        for i, shard in enumerate(shards):
            if isinstance(shard, dict) and all_keys <= shard.keys():
                continue  # all there (what nearly every entry is): no need to look for the first missing
            for key in shard_keys:
                if not isinstance(shard, dict) or key not in shard:
                    return f"splits.{name}.shards[{i}].{key}"
    return None
