"""How the manifest's typed objects (`format.manifest_types`, `format.shard_columns`) map to and
from their JSON objects: known keys in `prepare`'s order, ``null`` ones left out (but `ALWAYS`), the
keys a reader does not know kept in ``extra`` and written back after the known ones."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields
from typing import Any

#: Keys written even when their value is null (`prepare` always writes them); any other optional
#: key whose value is None is left out.
ALWAYS = frozenset(("group_by", "split_at_n"))
#: Keys left out when they hold this value: what a manifest without them means (``layout``: the
#: windows layout, which versions 1-4 have and do not name, so a windows manifest stays as it was).
OMITTED_DEFAULTS = {"layout": "windows"}


def known_fields(cls: type) -> tuple[str, ...]:
    """The dataclass `cls`'s field names, ``extra`` aside, in order."""
    return tuple(f.name for f in fields(cls) if f.name != "extra")


def json_of(obj: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The JSON object of a typed one: its known keys in order (None ones left out but `ALWAYS`),
    then its ``extra`` keys."""
    out: dict[str, Any] = {}
    for name in names:
        value = getattr(obj, name)
        if name in OMITTED_DEFAULTS and value == OMITTED_DEFAULTS[name]:
            continue
        if value is not None or name in ALWAYS:
            out[name] = value
    out.update(obj.extra)
    return out


def split_known(obj: Mapping[str, Any], names: tuple[str, ...]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the known keys of a JSON object, the others: ``extra``)."""
    known = {name: obj[name] for name in names if name in obj}
    if len(known) == len(obj):
        return known, {}
    return known, {key: value for key, value in obj.items() if key not in known}
