"""A blend: which prepared datasets to mix, how much of each, and for which split.

A blend names several dataset roots written by ``bionemo-wds prepare`` (a directory or URL holding
``manifest.json``), each with a weight and a split. It comes in two forms:

* the data-module form, ``datasets=[{"path": "data/ecoli", "weight": 0.6}, ...]`` with optional
  ``"split"`` (default ``"train"``) and ``"name"`` (for logs; default the path's last component),
  read by `parse_datasets`. Paths are kept exactly as given (local paths relative to the working
  directory, URLs such as ``s3://bucket/run`` untouched);
* Evo2's ``dataset_config`` YAML (bionemo-evo2 ``--dataset-config``), a list of entries with
  ``dataset_prefix``, ``dataset_split``, ``dataset_weight`` and optional ``dataset_path``, read by
  `read_blend`, so a blend written for Evo2 can be pointed at our shards unchanged but for the paths.

Splits are our names ``train``, ``val`` and ``test``; Evo2's ``validation`` (and ``val``) mean
``val``. Weights are any finite positive numbers and need not sum to 1: `shares` normalises the
weights of one split to fractions that do, as Evo2 renormalises each split's weights. Every
refusal is a `BlendError` (a `ValueError`) naming the entry and, for a file, the file and line.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from bionemo_wds.errors import BlendError
from bionemo_wds.storage.location import protocol_of

#: Our split names, in order.
SPLITS = ("train", "val", "test")
#: The split names a blend may use, and ours they stand for.
SPLIT_NAMES = {"train": "train", "val": "val", "validation": "val", "test": "test"}
#: Keys of a data-module entry: required, then optional.
DATASET_KEYS = ("path", "weight")
DATASET_OPTIONAL_KEYS = ("split", "name")
#: Keys of an Evo2 YAML entry: required, then optional.
EVO2_KEYS = ("dataset_prefix", "dataset_split", "dataset_weight")
EVO2_OPTIONAL_KEYS = ("dataset_path",)


def split_name(split: str) -> str:
    """Our name (``train``/``val``/``test``) for a blend's split name, which may also be ``validation``."""
    if not isinstance(split, str) or split not in SPLIT_NAMES:
        raise BlendError(f"split {split!r} is not one of {', '.join(SPLIT_NAMES)}")
    return SPLIT_NAMES[split]


def last_component(path: str) -> str:
    """The last ``/``-separated component of a path or URL (``s3://b/runs/ecoli/`` -> ``ecoli``), for names."""
    return path.rstrip("/").rsplit("/", 1)[-1] or path


@dataclass(frozen=True)
class BlendEntry:
    """One dataset of a blend: its root `path` (local path or URL), relative `weight`, `split` and `name`.

    Checked on construction, so every entry anywhere is valid: `split` is normalised to ours
    (``validation`` -> ``val``), `weight` is a finite number > 0 (a weight of 0 would never be read,
    so it is refused rather than silently dropped), `name` defaults to the path's last component.
    """

    path: str
    weight: float
    split: str = "train"
    name: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.path, str) or not self.path.strip():
            raise BlendError(f"path must be a non-empty string, not {self.path!r}")
        weight = self.weight
        if isinstance(weight, bool) or not isinstance(weight, (int, float)):
            raise BlendError(f"weight must be a number, not {weight!r}")
        if not math.isfinite(weight) or weight <= 0:
            hint = " (a weight of 0 would never be read: leave the entry out)" if weight == 0 else ""
            raise BlendError(f"weight must be a finite number > 0, not {weight!r}{hint}")
        if not isinstance(self.name, str):
            raise BlendError(f"name must be a string, not {self.name!r}")
        object.__setattr__(self, "weight", float(weight))
        object.__setattr__(self, "split", split_name(self.split))
        object.__setattr__(self, "name", self.name or last_component(self.path))


def _check_keys(entry: Any, required: Sequence[str], optional: Sequence[str]) -> Mapping[str, Any]:
    """`entry` as a mapping with all `required` keys and no key outside `required` + `optional`."""
    if not isinstance(entry, Mapping):
        raise BlendError(f"must be a mapping with keys {', '.join(required)}, not {type(entry).__name__} {entry!r}")
    unknown = [str(key) for key in entry if key not in (*required, *optional)]
    if unknown:
        raise BlendError(
            f"unknown key(s) {', '.join(map(repr, unknown))} (allowed: {', '.join((*required, *optional))})"
        )
    missing = [key for key in required if key not in entry]
    if missing:
        raise BlendError(f"missing key(s) {', '.join(map(repr, missing))}")
    return entry


def _no_repeats(entries: Sequence[BlendEntry], where: Sequence[str]) -> None:
    """Refuse the same dataset twice in one split: a mixer keyed by dataset would silently keep only one."""
    seen: dict[tuple[str, str], int] = {}
    for i, entry in enumerate(entries):
        first = seen.setdefault((entry.split, entry.path.rstrip("/") or entry.path), i)
        if first != i:
            raise BlendError(
                f"{where[i]} repeats {where[first]} ({entry.path!r}, split {entry.split!r}); "
                "give it once with the sum of the weights"
            )


def parse_datasets(datasets: Sequence[Mapping[str, Any]]) -> list[BlendEntry]:
    """The blend of the data-module form ``[{"path": ..., "weight": ..., "split": ..., "name": ...}, ...]``.

    ``path`` and ``weight`` are required; ``split`` defaults to ``train``, ``name`` to the path's last
    component. Paths are kept as given: a relative local path is relative to the working directory,
    a URL (``s3://``, ``https://``, any ``proto://``) is untouched. Misspelt keys are refused rather
    than ignored, so ``"wieght"`` cannot silently fall back to anything.
    """
    if isinstance(datasets, (str, bytes)) or not isinstance(datasets, Sequence):
        raise BlendError(f"datasets must be a list of {{'path': ..., 'weight': ...}} mappings, not {datasets!r}")
    if not datasets:
        raise BlendError("datasets is empty: name at least one dataset to read")
    entries: list[BlendEntry] = []
    where: list[str] = []
    for i, raw in enumerate(datasets):
        label = f"datasets[{i}]"
        try:
            item = _check_keys(raw, DATASET_KEYS, DATASET_OPTIONAL_KEYS)
            label = f"datasets[{i}] ({item['path']!r})"
            path = os.fspath(item["path"]) if isinstance(item["path"], os.PathLike) else item["path"]
            entry = BlendEntry(path, item["weight"], item.get("split", "train"), item.get("name", ""))
        except BlendError as exc:
            raise BlendError(f"{label}: {exc}") from None
        entries.append(entry)
        where.append(label)
    _no_repeats(entries, where)
    return entries


def _is_absolute(location: str) -> bool:
    """Is `location` a URL (any ``proto://``) or an absolute local path, i.e. not to be joined onto anything?"""
    return bool(protocol_of(location)) or os.path.isabs(location)


def _evo2_path(item: Mapping[str, Any], directory: str) -> str:
    """The dataset root of an Evo2 entry: ``dataset_prefix`` joined onto ``dataset_path`` as Evo2 does.

    An absolute (or URL) prefix is used as is; a relative one is joined onto ``dataset_path`` when
    given; a path still relative after that is resolved against `directory` (the YAML's).
    """
    prefix, base = item["dataset_prefix"], item.get("dataset_path")
    if not isinstance(prefix, str) or not prefix.strip():
        raise BlendError(f"dataset_prefix must be a non-empty string, not {prefix!r}")
    if base is not None and (not isinstance(base, str) or not base.strip()):
        raise BlendError(f"dataset_path must be a non-empty string, not {base!r}")
    path = prefix
    if not _is_absolute(path) and base is not None:
        path = base.rstrip("/") + "/" + prefix if protocol_of(base) else os.path.join(base, prefix)
    if not _is_absolute(path):
        path = os.path.normpath(os.path.join(directory, path))
    return path


def _load_yaml(text: str, source: str) -> tuple[Any, list[int]]:
    """The YAML document in `text` (as `yaml.safe_load` reads it) and, for a list, each item's line (1-based)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        why = "; ".join(part for part in (exc.context, exc.problem) if part) or str(exc)
        raise BlendError(f"{source} is not valid YAML{at}: {why}") from None
    except yaml.YAMLError as exc:
        raise BlendError(f"{source} is not valid YAML: {exc}") from None
    finally:
        loader.dispose()
    lines = [item.start_mark.line + 1 for item in node.value] if isinstance(node, yaml.SequenceNode) else []
    return data, lines


def read_blend(path: str | os.PathLike[str]) -> list[BlendEntry]:
    """The blend in an Evo2 ``dataset_config`` YAML file (a list of ``dataset_*`` entries).

    Each entry needs ``dataset_prefix`` (a dataset root of ours), ``dataset_split`` (``train``,
    ``validation``/``val`` or ``test``) and ``dataset_weight``; ``dataset_path``, if given, is the
    directory or URL a relative prefix is joined onto, as in bionemo-evo2. Unlike Evo2, which
    resolves a prefix that is still relative against the working directory, we resolve it against
    the YAML file's directory, so a blend file and its datasets can move together (Evo2 users
    usually write absolute paths, which mean the same in both). An entry's name is its prefix's
    last component. Unknown keys are refused, naming the entry, its line and the key.
    """
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise BlendError(f"cannot read blend file {source}: {exc}") from None
    data, lines = _load_yaml(text, source)
    if data is None:
        raise BlendError(f"blend file {source} is empty: list at least one dataset_prefix/dataset_split/...")
    if not isinstance(data, list):
        raise BlendError(
            f"blend file {source} must be a YAML list of entries (- dataset_prefix: ...), not a {type(data).__name__}"
        )
    if not data:
        raise BlendError(f"blend file {source} is an empty list: name at least one dataset")
    directory = os.path.dirname(os.path.abspath(source))
    entries: list[BlendEntry] = []
    where: list[str] = []
    for i, raw in enumerate(data):
        label = f"{source} entry {i + 1} (line {lines[i]})"
        try:
            item = _check_keys(raw, EVO2_KEYS, EVO2_OPTIONAL_KEYS)
            label = f"{label} ({item['dataset_prefix']!r})"
            root = _evo2_path(item, directory)
            entry = BlendEntry(root, item["dataset_weight"], item["dataset_split"], last_component(root))
        except BlendError as exc:
            raise BlendError(f"{label}: {exc}") from None
        entries.append(entry)
        where.append(label)
    _no_repeats(entries, where)
    return entries


def entries_for(entries: Sequence[BlendEntry], split: str) -> list[BlendEntry]:
    """The entries of one split (``train``, ``val``/``validation`` or ``test``), in blend order (maybe none)."""
    wanted = split_name(split)
    return [entry for entry in entries if entry.split == wanted]


def shares(entries: Sequence[BlendEntry]) -> list[float]:
    """The entries' weights as fractions summing to 1, in order: the share of reads each dataset gets.

    The entries must be of one split (select them with `entries_for`): weights of different splits
    are never compared, as in Evo2, which normalises each split on its own.
    """
    if not entries:
        raise BlendError("no entries to share among: a split of the blend has no datasets")
    splits = sorted({entry.split for entry in entries})
    if len(splits) > 1:
        raise BlendError(f"entries of several splits ({', '.join(splits)}): take one split with entries_for first")
    largest = max(entry.weight for entry in entries)
    scaled = [entry.weight / largest for entry in entries]  # no overflow however large the weights
    total = math.fsum(scaled)
    return [weight / total for weight in scaled]
