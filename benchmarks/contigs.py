"""Many short contigs (metagenomic catalogs): how prepare's planning and writing scale with the count.

Two measurements, each on seeded synthetic FASTA written first (not timed):

- ``catalog``: index, check every base, group, split and plan `--contigs` contigs (lengths uniform
  in ``[--min-length, --max-length]``) in a child process; prints seconds per phase and the child's
  peak PSS (sampled from outside, like the loader benchmark).
- ``compare``: `prepare` (one writer process) of the contigs against one long sequence holding the
  same number of bases; prints Mbp/s of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from benchmarks import child_env
from benchmarks.memory import PeakPss
from benchmarks.synthetic import fasta_record
from bionemo_wds.storage.atomic import atomic_write


def write_contigs(path: Path, n: int, min_length: int, max_length: int, seed: int = 0) -> int:
    """Write `n` contigs of uniform random length as 80-column FASTA; returns the number of bases."""
    rng = np.random.default_rng([seed, 3])
    lengths = rng.integers(min_length, max_length + 1, n)
    write_fasta(path, [f"contig_{i:07d}" for i in range(n)], lengths, seed)
    return int(lengths.sum())


def write_fasta(path: Path, names: list[str], lengths: np.ndarray, seed: int = 0) -> None:
    """Random ACGT sequences of `lengths`, named `names`, 80 bases per line."""
    rng = np.random.default_rng([seed, 4])
    alphabet = np.frombuffer(b"ACGT", dtype=np.uint8)
    with atomic_write(path) as fh:
        for name, length in zip(names, lengths.tolist()):
            fh.write(fasta_record(name, alphabet[rng.integers(0, 4, length)]))


def plan_phases(fasta: str, seq_length: int, stride: int) -> dict[str, float]:
    """Index, scan, group and plan `fasta` in this process; seconds per phase."""
    from bionemo_wds.prepare.groups import apply_groups
    from bionemo_wds.prepare.options import PrepareOptions
    from bionemo_wds.prepare.request import request_of
    from bionemo_wds.prepare.scan import scan
    from bionemo_wds.prepare.shard_plan import plan
    from bionemo_wds.prepare.sources.fasta import index_fasta

    opts = PrepareOptions(seq_length=seq_length, stride=stride, progress=False)
    times: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        catalog = index_fasta([fasta], Path(cache), progress=False)
        times["index"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        catalog = apply_groups(scan(catalog, progress=False), None)
        times["check"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        manifest, _tasks = plan(catalog, request_of([fasta], opts), opts)
        times["split_and_plan"] = time.perf_counter() - t0
    times["windows"] = sum(s["n_samples"] for s in manifest["splits"].values())
    return times


def measure_catalog(fasta: Path, seq_length: int, stride: int) -> dict[str, float]:
    """`plan_phases` in a child process, with its peak PSS."""
    code = (
        "import json, sys; from benchmarks.contigs import plan_phases; "
        f"print(json.dumps(plan_phases({str(fasta)!r}, {seq_length}, {stride})))"
    )
    peak = PeakPss()
    done = peak.run([sys.executable, "-c", code], env=child_env())
    if done.returncode != 0:
        raise RuntimeError(f"catalog measurement failed: {done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["peak_pss_mb"] = peak.peak / 2**20
    return result


def prepare_rate(fasta: Path, out: Path) -> float:
    """Seconds of a one-writer `prepare` of `fasta` (all in train) into `out`, planning included;
    imports are not (the shard writer's webdataset, with torch, is loaded before either run)."""
    import webdataset  # noqa: F401

    from bionemo_wds.prepare import PrepareOptions, prepare

    t0 = time.perf_counter()
    prepare([fasta], out, PrepareOptions(split=(1, 0, 0), workers=1, progress=False))
    return time.perf_counter() - t0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("catalog", "compare"), help="what to measure (see above)")
    parser.add_argument("--contigs", type=int, default=1_000_000, help="number of synthetic contigs")
    parser.add_argument("--min-length", type=int, default=100, help="shortest contig, bases")
    parser.add_argument("--max-length", type=int, default=1000, help="longest contig, bases")
    parser.add_argument("--seq-length", type=int, default=8192, help="tokens per sample, as prepare --seq-length")
    parser.add_argument("--stride", type=int, default=7992, help="as prepare --stride")
    parser.add_argument("--workdir", help="where the synthetic FASTA and outputs go (default: a temporary directory)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(args.workdir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        fasta = work / f"contigs_{args.contigs}.fa"
        bases = write_contigs(fasta, args.contigs, args.min_length, args.max_length)
        print(f"{args.contigs:,} contigs of {args.min_length}-{args.max_length} bases, {bases / 1e6:.1f} Mbp")
        if args.mode == "catalog":
            r = measure_catalog(fasta, args.seq_length, args.stride)
            total = r["index"] + r["check"] + r["split_and_plan"]
            print(
                f"index {r['index']:.1f} s, check bases {r['check']:.1f} s, split + plan {r['split_and_plan']:.1f} s: "
                f"{total:.1f} s in all, {int(r['windows']):,} windows; peak PSS {r['peak_pss_mb']:.0f} MB"
            )
            return 0
        long = work / "one_sequence.fa"
        write_fasta(long, ["one_sequence"], np.array([bases]))
        many_s = prepare_rate(fasta, work / "out_contigs")
        long_s = prepare_rate(long, work / "out_long")
        print(
            f"prepare, 1 writer: contigs {bases / 1e6 / many_s:.1f} Mbp/s ({many_s:.1f} s), one sequence "
            f"{bases / 1e6 / long_s:.1f} Mbp/s ({long_s:.1f} s); contigs take {many_s / long_s:.2f}x per base"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
