"""A split's shard entries as columns: `ShardColumns`, the `SplitInfo.shards` of a read manifest.

Why columns: every rank reads the whole manifest, and a Python object per shard entry (a
`ShardInfo`, its ``extra`` dict, its path and sha256 strings) costs about 400 bytes per shard, most of
it for shards the rank never reads. Here a shard costs its path's bytes (one fixed-width bytes
array), four int64 numbers and 32 bytes of sha256. `ShardColumns` is still the sequence of
`ShardInfo` it replaces (``shards[3].path``, ``len``, iteration, slices, equality with a tuple of
them): an entry is made when it is asked for. Code that looks at one field of every shard asks for
the column (`ShardColumns.values`), not for every entry.

Values stay what the JSON holds: a column whose values are not all plain integers (a damaged
manifest, a ``null``) is kept as the list of its values, and a sha256 that is not 64 lowercase hex
digits keeps the column of strings, so the readers that check them name the same shard and value,
and a manifest read and written again is the same file.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any, overload

import numpy as np

from bionemo_wds.format.json_fields import json_of, split_known

#: The shard entry's keys in `prepare`'s order (`ShardInfo`'s fields, ``extra`` aside).
SHARD_FIELDS = ("path", "n_samples", "n_tokens", "bytes", "sha256", "records", "n_records")
#: The integer columns (kept as int64 arrays when every value is a plain integer).
INT_FIELDS = ("n_samples", "n_tokens", "bytes", "n_records")
#: What a version-4+ entry holds, exactly (the common case, read without a step per entry).
_PLAIN_KEYS = frozenset(("path", "n_samples", "n_tokens", "bytes", "sha256", "n_records"))
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, kw_only=True, slots=True)
class ShardInfo:
    """One shard entry: its file (relative to the dataset root), windows, tokens, size, sha256, and
    its record index: ``n_records`` (version 4: its rows of the split's index file) or ``records``
    (version 3: four JSON columns; while a shard is being written, its `RecordIndex`)."""

    path: str
    n_samples: int
    n_tokens: int
    bytes: int
    sha256: str
    records: Any = None
    n_records: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ShardInfo:
        known, extra = split_known(obj, SHARD_FIELDS)
        return cls(**known, extra=extra)

    def to_json(self) -> dict[str, Any]:
        return json_of(self, SHARD_FIELDS)


def _int_column(values: list[Any]) -> np.ndarray | list[Any]:
    """int64 array of `values` when each is a plain int that fits (not a bool, float or None), else the list."""
    if not values:
        return np.empty(0, dtype=np.int64)
    if set(map(type, values)) != {int} or not (_INT64_MIN <= min(values) and max(values) <= _INT64_MAX):
        return values
    return np.array(values, dtype=np.int64)


def _sha_column(values: list[Any]) -> np.ndarray | list[Any]:
    """(n, 32) uint8 array of 64-digit lowercase hex strings, else the list as it is."""
    if values and (set(map(type, values)) != {str} or set(map(len, values)) != {64}):
        return values
    joined = "".join(values)
    if joined != joined.lower():
        return values
    try:
        return np.frombuffer(bytes.fromhex(joined), dtype=np.uint8).reshape(len(values), 32)
    except ValueError:
        return values


class PathColumn(Sequence[str]):
    """The shards' paths (relative to the dataset root) as one fixed-width bytes array (UTF-8), with
    a lookup of a path's position (`position`: a binary search over them in sorted order)."""

    def __init__(self, paths: Sequence[str]):
        try:
            self._paths = np.array(paths, dtype="S") if len(paths) else np.empty(0, dtype="S1")
        except UnicodeEncodeError:  # names beyond ASCII: stored as UTF-8
            self._paths = np.array([path.encode() for path in paths], dtype="S")
        self._order: np.ndarray | None = None
        self._sorted: bool | None = None

    def __len__(self) -> int:
        return len(self._paths)

    @property
    def array(self) -> np.ndarray:
        """The paths as stored: a fixed-width bytes array (UTF-8), for matching them in numpy."""
        return self._paths

    @overload
    def __getitem__(self, i: int) -> str: ...
    @overload
    def __getitem__(self, i: slice) -> list[str]: ...
    def __getitem__(self, i: int | slice) -> str | list[str]:
        if isinstance(i, slice):
            return [path.decode() for path in self._paths[i].tolist()]
        return bytes(self._paths[i]).decode()

    def __iter__(self) -> Iterator[str]:
        return (path.decode() for path in self._paths.tolist())

    def position(self, path: str) -> int | None:
        """The position of `path` among the shards (the first of equal ones), None when not there."""
        if self._sorted is None:
            self._sorted = bool(np.all(self._paths[1:] >= self._paths[:-1]))
            if not self._sorted:
                self._order = np.argsort(self._paths, kind="stable")
        key = path.encode()
        ordered = self._paths if self._order is None else self._paths[self._order]
        at = int(np.searchsorted(ordered, key))
        if at == len(ordered) or ordered[at] != key:
            return None
        return at if self._order is None else int(self._order[at])


class ShardColumns(Sequence[ShardInfo]):
    """A split's shard entries (`ShardInfo`) as columns; an entry is made when asked for."""

    def __init__(self, columns: Mapping[str, Any], n: int, extra: Mapping[int, dict[str, Any]] | None = None):
        self._n = n
        self.paths = columns["path"] if isinstance(columns["path"], PathColumn) else PathColumn(columns["path"])
        self._columns = {name: columns.get(name) for name in SHARD_FIELDS if name != "path"}
        self._extra = dict(extra or {})

    @classmethod
    def from_json(cls, entries: Sequence[Mapping[str, Any]]) -> ShardColumns:
        """The columns of a split's ``shards`` list (each entry holding at least the required keys)."""
        if entries and set(map(len, entries)) == {6}:  # what prepare writes? then a pass in C per column
            names = [name for name in SHARD_FIELDS if name != "records"]
            try:
                lists: dict[str, list[Any]] = {name: list(map(itemgetter(name), entries)) for name in names}
            except KeyError:  # not these six keys: the general path
                pass
            else:
                return cls._of_lists(lists, len(entries), {})
        lists = {name: [] for name in SHARD_FIELDS}
        extra: dict[int, dict[str, Any]] = {}
        for number, entry in enumerate(entries):
            for name in SHARD_FIELDS:
                lists[name].append(entry.get(name))
            if not entry.keys() <= _PLAIN_KEYS | {"records"}:
                extra[number] = {key: value for key, value in entry.items() if key not in SHARD_FIELDS}
        return cls._of_lists(lists, len(entries), extra)

    @classmethod
    def of(cls, shards: Iterable[ShardInfo]) -> ShardColumns:
        """The columns of `ShardInfo` entries (a split being written)."""
        if isinstance(shards, ShardColumns):
            return shards
        shards = list(shards)
        lists = {name: [getattr(shard, name) for shard in shards] for name in SHARD_FIELDS}
        extra = {n: dict(shard.extra) for n, shard in enumerate(shards) if shard.extra}
        return cls._of_lists(lists, len(shards), extra)

    @classmethod
    def _of_lists(cls, lists: dict[str, list[Any]], n: int, extra: dict[int, dict[str, Any]]) -> ShardColumns:
        columns: dict[str, Any] = {}
        for name, values in lists.items():
            if name in ("records", "n_records") and all(value is None for value in values):
                columns[name] = None  # absent from every entry
            elif name in INT_FIELDS:
                columns[name] = _int_column(values)
            elif name == "sha256":
                columns[name] = _sha_column(values)
            elif name == "path" and all(type(value) is str for value in values):
                columns[name] = PathColumn(values)
            else:
                columns[name] = values
        if not isinstance(columns["path"], PathColumn):  # a damaged manifest: paths that are not strings
            raise TypeError("shard paths must be strings")
        return cls(columns, n, extra)

    def values(self, name: str) -> np.ndarray | list[Any]:
        """The column `name` of every shard: an int64 array when every value is a plain integer
        (``n_samples``, ``n_tokens``, ``bytes``, ``n_records``), else the list of the values as read
        (None for a key no entry has)."""
        if name == "path":
            return list(self.paths)
        column = self._columns[name]
        if column is None:
            return [None] * self._n
        if name == "sha256" and isinstance(column, np.ndarray):
            hexed = column.tobytes().hex()
            return [hexed[at : at + 64] for at in range(0, len(hexed), 64)]
        return column

    def _value(self, name: str, i: int) -> Any:
        column = self._columns[name]
        if column is None:
            return None
        if isinstance(column, np.ndarray):
            return column[i].tobytes().hex() if name == "sha256" else int(column[i])
        return column[i]

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, i: int) -> ShardInfo: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[ShardInfo, ...]: ...
    def __getitem__(self, i: int | slice) -> ShardInfo | tuple[ShardInfo, ...]:
        if isinstance(i, slice):
            return tuple(self[n] for n in range(*i.indices(self._n)))
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError("shard index out of range")
        return ShardInfo(
            path=self.paths[i],
            n_samples=self._value("n_samples", i),
            n_tokens=self._value("n_tokens", i),
            bytes=self._value("bytes", i),
            sha256=self._value("sha256", i),
            records=self._value("records", i),
            n_records=self._value("n_records", i),
            extra=dict(self._extra.get(i, {})),
        )

    def __iter__(self) -> Iterator[ShardInfo]:
        return (self[i] for i in range(self._n))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str | bytes):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ShardColumns({self._n} shards)"

    def position(self, path: str) -> int | None:
        """The number of the shard at `path` (relative to the root), None when the split has none there."""
        return self.paths.position(path)

    def to_json(self) -> list[dict[str, Any]]:
        """The ``shards`` list `prepare` writes."""
        return [shard.to_json() for shard in self]


def shard_values(shards: Sequence[ShardInfo], name: str) -> np.ndarray | list[Any]:
    """The field `name` of every shard entry of `shards` (`ShardColumns.values`; for other sequences of
    entries, the list of their values): one column, no entry made per shard."""
    if isinstance(shards, ShardColumns):
        return shards.values(name)
    return [getattr(shard, name) for shard in shards]
