#!/usr/bin/env python
"""Cluster a million contigs by sketch similarity on one machine and measure it (prints one JSON object).

`prepare --group-by similarity:T` sketches every sequence (`homology.sketch.sketch_hashes`, the
function prepare's tasks call) and joins the sketches (`homology.similarity.near_identical_pairs`,
`clusters_with`). This tool runs those same functions over N synthetic contigs held in memory (no
FASTA written, no shards), built from the real genomes beside the package so their k-mers are
real ones:

- a *family* starts from a *root*: a stretch of 500 to 5,000 bases (log-uniform) cut at a random
  place of a random genome and given 20-30% substitutions, so two roots cut from overlapping places
  are unrelated (estimated ANI at most 0.8), as distinct genes of a metagenome are;
- a family has 1 to 30 members (geometric, mean 2.5): besides its root, *near* copies (3 in 4: a
  stretch of 30-100% of the root, at least 300 bases, with 0-2% substitutions, on either strand),
  which the clustering must join to their root, and *far* copies (1 in 4: the whole root with
  15-30% substitutions), which it must not;
- the contigs are shuffled (seeded) before they are sketched.

Sketching runs for each ``--workers`` count (1 and 2 by default: in this process, then in a process
pool that inherits the bases by fork), and the sketches must be equal. Then the join and the
clusters, with the peak RSS of that step alone (the bases freed and the peak reset first). Prints
one JSON object: contigs, bases, seconds per step, peak RSS, pairs, clusters, and the checks:
recall (near copies in their root's cluster), far copies joined, clusters holding two families or
two genomes (0 expected).
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import math
import multiprocessing as mp
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: `benchmarks` is not installed

from benchmarks.memory import peak_rss_mb  # noqa: E402
from bionemo_wds.homology.similarity import MIN_SHARED, Matches, clusters_with, near_identical_pairs  # noqa: E402
from bionemo_wds.homology.sketch import Sketches, SketchParams, sketch_hashes  # noqa: E402

#: The genomes whose stretches the contigs are: the bundled ones and, where present, E. coli K-12.
GENOMES = (
    ROOT / "bionemo_wds" / "data" / "klebsiella_fragmented_assembly.fa.gz",
    ROOT / "bionemo_wds" / "data" / "lambda_phage_NC_001416.fa.gz",
    Path("/work/shared/data/ecoli_K12_MG1655.fa.gz"),
)
#: Bases per sketch task (as prepare's tasks, smaller so two workers share a small run).
TASK_BASES = 8_000_000
ACGT = np.frombuffer(b"ACGT", np.uint8)


def genome_codes(path: Path) -> np.ndarray:
    """A genome's ACGT bases as codes 0-3 (contigs back to back, any other base left out)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        raw = b"".join(line.strip() for line in fh if not line.startswith(b">")).upper()
    lookup = np.full(256, 255, np.uint8)
    lookup[ACGT] = np.arange(4, dtype=np.uint8)
    codes = lookup[np.frombuffer(raw, np.uint8)]
    return codes[codes != 255]


@dataclass
class Contigs:
    """The contigs' bases (ASCII, back to back from ``offsets``) and what each one is."""

    bases: np.ndarray  # uint8
    offsets: np.ndarray  # int64, n + 1, in the order they were made
    order: np.ndarray  # int64: contig i is the one made ``order[i]``-th
    family: np.ndarray  # int64
    genome: np.ndarray  # int64
    kind: np.ndarray  # int8: 0 root, 1 near copy, 2 far copy

    def __len__(self) -> int:
        return len(self.family)

    def lengths(self) -> np.ndarray:
        """Bases of each contig, in the shuffled order."""
        return np.diff(self.offsets)[self.order]


def log_uniform(rng: np.random.Generator, low: int, high: int, n: int) -> np.ndarray:
    return np.exp(rng.uniform(math.log(low), math.log(high), n)).astype(np.int64)


def substitute(
    rng: np.random.Generator, codes: np.ndarray, starts: np.ndarray, lengths: np.ndarray, rates: np.ndarray
) -> None:
    """Give piece i (``codes[starts[i]:starts[i] + lengths[i]]``) substitutions at rate ``rates[i]``,
    in place: a binomial count per piece at uniform places (drawn per substitution, not per base),
    10,000 pieces at a time so the draws stay small."""
    count = rng.binomial(lengths, rates)
    for first in range(0, len(starts), 10_000):
        part = slice(first, first + 10_000)
        n = np.repeat(lengths[part], count[part])
        where = np.repeat(starts[part], count[part]) + (rng.random(len(n)) * n).astype(np.int64)
        codes[where] = (codes[where] + rng.integers(1, 4, len(where), dtype=np.uint8)) % 4


def make_contigs(n: int, seed: int, genomes: Sequence[np.ndarray]) -> Contigs:
    """`n` contigs in families (module docstring), in a shuffled order; a pure function of `n`,
    `seed` and the genomes."""
    rng = np.random.default_rng(seed)
    sizes = np.minimum(rng.geometric(0.4, size=n), 30)
    sizes = sizes[: int(np.searchsorted(np.cumsum(sizes), n)) + 1]
    sizes[-1] -= int(sizes.sum()) - n
    n_fam = len(sizes)
    genome_len = np.array([len(g) for g in genomes], np.int64)
    fam_genome = rng.choice(len(genomes), size=n_fam, p=genome_len / genome_len.sum())
    fam_len = np.minimum(log_uniform(rng, 500, 5000, n_fam), genome_len[fam_genome])
    fam_start = (rng.random(n_fam) * (genome_len[fam_genome] - fam_len + 1)).astype(np.int64)
    fam_rate = rng.uniform(0.20, 0.30, n_fam)
    # contigs in family order: each root, then its members (near, 3 in 4, or far)
    family = np.repeat(np.arange(n_fam), sizes)
    root_row = np.cumsum(sizes) - sizes
    is_root = np.zeros(n, bool)
    is_root[root_row] = True
    member = np.flatnonzero(~is_root)
    member_fam = family[member]
    far = rng.random(len(member)) < 0.25
    share = np.where(far, 1.0, rng.uniform(0.3, 1.0, len(member)))
    member_len = np.minimum(np.maximum(300, (fam_len[member_fam] * share).astype(np.int64)), fam_len[member_fam])
    member_at = (rng.random(len(member)) * (fam_len[member_fam] - member_len + 1)).astype(np.int64)
    member_rate = np.where(far, rng.uniform(0.15, 0.30, len(member)), rng.uniform(0.0, 0.02, len(member)))
    member_rc = rng.random(len(member)) < 0.5
    lengths = np.empty(n, np.int64)
    kind = np.zeros(n, np.int8)
    lengths[root_row], lengths[member] = fam_len, member_len
    kind[member] = np.where(far, 2, 1)
    offsets = np.zeros(n + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    codes = np.empty(int(offsets[-1]), np.uint8)
    for row, g, at, length in zip(root_row.tolist(), fam_genome.tolist(), fam_start.tolist(), fam_len.tolist()):
        codes[offsets[row] : offsets[row] + length] = genomes[g][at : at + length]
    mutations = np.random.default_rng([seed, 1])
    substitute(mutations, codes, offsets[root_row], fam_len, fam_rate)
    root_at = offsets[root_row]
    for row, f, at, length, rc in zip(
        member.tolist(), member_fam.tolist(), member_at.tolist(), member_len.tolist(), member_rc.tolist()
    ):
        start = int(root_at[f]) + at
        piece = codes[start : start + length]
        codes[offsets[row] : offsets[row] + length] = 3 - piece[::-1] if rc else piece
    substitute(mutations, codes, offsets[member], member_len, member_rate)
    for first in range(0, len(codes), 1 << 26):  # the codes as ASCII, in place
        block = codes[first : first + (1 << 26)]
        block[:] = ACGT[block]
    order = np.random.default_rng([seed, 2]).permutation(n)  # shuffled: families are not neighbours
    return Contigs(codes, offsets, order, family[order], fam_genome[family[order]], kind[order])


#: The contigs the pool's workers sketch, inherited by fork (never pickled).
_CONTIGS: Contigs | None = None


def sketch_range(task: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Hashes (back to back) and hash counts of contigs ``first..last-1`` of `_CONTIGS`."""
    first, last, ksize, scaled = task
    assert _CONTIGS is not None
    params = SketchParams(ksize, scaled)
    bases, offsets = _CONTIGS.bases, _CONTIGS.offsets
    made = _CONTIGS.order[first:last].tolist()
    hashes = [sketch_hashes([bases[offsets[i] : offsets[i + 1]].tobytes()], params) for i in made]
    sizes = np.fromiter((len(h) for h in hashes), np.int64, count=len(hashes))
    return (np.concatenate(hashes) if hashes else np.zeros(0, np.uint64)), sizes


def sketch_all(contigs: Contigs, params: SketchParams, workers: int) -> Sketches:
    """Every contig's sketch, in tasks of about `TASK_BASES` bases, here or in a pool of `workers`."""
    global _CONTIGS
    _CONTIGS = contigs
    lengths = contigs.lengths()
    ends = np.cumsum(lengths)
    cuts = np.searchsorted(ends, np.arange(0, int(ends[-1]), TASK_BASES), side="left")
    bounds = sorted({*cuts.tolist(), len(contigs)})
    tasks = [(a, b, params.ksize, params.scaled) for a, b in itertools.pairwise(bounds) if b > a]
    if workers <= 1:
        parts = [sketch_range(t) for t in tasks]
    else:
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
            parts = list(pool.map(sketch_range, tasks))
    sizes = np.concatenate([p[1] for p in parts])
    offsets = np.zeros(len(sizes) + 1, np.int64)
    np.cumsum(sizes, out=offsets[1:])
    names = [f"c{i}" for i in range(len(contigs))]
    return Sketches(params, names, lengths, np.concatenate([p[0] for p in parts]), offsets)


def rss_mb() -> float:
    """This process's resident memory now, in MB (0 where ``/proc`` is missing)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS (``VmHWM``) to its current RSS, where Linux allows it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def evaluate(contigs: Contigs, labels: np.ndarray, sizes: np.ndarray, pairs: Matches) -> dict[str, Any]:
    """Recall of the near copies, far copies joined, clusters holding two families or two genomes,
    and the near-identical pairs of two families (with the hashes of the smaller sketch of each)."""
    root_label = np.full(int(contigs.family.max()) + 1, -1, np.int64)
    roots = contigs.kind == 0
    root_label[contigs.family[roots]] = labels[roots]
    with_root = labels == root_label[contigs.family]
    near, far = contigs.kind == 1, contigs.kind == 2
    judged = near & (sizes >= 10)  # near copies holding 10 hashes or more (about 1 kb and longer at scaled 100)

    def spanning(what: np.ndarray) -> int:
        distinct = np.unique(labels * (int(what.max()) + 1) + what)  # distinct (cluster, family or genome)
        cluster_of = distinct // (int(what.max()) + 1)
        return int((np.unique(cluster_of, return_counts=True)[1] > 1).sum())

    across = contigs.family[pairs.query] != contigs.family[pairs.target]
    smaller = np.minimum(sizes[pairs.query], sizes[pairs.target])[across]
    return {
        "pairs_of_two_families": int(across.sum()),
        "pairs_of_two_families_10_hashes_or_more": int((smaller >= 10).sum()),
        "pairs_of_two_families_most_hashes": int(smaller.max()) if len(smaller) else 0,
        "near_copies": int(near.sum()),
        "recall": float(with_root[near].mean()) if near.any() else 1.0,
        "recall_10_hashes_or_more": float(with_root[judged].mean()) if judged.any() else 1.0,
        "far_copies": int(far.sum()),
        "far_copies_joined": float(with_root[far].mean()) if far.any() else 0.0,
        "clusters_with_two_families": spanning(contigs.family),
        "clusters_with_two_genomes": spanning(contigs.genome),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--contigs", type=int, default=1_000_000, help="contigs to build, from the real genomes (default 1,000,000)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the contigs' stretches and substitutions")
    parser.add_argument("--workers", default="1,2", help="worker counts to sketch with, comma-separated")
    parser.add_argument("--threshold", type=float, default=0.95, help="estimated ANI (similarity:T)")
    parser.add_argument("--ksize", type=int, default=21, help="k-mer size of the sketches (default 21)")
    parser.add_argument("--scaled", type=int, default=100, help="sketches keep one k-mer in S (default 100)")
    parser.add_argument("--min-shared", type=int, default=MIN_SHARED, help="hashes a pair must share to count")
    args = parser.parse_args(argv)
    params = SketchParams(args.ksize, args.scaled).check()
    report: dict[str, Any] = {"contigs": args.contigs, "seed": args.seed, "threshold": args.threshold}
    report["min_shared"] = args.min_shared
    report["ksize"], report["scaled"] = params.ksize, params.scaled

    t = time.perf_counter()
    paths = [p for p in GENOMES if p.exists()]
    genomes = [genome_codes(p) for p in paths]
    contigs = make_contigs(args.contigs, args.seed, genomes)
    report["genomes"] = {p.name: len(g) for p, g in zip(paths, genomes)}
    report["bases"] = int(contigs.offsets[-1])
    report["families"] = int(contigs.family.max()) + 1
    report["generate_s"] = round(time.perf_counter() - t, 2)

    sketch_hashes(["ACGT" * 10], params)  # sourmash imported before the clock starts
    sketches: Sketches | None = None
    report["sketch_s"], report["sketch_mbp_per_s"] = {}, {}
    for workers in [int(w) for w in args.workers.split(",")]:
        t = time.perf_counter()
        made = sketch_all(contigs, params, workers)
        seconds = time.perf_counter() - t
        report["sketch_s"][str(workers)] = round(seconds, 2)
        report["sketch_mbp_per_s"][str(workers)] = round(report["bases"] / seconds / 1e6, 1)
        if sketches is None:
            sketches = made
        elif not (np.array_equal(made.hashes, sketches.hashes) and np.array_equal(made.offsets, sketches.offsets)):
            report["sketches_equal"] = False
    assert sketches is not None
    report.setdefault("sketches_equal", True)
    report["hashes"] = len(sketches.hashes)
    report["peak_rss_mb_before_join"] = round(peak_rss_mb(), 1)

    truth = Contigs(np.zeros(0, np.uint8), contigs.offsets, contigs.order, contigs.family, contigs.genome, contigs.kind)
    del contigs  # the bases: prepare has none in memory when it joins
    global _CONTIGS
    _CONTIGS = None
    report["join_rss_peak_is_its_own"] = reset_peak_rss()
    report["rss_mb_at_join_start"] = round(rss_mb(), 1)
    t = time.perf_counter()
    pairs = near_identical_pairs(sketches, args.threshold, args.min_shared)
    report["join_s"] = round(time.perf_counter() - t, 2)
    t = time.perf_counter()
    labels = clusters_with(len(sketches), pairs.query, pairs.target, np.arange(len(sketches)))
    report["cluster_s"] = round(time.perf_counter() - t, 2)
    report["join_peak_rss_mb"] = round(peak_rss_mb(), 1)
    report["near_identical_pairs"] = len(pairs.query)
    report["clusters"] = len(np.unique(labels))
    report["largest_cluster"] = int(np.bincount(labels).max())
    report.update(evaluate(truth, labels, sketches.sizes, pairs))
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
