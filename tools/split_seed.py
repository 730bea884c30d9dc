#!/usr/bin/env python
"""How much the split's seed moves the split: two seeds' val (and test) sets against chance, and
how far each split's share of a length bucket's bases is from its ratio, per `--split-rule`.

    python tools/split_seed.py bionemo_wds/data/klebsiella_fragmented_assembly.fa.gz --seeds 20

Plans the split of the FASTA's sequences (`splits.stratified_split`, as `prepare` does without
--group-by) for seeds 1..N, and prints per rule and split: the mean over ordered pairs of seeds of
the share of one seed's set that the other's holds, beside what chance gives (the other set's share
of all sequences: two sets drawn at random share that much on average), and the worst distance of
a split's share of a bucket's bases from its ratio.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bionemo_wds.prepare.splits import SPLIT_NAMES, SPLIT_RULES, length_buckets, stratified_split


def fasta_lengths(path: Path) -> tuple[list[str], np.ndarray]:
    """Sequence ids and lengths of a (gzip) FASTA."""
    opener = gzip.open if path.suffix == ".gz" else open
    ids: list[str] = []
    lengths: list[int] = []
    with opener(path, "rt") as fh:
        for line in fh:
            if line.startswith(">"):
                ids.append(line[1:].split()[0])
                lengths.append(0)
            elif lengths:
                lengths[-1] += len(line.strip())
    return ids, np.asarray(lengths, dtype=np.int64)


def measure(
    ids: Sequence[str], lengths: np.ndarray, ratios: Sequence[float], seeds: Sequence[int], rule: str
) -> dict[str, float]:
    """``<split>_shared`` and ``<split>_chance`` for every split but train, and ``worst_base_share``."""
    runs = [stratified_split(lengths, ratios, seed, ids=ids, rule=rule) for seed in seeds]
    bucket = length_buckets(lengths)
    out: dict[str, float] = {}
    for code, name in enumerate(SPLIT_NAMES[1:], start=1):
        sets = [frozenset(np.flatnonzero(run == code).tolist()) for run in runs]
        pairs = [(a, b) for a, b in itertools.permutations(sets, 2) if a]
        if pairs:
            out[f"{name}_shared"] = float(np.mean([len(a & b) / len(a) for a, b in pairs]))
            out[f"{name}_chance"] = float(np.mean([len(b) / len(lengths) for _, b in pairs]))
    share = np.asarray(ratios, dtype=np.float64) / sum(ratios)
    out["worst_base_share"] = max(
        abs(lengths[(bucket == b) & (run == j)].sum() / lengths[bucket == b].sum() - share[j])
        for run in runs
        for b in np.unique(bucket).tolist()
        for j in range(len(SPLIT_NAMES))
    )
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("fasta", type=Path)
    parser.add_argument("--seeds", type=int, default=20, help="seeds 1..N")
    parser.add_argument("--split", default="0.8,0.1,0.1", help="train,val,test ratios")
    args = parser.parse_args(argv)
    ids, lengths = fasta_lengths(args.fasta)
    ratios = [float(r) for r in args.split.split(",")]
    print(f"{len(ids)} sequences, seeds 1-{args.seeds}, --split {args.split}")
    for rule in SPLIT_RULES:
        got = measure(ids, lengths, ratios, range(1, args.seeds + 1), rule)
        for name in SPLIT_NAMES[1:]:
            if f"{name}_shared" in got:
                print(
                    f"{rule:13} {name:4}  two seeds share {got[f'{name}_shared']:.3f} of the set "
                    f"(chance {got[f'{name}_chance']:.3f})"
                )
        print(f"{rule:13} worst split share of a bucket's bases off its ratio: {got['worst_base_share']:.3f}")


if __name__ == "__main__":
    main()
