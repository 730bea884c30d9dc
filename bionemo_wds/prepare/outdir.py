"""What an output directory holds, and whether a prepare run may write into it.

A directory (or a URL prefix in an object store) is ours when it has a manifest (finished run) or
a plan (interrupted run), or holds nothing but our cache. Anything else in it is someone's data,
and we never write there or delete it, with or without ``--overwrite``.
"""

from __future__ import annotations

import json
import os
from enum import Enum
from typing import Any

from bionemo_wds.errors import BadInputError
from bionemo_wds.format import MANIFEST_NAME
from bionemo_wds.format.sequence_table import SEQUENCE_TABLE_NAME
from bionemo_wds.homology.sketch_cache import SKETCH_DIR
from bionemo_wds.prepare.splits import LEGACY_SPLIT_RULE, SPLIT_NAMES
from bionemo_wds.storage.store import Store

PLAN_NAME = ".prepare-plan.json"
CACHE_NAME = ".cache"


class OutState(Enum):
    NEW = "new"  # absent or empty (or only our cache): start from scratch
    FINISHED = "finished"  # same request already completed
    RESUME = "resume"  # same request interrupted: finish it
    REPLACE = "replace"  # --overwrite of an earlier run: clear it once the new input is known good


def _stored_request(out: Store, names: list[str]) -> tuple[str, dict[str, Any]] | None:
    for name in (MANIFEST_NAME, PLAN_NAME):
        if name in names:
            try:
                return name, json.loads(out.read_bytes(name))["request"]
            except (ValueError, KeyError) as exc:
                raise BadInputError(f"{out.url(name)} is unreadable ({exc}); remove it or use another --out") from exc
    return None


#: What a request stored before a key existed meant by its absence (a key missing with the meaning
#: None needs no entry): prepare upper-cased every base before ``--case``, and ordered windows with
#: a numpy permutation before the computed (Feistel) order.
OLD_REQUEST_DEFAULTS: dict[str, Any] = {"case": "upper", "window_order": "numpy-permutation"}


def _as_meant(old: dict[str, Any]) -> dict[str, Any]:
    """A stored request with what its missing keys meant when it was written: also, when ratios
    decided its split (``split`` set), the split rule before ``--split-rule`` (`LEGACY_SPLIT_RULE`)."""
    meant = {**OLD_REQUEST_DEFAULTS, **old}
    if old.get("split") is not None:
        meant.setdefault("split_rule", LEGACY_SPLIT_RULE)
    return meant


def _differences(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    old = _as_meant(old)
    keys = sorted(set(old) | set(new))
    return [f"{k}: {old.get(k)!r} -> {new.get(k)!r}" for k in keys if old.get(k) != new.get(k)]


def clear_ours(out: Store, keep_cache: bool = False) -> None:
    """Remove what a prepare run writes (manifest, plan, sequence table, cache, split directories)
    and the sketches `contains` and `leakage` keep beside it, nothing else."""
    for name in (MANIFEST_NAME, PLAN_NAME, SEQUENCE_TABLE_NAME):
        out.remove(name)
    for name in (() if keep_cache else (CACHE_NAME,)) + (SKETCH_DIR, *SPLIT_NAMES):
        out.remove_tree(name)


def check_out_dir(out: Store, request: dict[str, Any], overwrite: bool) -> OutState:
    """Decide what to do with `out` for `request`; refuses foreign data and changed parameters."""
    if not out.remote and os.path.lexists(out.root) and not os.path.isdir(out.root):
        raise BadInputError(f"--out {out.root} exists and is not a directory")
    names = out.names()
    if not names:
        return OutState.NEW
    stored = _stored_request(out, names)
    if stored is None:
        others = [name for name in names if name != CACHE_NAME]
        if others:
            raise BadInputError(
                f"--out {out.root} holds other data ({', '.join(sorted(others)[:5])}"
                f"{', ...' if len(others) > 5 else ''}) and no bionemo-wds manifest; choose an empty or new directory"
            )
        return OutState.NEW
    source, old = stored
    diffs = _differences(old, request)
    if not diffs:
        return OutState.FINISHED if source == MANIFEST_NAME else OutState.RESUME
    if not overwrite:
        raise BadInputError(
            f"--out {out.root} was prepared with other parameters ({'; '.join(diffs)}); "
            "use --overwrite to replace it or choose another directory"
        )
    return OutState.REPLACE


def recorded_split_rule(out: Store, request: dict[str, Any]) -> str | None:
    """The split rule of the dataset (or interrupted run) in `out` when it is not `request`'s and
    nothing else differs: the rule a re-run that names no ``--split-rule`` keeps, so an existing
    dataset keeps the split its manifest records. None when there is nothing to keep (no stored
    request, the same rule, or other changes too: those are refused, or replaced with
    ``--overwrite``, as any change is)."""
    stored = _stored_request(out, out.names())
    if stored is None or request.get("split_rule") is None:
        return None
    old = _as_meant(stored[1])
    rule = old.get("split_rule")
    if rule is None or rule == request["split_rule"]:
        return None
    return None if _differences(old, {**request, "split_rule": rule}) else rule


def kept_split_note(out: Store, rule: str) -> str:
    """The one line a re-run says when it keeps the split rule `rule` of the output in `out`."""
    return (
        f"--out {out.root} was split by the {rule} rule (the seed only ordered sequences of equal length, so "
        f"every seed gave about the same split), not by today's default, seeded; keeping its split. Give "
        f"--split-rule {rule} to keep it without this note, or --split-rule seeded --overwrite to split it "
        "again with the seed choosing which sequences go where (new val and test sets)"
    )
