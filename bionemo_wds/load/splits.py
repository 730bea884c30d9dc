"""The data splits, and reading a split named any way a config or upstream bionemo names it."""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum, auto
from typing import Any

from bionemo_wds.errors import OptionError


class Split(Enum):
    """Names of the data splits; ``split.name`` is the directory name prepare writes."""

    train = auto()
    val = auto()
    test = auto()


def as_split(key: Any, what: str = "split key") -> Split:
    """`key` as a `Split`: a `Split`, its name (``"train"``, as YAML configs give it) or a member of
    another enum of that name (upstream bionemo's ``Split``); anything else is a clear error."""
    if isinstance(key, Split):
        return key
    name = key.name if isinstance(key, Enum) else key
    if isinstance(name, str) and name in Split.__members__:
        return Split[name]
    raise OptionError(
        f"{what}: {key!r} is not a split; use Split.train, Split.val, Split.test or their names "
        f"{', '.join(repr(s) for s in Split.__members__)}"
    )


def by_split(mapping: Mapping[Any, Any] | None, what: str) -> dict[Split, Any]:
    """A per-split argument (`what` names it in errors) keyed by `Split`, whichever way its keys name
    the splits (see `as_split`); None is no entry."""
    if mapping is None:
        return {}
    if not isinstance(mapping, Mapping):
        raise TypeError(f"{what} must be a dict of split -> value, got {type(mapping).__name__}")
    out: dict[Split, Any] = {}
    for key, value in mapping.items():
        split = as_split(key, what)
        if split in out:
            raise OptionError(f"{what} names the {split.name} split twice ({key!r})")
        out[split] = value
    return out
