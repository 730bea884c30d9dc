"""A seeded synthetic genome with a realistic contig-length mix, for benchmarks at any size.

Contig lengths follow the bundled Klebsiella assembly's mix by count (about 46% under 10 kb, 36%
10-100 kb, 18% longer, log-uniform within each range, capped at 400 kb), so length-stratified
splitting and per-contig tail windows behave as on a real draft assembly. Bases are drawn i.i.d.
at the assembly's GC content (57%).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bionemo_wds.storage.atomic import atomic_write

BUCKETS = ((0.46, 200, 10_000), (0.36, 10_000, 100_000), (0.18, 100_000, 400_000))
GC = 0.57
LINE = 80


def contig_lengths(total_bases: int, seed: int) -> np.ndarray:
    """Lengths summing to exactly `total_bases`, drawn from the bucket mix."""
    rng = np.random.default_rng([seed, 1])
    lengths: list[int] = []
    remaining = total_bases
    probs = np.array([b[0] for b in BUCKETS])
    while remaining > 0:
        _, lo, hi = BUCKETS[rng.choice(len(BUCKETS), p=probs / probs.sum())]
        n = int(np.exp(rng.uniform(np.log(lo), np.log(hi))))
        n = min(n, remaining)
        if remaining - n < 200 and remaining - n > 0:  # no contig shorter than 200 bp at the end
            n = remaining
        lengths.append(n)
        remaining -= n
    return np.array(lengths, dtype=np.int64)


def write_genome(path: str | Path, size_mbp: float = 32.0, seed: int = 0) -> Path:
    """Write the genome as plain FASTA (80 bases per line); returns the path."""
    path = Path(path)
    total = int(size_mbp * 1_000_000)
    rng = np.random.default_rng([seed, 2])
    alphabet = np.frombuffer(b"ACGT", dtype=np.uint8)
    p = np.array([(1 - GC) / 2, GC / 2, GC / 2, (1 - GC) / 2])
    with atomic_write(path) as fh:
        for i, n in enumerate(contig_lengths(total, seed)):
            bases = alphabet[rng.choice(4, size=int(n), p=p)]
            fh.write(fasta_record(f"synthetic_contig_{i:05d} length={n}", bases))
    return path


def fasta_record(header: str, bases: np.ndarray) -> bytes:
    """One FASTA record: ``>header`` and the uint8 `bases`, `LINE` per line (one numpy reshape, no loop)."""
    n = len(bases)
    full = (n // LINE) * LINE
    parts = [f">{header}\n".encode()]
    if full:
        newline = np.full((full // LINE, 1), ord("\n"), np.uint8)
        parts.append(np.concatenate([bases[:full].reshape(-1, LINE), newline], axis=1).tobytes())
    if n > full:
        parts.append(bases[full:].tobytes() + b"\n")
    return b"".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write a seeded synthetic genome (plain FASTA) with a draft-assembly contig-length mix."
    )
    parser.add_argument("out", help="output FASTA path")
    parser.add_argument("--size-mbp", type=float, default=32.0, help="total bases, in millions")
    parser.add_argument("--seed", type=int, default=0, help="seed for lengths and bases")
    args = parser.parse_args(argv)
    path = write_genome(args.out, args.size_mbp, args.seed)
    lengths = contig_lengths(int(args.size_mbp * 1_000_000), args.seed)
    print(f"{path}: {len(lengths)} contigs, {lengths.sum():,} bases, longest {lengths.max():,}")
    return 0
