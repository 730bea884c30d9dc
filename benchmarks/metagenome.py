"""A seeded metagenome-like catalog: many short contigs cut from real genomes, for the padding benchmark.

Contig lengths are log-normal with a median of 3 kb (sigma 1, as metagenomic assemblies' contig
lengths roughly are), none shorter than 200 bp (assemblers' usual minimum: shorter draws are drawn
again), summing to exactly the size asked for. The bases are real: contigs are cut one after
another from the genomes bundled with the package (the Klebsiella assembly and phage lambda, about
5.6 Mbp) and from any further FASTA given (`sources`), going round them again as often as the size
needs; each contig comes on a random strand with seeded point substitutions (`SUBSTITUTION_RATE`),
so the contigs cut from the same stretch on different rounds are not identical. Everything is a
pure function of the seed and the sources.
"""

from __future__ import annotations

import argparse
import gzip
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from benchmarks.synthetic import fasta_record
from bionemo_wds.core.tokenizer import COMPLEMENT_TABLE, UPPERCASE_TABLE
from bionemo_wds.storage.atomic import atomic_write

MEDIAN = 3000
SIGMA = 1.0
MIN_LENGTH = 200
#: Share of a contig's bases replaced by another base (seeded per contig).
SUBSTITUTION_RATE = 0.01
DEFAULT_MBP = 64.0
#: The genomes the bases are cut from by default: the ones bundled with the package.
BUNDLED = tuple(
    Path(__file__).resolve().parents[1] / "bionemo_wds" / "data" / name
    for name in ("klebsiella_fragmented_assembly.fa.gz", "lambda_phage_NC_001416.fa.gz")
)


def metagenome_lengths(total_bases: int, seed: int) -> np.ndarray:
    """Contig lengths (log-normal, median `MEDIAN`, sigma `SIGMA`, none under `MIN_LENGTH`) that
    sum to exactly `total_bases`: the last contig is cut to what is left, or merged into the one
    before it when that would leave it under the minimum."""
    if total_bases < MIN_LENGTH:
        raise ValueError(f"a metagenome of {total_bases} bases is smaller than one contig ({MIN_LENGTH} bp)")
    rng = np.random.default_rng([seed, 11])
    draws: list[np.ndarray] = []
    drawn = 0
    while drawn < total_bases:  # in blocks: one numpy call per ~total/mean contigs
        block = rng.lognormal(np.log(MEDIAN), SIGMA, size=max(1024, total_bases // 4000)).astype(np.int64)
        block = block[block >= MIN_LENGTH]
        draws.append(block)
        drawn += int(block.sum())
    lengths = np.concatenate(draws)
    n = int(np.searchsorted(np.cumsum(lengths), total_bases)) + 1  # the first n reach the total
    lengths = lengths[:n]
    lengths[-1] -= int(lengths.sum()) - total_bases
    if lengths[-1] < MIN_LENGTH and n > 1:
        lengths[-2] += lengths[-1]
        lengths = lengths[:-1]
    return lengths


def source_bases(sources: Iterable[str | Path]) -> np.ndarray:
    """Every sequence of the (gzip or plain) FASTA `sources`, upper case, one after another."""
    parts: list[bytes] = []
    for path in sources:
        path = Path(path)
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rb") as fh:
            for line in fh:
                if not line.startswith(b">"):
                    parts.append(line.strip().translate(UPPERCASE_TABLE))
    pool = np.frombuffer(b"".join(parts), dtype=np.uint8)
    if not len(pool):
        raise ValueError(f"no bases in {', '.join(map(str, sources))}")
    return pool


def _mutate(bases: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """`bases` with about `SUBSTITUTION_RATE` of its A/C/G/T replaced by one of the other three."""
    alphabet = np.frombuffer(b"ACGT", dtype=np.uint8)
    code = np.full(256, 255, dtype=np.uint8)
    code[alphabet] = np.arange(4, dtype=np.uint8)
    hits = np.flatnonzero(rng.random(len(bases)) < SUBSTITUTION_RATE)
    hits = hits[code[bases[hits]] < 4]  # an N stays an N
    out = bases.copy()
    out[hits] = alphabet[(code[bases[hits]] + rng.integers(1, 4, len(hits))) % 4]
    return out


def write_metagenome(
    path: str | Path, size_mbp: float = DEFAULT_MBP, seed: int = 0, sources: Sequence[str | Path] = BUNDLED
) -> Path:
    """Write the catalog as plain FASTA (80 bases per line); returns the path."""
    path = Path(path)
    pool = source_bases(sources)
    lengths = metagenome_lengths(int(size_mbp * 1_000_000), seed)
    at = int(np.random.default_rng([seed, 12]).integers(len(pool)))  # where the first contig starts
    with atomic_write(path) as fh:
        for i, n in enumerate(lengths.tolist()):
            rng = np.random.default_rng([seed, 13, i])
            idx = (at + np.arange(n)) % len(pool)  # round the sources again where they run out
            at = (at + n) % len(pool)
            bases = _mutate(pool[idx], rng)
            strand = "+"
            if rng.random() < 0.5:
                bases = np.frombuffer(bases[::-1].tobytes().translate(COMPLEMENT_TABLE), dtype=np.uint8)
                strand = "-"
            fh.write(fasta_record(f"metagenome_contig_{i:06d} length={n} strand={strand}", bases))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write a seeded metagenome-like catalog (plain FASTA): log-normal contig lengths, "
        f"median {MEDIAN} bp, sigma {SIGMA:g}, none under {MIN_LENGTH} bp, bases cut from real genomes."
    )
    parser.add_argument("out", help="output FASTA path")
    parser.add_argument("--size-mbp", type=float, default=DEFAULT_MBP, help="total bases, in millions")
    parser.add_argument("--seed", type=int, default=0, help="seed for lengths, cuts, strands and substitutions")
    parser.add_argument(
        "--source", action="append", help="FASTA to cut bases from (repeatable; default: the bundled genomes)"
    )
    args = parser.parse_args(argv)
    path = write_metagenome(args.out, args.size_mbp, args.seed, args.source or BUNDLED)
    lengths = metagenome_lengths(int(args.size_mbp * 1_000_000), args.seed)
    print(
        f"{path}: {len(lengths):,} contigs, {lengths.sum():,} bases, median {int(np.median(lengths)):,}, "
        f"longest {lengths.max():,}"
    )
    return 0
