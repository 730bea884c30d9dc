"""Assign whole sequences to train/val/test.

Pure functions over length arrays, no I/O. A sequence never lands in two splits. The stratified
split follows Eden: sequences are bucketed by length (<10 kb, <100 kb, longer) and each bucket is
divided by the ratios, so every split gets the same length mix. Within a bucket the sequences are
dealt in an order and each goes to the split furthest below its share of the bucket's bases (so
base shares stay within a sequence or two of the target, where a plain count split can miss badly
when a few long contigs dominate). The order is the split rule (`SPLIT_RULES`, ``--split-rule``):

- ``seeded`` (the default): the bucket sorted longest first is cut into strata of `stratum_size`
  consecutive sequences (the fewest in which the smallest split expects one), and each stratum is
  dealt in the order of its sequences' seeded keys (`seeds.identity_keys` of the seed and the
  sequence's id, or group name). The seed decides which sequences go where: two seeds share about
  the share of sequences chance gives, while each stratum's lengths keep every split's length mix.
  A sequence's draw depends on its id, not on its position in the inputs.
- ``longest-first``: the whole bucket longest first, the seed ordering only sequences of equal
  length, so it barely moves the split; what datasets prepared before ``seeded`` hold (kept so they
  are made again the same).

`--split-from-names` takes each input file's split from its name instead (`split_in_name`): a word
``train``, ``val`` / ``valid`` / ``validation`` or ``test`` between ``_``, ``-``, ``.`` or the ends
of the file name, so the files ``export-megatron`` writes per split (``mout/ecoli_train``), or
``data_metagenomics_valid_chunk1.jsonl.gz`` and ``x.test.fa``, go back to their splits.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Collection, Mapping, Sequence

import numpy as np

from bionemo_wds.core.distinct import distinct
from bionemo_wds.core.seeds import identity_keys, split_rng
from bionemo_wds.errors import BadInputError

SPLIT_NAMES = ("train", "val", "test")
#: --split's default ratios (`PrepareOptions.split`).
DEFAULT_RATIOS = (0.8, 0.1, 0.1)
#: --split-from-names: the words of a file name that name a split (any case) -> its split number.
SPLIT_WORDS = {"train": 0, "val": 1, "valid": 1, "validation": 1, "test": 2}
#: What delimits the words of a file name.
_WORD_DELIMITERS = re.compile(r"[_.\-]")
#: Upper bounds (exclusive) of the length buckets; the last bucket is open-ended.
DEFAULT_BUCKET_EDGES = (10_000, 100_000)
#: How the stratified split orders a bucket's sequences (`--split-rule`): see the module docstring.
SPLIT_RULES = ("seeded", "longest-first")
SEEDED, LONGEST_FIRST = SPLIT_RULES
#: The rule of a request or manifest that names none: what `prepare` did before `--split-rule`.
LEGACY_SPLIT_RULE = LONGEST_FIRST


def bucket_labels(edges: Sequence[int] = DEFAULT_BUCKET_EDGES) -> list[str]:
    """Human-readable names of the buckets, e.g. ``['<10kb', '<100kb', '>=100kb']``."""

    def fmt(n: int) -> str:
        return f"{n // 1000}kb" if n % 1000 == 0 else f"{n}bp"

    return [f"<{fmt(e)}" for e in edges] + [f">={fmt(edges[-1])}"]


def length_buckets(lengths: np.ndarray, edges: Sequence[int] = DEFAULT_BUCKET_EDGES) -> np.ndarray:
    """Bucket number of each length (0 for the shortest bucket)."""
    return np.searchsorted(np.asarray(edges), np.asarray(lengths), side="right")


def ratio_problem(ratios: Sequence[float]) -> str | None:
    """What is wrong with split ratios ("needs 3 ratios ..."), or None: one finite, non-negative number
    per split, not all zero (NaN would compare false everywhere and send every sequence to train)."""
    try:
        arr = np.asarray(ratios, dtype=np.float64)
    except (TypeError, ValueError):
        arr = np.empty(0)
    if arr.shape != (len(SPLIT_NAMES),):
        return f"needs {len(SPLIT_NAMES)} numbers ({','.join(SPLIT_NAMES)} ratios)"
    if not np.isfinite(arr).all() or (arr < 0).any():
        return "ratios must be finite and non-negative"
    if arr.sum() <= 0:
        return "ratios must not all be zero"
    return None


def check_ratios(ratios: Sequence[float]) -> np.ndarray:
    """Ratios as a normalised array of three; refuses non-finite, negative or all-zero ratios."""
    problem = ratio_problem(ratios)
    if problem is not None:
        raise BadInputError(f"--split {problem}, got {list(ratios)}")
    arr = np.asarray(ratios, dtype=np.float64)
    return arr / arr.sum()


def split_count_problem(n_units: int, ratios: Sequence[float], unit: str = "sequence") -> str | None:
    """Why `n_units` sequences (or groups, `unit`) cannot fill every split with a positive ratio, or None."""
    wanted = np.flatnonzero(check_ratios(ratios) > 0)
    if n_units >= len(wanted):
        return None
    hint = "; check the --group-by rule" if unit == "group" else ""
    return (
        f"{n_units} {unit}(s) cannot fill {len(wanted)} splits "
        f"({', '.join(SPLIT_NAMES[i] for i in wanted)}): a {unit} never goes to two splits; "
        f"give more {unit}s or set the empty splits' ratios to 0 with --split{hint}"
    )


def stratified_split(
    lengths: np.ndarray,
    ratios: Sequence[float],
    seed: int,
    edges: Sequence[int] = DEFAULT_BUCKET_EDGES,
    unit: str = "sequence",
    ids: Sequence[str] | None = None,
    rule: str = SEEDED,
) -> np.ndarray:
    """Split number (0 train, 1 val, 2 test) for every sequence (or `unit`: what the lengths are of).

    `ids` names each (its sequence id or group name) and keys its seeded draw; without them a
    sequence is known by its position. `rule` is one of `SPLIT_RULES`. Every split with a positive
    ratio gets at least one sequence; fewer sequences than such splits is an error.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    share = check_ratios(ratios)
    wanted = np.flatnonzero(share > 0)
    problem = split_count_problem(len(lengths), ratios, unit)
    if problem is not None:
        raise BadInputError(problem)
    if rule not in SPLIT_RULES:
        raise BadInputError(f"--split-rule must be one of {', '.join(SPLIT_RULES)}, got {rule!r}")
    if rule == SEEDED:
        names = [str(i) for i in range(len(lengths))] if ids is None else ids
        keys = identity_keys(seed, "split", names)
        size = stratum_size(share, len(lengths))
    assignment = np.full(len(lengths), -1, dtype=np.int8)
    buckets = length_buckets(lengths, edges)
    for bucket in distinct(buckets):
        members = np.flatnonzero(buckets == bucket)
        if rule == SEEDED:
            members = members[seeded_order(lengths[members], keys[members], size)]
        else:
            members = members[split_rng(seed, int(bucket)).permutation(len(members))]
            members = members[np.argsort(-lengths[members], kind="stable")]
        assignment[members] = _greedy(lengths[members].tolist(), share.tolist())
    _fill_empty_splits(assignment, lengths, wanted)
    return assignment


def stratum_size(share: np.ndarray, n: int) -> int:
    """Sequences per stratum of the ``seeded`` rule for `n` sequences: the fewest in which the
    smallest wanted split expects one (10 for 0.8,0.1,0.1), so each stratum gives every split its
    draw; at least 2, at most `n` (one stratum: a split too small to expect one sequence in all)."""
    smallest = float(share[share > 0].min())
    return max(2, math.ceil(min(float(n), 1 / smallest - 1e-9)))  # 1/0.1 may round to just above 10


def seeded_order(lengths: np.ndarray, keys: np.ndarray, size: int) -> np.ndarray:
    """Positions of one bucket's sequences in the order the ``seeded`` rule deals them: sorted
    longest first (equal lengths by key) and cut into strata of `size`, the strata longest first,
    each in the order of its sequences' `keys` (equal keys by position: numpy's sorts are stable)."""
    by_length = np.lexsort((keys, -np.asarray(lengths, dtype=np.int64)))
    stratum = np.arange(len(by_length)) // size
    return by_length[np.lexsort((keys[by_length], stratum))]


def _greedy(lengths: list[int], share: list[float]) -> list[int]:
    """Give each length, in order, to the split furthest below its share of the bases so far.

    A plain Python loop over floats: numpy per step cost ~10 us, which is 10 s for a million contigs;
    this computes the same IEEE sums in the same order (the first of equal deficits wins, as argmax).
    """
    wanted = [j for j, s in enumerate(share) if s > 0]
    given = [0.0] * len(share)
    out = []
    for length in lengths:
        total = sum(given) + length
        choice, best = wanted[0], -np.inf
        for j in wanted:
            deficit = share[j] * total - given[j]
            if deficit > best:
                choice, best = j, deficit
        given[choice] += length
        out.append(choice)
    return out


def grouped_split(
    groups: np.ndarray,
    lengths: np.ndarray,
    ratios: Sequence[float],
    seed: int,
    edges: Sequence[int] = DEFAULT_BUCKET_EDGES,
    names: Sequence[str] | None = None,
    rule: str = SEEDED,
) -> np.ndarray:
    """Split number for every row such that all rows of a group land in one split: the groups are
    split by `stratified_split` over their total lengths (genomes and clusters differ in size),
    each keyed by its name (``names[group]``; without names, by its rank among the groups present)."""
    groups = np.asarray(groups, dtype=np.int64)
    totals = np.bincount(groups, weights=np.asarray(lengths, dtype=np.float64)).astype(np.int64)
    present = np.flatnonzero(np.bincount(groups) > 0)
    ids = None if names is None else [names[g] for g in present.tolist()]
    by_group = np.full(len(totals), -1, dtype=np.int8)
    by_group[present] = stratified_split(totals[present], ratios, seed, edges, unit="group", ids=ids, rule=rule)
    return by_group[groups]


def _fill_empty_splits(assignment: np.ndarray, lengths: np.ndarray, wanted: np.ndarray) -> None:
    """Give each empty wanted split the shortest sequence of the most populous split."""
    for split in wanted:
        if (assignment == split).any():
            continue
        counts = np.bincount(assignment, minlength=len(SPLIT_NAMES))
        donor = int(np.argmax(counts))
        candidates = np.flatnonzero(assignment == donor)
        shortest = candidates[np.argmin(lengths[candidates])]
        assignment[shortest] = split


def split_from_lists(names: Sequence[str], lists: Mapping[str, Sequence[str]]) -> np.ndarray:
    """Split number for every sequence from explicit name lists; -1 for sequences in no list.

    A name listed twice (in one or two lists) or absent from the inputs is an error.
    """
    position = {name: i for i, name in enumerate(names)}
    assignment = np.full(len(names), -1, dtype=np.int8)
    for split, listed in lists.items():
        if split not in SPLIT_NAMES:
            raise BadInputError(f"unknown split {split!r} in the split lists; use {', '.join(SPLIT_NAMES)}")
        code = SPLIT_NAMES.index(split)
        for name in listed:
            if name not in position:
                raise BadInputError(f"sequence {name!r} of the {split} list is not in the inputs")
            idx = position[name]
            if assignment[idx] != -1:
                raise BadInputError(f"sequence {name!r} is listed for both {SPLIT_NAMES[assignment[idx]]} and {split}")
            assignment[idx] = code
    return assignment


def split_in_name(path: str | os.PathLike[str]) -> int:
    """The split number the file name of `path` holds (`SPLIT_WORDS`, delimited by ``_``, ``-``, ``.``
    or the ends of the name; directories above it do not count); a name with no such word, or more
    than one, is a `BadInputError` naming the file."""
    name = os.path.basename(os.fspath(path))
    words = [w for w in _WORD_DELIMITERS.split(name) if w.lower() in SPLIT_WORDS]
    if len(words) == 1:
        return SPLIT_WORDS[words[0].lower()]
    found = f"holds {' and '.join(words)}" if words else "holds no split word"
    raise BadInputError(
        f"--split-from-names: the name of {os.fspath(path)} {found}; it needs exactly one of train, val, valid, "
        "validation, test between '_', '-', '.' or the ends of the file name (e.g. ecoli_train, x.test.fa)"
    )


def split_from_names(files: Sequence[str]) -> np.ndarray:
    """Split number of every row from the name of its input file (`split_in_name`): ``files[i]`` is row i's."""
    codes = {file: split_in_name(file) for file in dict.fromkeys(files)}
    return np.fromiter((codes[file] for file in files), dtype=np.int8, count=len(files))


def check_split_from_names(files: Sequence[str], ratios: Sequence[float], others: Collection[str]) -> None:
    """Refuse --split-from-names with a rule that also decides the split (`others`: the options given,
    such as ``--split-list``), an input file whose name names no split or two, and --split ratios
    that disagree with the names: ratios other than the default must be 0 exactly for the splits
    that no input names."""
    if others:
        raise BadInputError(
            f"--split-from-names and {' and '.join(others)} both decide the split; give one "
            "(--split-from-names takes each input's split from its file name)"
        )
    named = {split_in_name(file) for file in files}
    if tuple(float(r) for r in ratios) == DEFAULT_RATIOS:
        return
    given = {i for i, r in enumerate(ratios) if r > 0}
    if given != named:
        in_names = ", ".join(SPLIT_NAMES[i] for i in sorted(named))
        raise BadInputError(
            f"--split {','.join(str(r) for r in ratios)} disagrees with --split-from-names, whose input names give "
            f"{in_names}: leave --split out (the names decide the split), or give a ratio above 0 to exactly those"
        )
