"""Leakage-safe splits: which sequences belong together (`--group-by`), so a split never divides them.

Related sequences in two splits inflate evaluation: contigs of one genome or sample, or homologous
sequences of one MMseqs2 cluster, teach the model the test set (hashFrag, bioRxiv
2025.01.22.634321). A group rule names each sequence's group from its id:

- ``sample-id``: the sharded-Eden sample id, ``".".join(id.split("__")[1].split("-")[1:])``
  (``BCR__ECT-SAMPLE1__CT1-1`` -> ``SAMPLE1``);
- ``regex:PATTERN``: the first capture group of the first match in the id (the whole match when
  the pattern has no group);
- ``tsv:FILE``: lines ``seq_id<TAB>group``;
- ``mmseqs:FILE``: an MMseqs2 cluster TSV (``mmseqs createtsv``: ``representative<TAB>member``),
  each member grouped with its representative;
- ``similarity:T[,k=K][,scaled=S]``: clusters of near-identical sequences (estimated ANI >= T) found
  from their bases by sketches (`similarity_groups`, which `prepare` calls instead of `apply_groups`).

A rule that matches no sequence is an error; sequences it leaves ungrouped are counted (a warning
and the manifest say how many) and each becomes a group of its own. The split then divides groups,
stratified by their total length (`splits.grouped_split`).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import numpy as np

from bionemo_wds.core.distinct import distinct
from bionemo_wds.errors import BadInputError, OptionError
from bionemo_wds.homology.sketch import KSIZE_RANGE, SCALED_MAX, SketchParams
from bionemo_wds.prepare.catalog import Catalog

GROUP_RULES = ("sample-id", "regex:PATTERN", "tsv:FILE", "mmseqs:FILE", "similarity:T")
SIMILARITY = "similarity:"


def is_similarity(rule: str | None) -> TypeGuard[str]:
    """Whether `rule` groups by sequence similarity (its groups come from the bases, not the ids)."""
    return isinstance(rule, str) and rule.startswith(SIMILARITY)


@dataclass(frozen=True)
class SimilarityRule:
    """A parsed ``similarity:T[,k=K][,scaled=S]`` rule."""

    min_identity: float
    params: SketchParams


def parse_similarity(rule: str) -> SimilarityRule:
    """The threshold and sketch parameters of a ``similarity:...`` rule; `ValueError` saying what is
    wrong (a phrase the option check ends with the rule itself: ``--group-by <problem>, got 'RULE'``)."""
    fields = rule[len(SIMILARITY) :].split(",")
    try:
        threshold = float(fields[0])
    except ValueError:
        threshold = float("nan")
    if not 0.5 <= threshold <= 1.0:  # NaN too
        raise ValueError("similarity:T needs a threshold T from 0.5 to 1 (an estimated ANI)")
    sizes = {"k": SketchParams.ksize, "scaled": SketchParams.scaled}
    for field in fields[1:]:
        name, _, value = field.partition("=")
        if name not in sizes or not value.isdigit():
            raise ValueError(f"similarity:T takes only k=K and scaled=S after the threshold, not {field!r}")
        sizes[name] = int(value)
    params = SketchParams(sizes["k"], sizes["scaled"])
    if params.problem() is not None:
        (low, high), top = KSIZE_RANGE, SCALED_MAX
        if params.ksize % 2 == 0 or not low <= params.ksize <= high:
            raise ValueError(f"similarity:T,k=K needs an odd k-mer size K from {low} to {high}")
        raise ValueError(f"similarity:T,scaled=S needs S from 1 to {top} (one k-mer in S kept)")
    return SimilarityRule(threshold, params)


def similarity_problem(rule: str) -> str | None:
    """What is wrong with a ``similarity:`` rule, or None."""
    try:
        parse_similarity(rule)
    except ValueError as exc:
        return str(exc)
    return None


def group_rule_problem(rule: object) -> str | None:
    """What is wrong with a `--group-by` value, or None."""
    if not isinstance(rule, str):
        return f"must be one of {', '.join(GROUP_RULES)}"
    if rule == "sample-id" or any(rule.startswith(p) and len(rule) > len(p) for p in ("tsv:", "mmseqs:")):
        return None
    if rule.startswith("regex:") and len(rule) > 6:
        return regex_problem(rule[6:])
    if is_similarity(rule):
        return similarity_problem(rule)
    return f"must be one of {', '.join(GROUP_RULES)}"


def regex_problem(pattern: str) -> str | None:
    """What is wrong with a rule's regular expression (``regex:PATTERN``), or None."""
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"has an invalid regular expression ({exc})"
    return None


def sample_id(seq_id: str) -> str | None:
    """The sharded-Eden sample id of a contig id, or None when the id does not have that form."""
    fields = seq_id.split("__")
    if len(fields) < 2:
        return None
    parts = fields[1].split("-")
    return ".".join(parts[1:]) or None


def read_id_tsv(
    path: str, label: str, column: str = "group", member_first: bool = True, conflict: str = "is in two groups"
) -> dict[str, str]:
    """Two-column TSV lines of `path` -> {seq_id: value}: ``seq_id<TAB>value`` (the `column` named in
    messages, e.g. ``group``, ``tag``), or with ``member_first=False`` MMseqs2's
    ``representative<TAB>member`` (value: the representative). Blank lines and ``#`` comments are
    skipped. A malformed line, or a sequence given two values (`conflict` says how), is an error
    naming `label` (the option, e.g. ``--tags tsv:FILE``) and the line number. Shared by `--group-by`
    and `--tags` so both read such tables alike."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise BadInputError(f"{label} cannot be read: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise BadInputError(f"{label} is not UTF-8 text: {exc}") from exc
    table: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = [f.strip() for f in line.split("\t")]
        if len(fields) < 2 or not fields[0] or not fields[1]:
            shape = f"seq_id<TAB>{column}" if member_first else "representative<TAB>member"
            raise BadInputError(f"{label} line {number}: expected {shape}, got {line!r}")
        if not member_first:
            fields = [fields[1], fields[0]]
        if fields[0] in table and table[fields[0]] != fields[1]:
            raise BadInputError(
                f"{label} line {number}: sequence {fields[0]!r} {conflict} ({table[fields[0]]!r} and {fields[1]!r})"
            )
        table[fields[0]] = fields[1]
    return table


def read_group_tsv(path: str, member_first: bool = True) -> dict[str, str]:
    """Two-column TSV lines of `path` -> {seq_id: group}; ``member_first``: ``seq_id<TAB>group``,
    else MMseqs2's ``representative<TAB>member``. A malformed line is an error naming it."""
    rule = "tsv" if member_first else "mmseqs"
    return read_id_tsv(path, f"--group-by {rule}:{path}", member_first=member_first)


def group_names(names: list[str], rule: str) -> list[str | None]:
    """The group of each sequence id under `rule` (None: the rule does not place it)."""
    if rule == "sample-id":
        return [sample_id(n) for n in names]
    if rule.startswith("regex:"):
        pattern = re.compile(rule[6:])
        out: list[str | None] = []
        for name in names:
            found = pattern.search(name)
            label = None if found is None else (found.group(1) if pattern.groups else found.group(0))
            out.append(label or None)  # an empty or non-participating capture places nothing
        return out
    if rule.startswith(("tsv:", "mmseqs:")):
        kind, path = rule.split(":", 1)
        table = read_group_tsv(path, member_first=kind == "tsv")
        return [table.get(n) for n in names]
    raise OptionError(f"--group-by must be one of {', '.join(GROUP_RULES)}, got {rule!r}")


def check_placed(unique: list[str], placed: int, rule: str) -> None:
    """Refuse a rule that places none of the sequences `unique` (`placed` of them are) in a group."""
    if placed == 0:
        raise OptionError(
            f"--group-by {rule} places none of the {len(unique)} sequences in a group "
            f"(first id: {unique[0]!r}); check the rule"
        )


def apply_groups(catalog: Catalog, rule: str | None) -> Catalog:
    """Set `catalog.groups`: by `rule`, or (no rule) by sequence so the pieces of one stay together.

    Without a rule, groups a source set (sharded-Eden: its sample ids) are kept, and without those
    and without pieces nothing is set: every row is its own group already.
    """
    names = catalog.names
    if rule is None:
        if catalog.groups is not None or len(distinct(catalog.seq)) == len(catalog):
            return catalog
        labels: list[str | None] = list(names)
    else:
        problem = group_rule_problem(rule)
        if problem is not None:
            raise OptionError(f"--group-by {problem}, got {rule!r}")
        unique = list(dict.fromkeys(names))
        found = dict(zip(unique, group_names(unique, rule)))
        labels = [found[n] for n in names]
        placed = sum(1 for n in unique if found[n] is not None)
        check_placed(unique, placed, rule)
        ungrouped = len(unique) - placed
        if ungrouped:
            warnings.warn(
                f"--group-by {rule} leaves {ungrouped} of {len(unique)} sequences ungrouped; "
                "each becomes its own group",
                stacklevel=2,
            )
        catalog.notes["group_by"] = {"rule": rule, "groups": None, "ungrouped_sequences": ungrouped}
    # an ungrouped sequence is its own group: keyed by its id, apart from the named groups
    keys = [("g", label) if label is not None else ("s", name) for label, name in zip(labels, names)]
    index: dict[tuple[str, str], int] = {}
    groups = np.fromiter((index.setdefault(k, len(index)) for k in keys), dtype=np.int64, count=len(keys))
    catalog.groups = groups
    catalog.group_names = [label for _, label in index]
    if "group_by" in catalog.notes:
        catalog.notes["group_by"]["groups"] = len(index)
    return catalog
