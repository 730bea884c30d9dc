#!/usr/bin/env python
"""Milliseconds per batch of BPE ids: the `tokenizers` library (``encode_batch_fast``, what the
loader ran before) against the built-in exact encoder (`exact_bpe.ExactBpe`), in one process.

    python tools/bpe_speed.py [FASTA] [--docs 8] [--bases 8192] [--batches 20] [--repeat 5]

A 4,096-id BPE is trained on the FASTA's first 300 kb as the benchmark trains it
(`benchmarks.tokenizer_peers.train_bpe`); each batch is `--docs` windows of `--bases` drawn (seeded)
from the bases after those. Both encoders run every batch `--repeat` times and the best pass is
reported, in wall and CPU time (the library's CPU time counts its own threads); the ids of every
batch are compared, and the run fails if they differ.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `benchmarks` is not installed

from benchmarks.tokenizer_peers import BPE_TRAINING_BASES, first_bases, train_bpe
from bionemo_wds.load.tokenize.exact_bpe import ExactBpe

DEFAULT_FASTA = Path(__file__).resolve().parents[1] / "bionemo_wds" / "data" / "klebsiella_fragmented_assembly.fa.gz"


def best(run, repeat: int) -> tuple[float, float]:
    """The fastest of `repeat` calls of `run`: (wall s, CPU s)."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        w0, c0 = time.perf_counter(), time.process_time()
        run()
        wall, cpu = min(wall, time.perf_counter() - w0), min(cpu, time.process_time() - c0)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fasta", nargs="?", default=str(DEFAULT_FASTA))
    parser.add_argument("--docs", type=int, default=8)
    parser.add_argument("--bases", type=int, default=8192)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    from tokenizers import Tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tokenizer.json"
        train_bpe(args.fasta, path)
        tok = Tokenizer.from_file(str(path))
    encoder, why = ExactBpe.of(tok)
    if encoder is None:
        raise SystemExit(f"the exact encoder declines this BPE: {why}")
    need = BPE_TRAINING_BASES + args.docs * args.bases * args.batches
    genome = first_bases(args.fasta, need * 2)[BPE_TRAINING_BASES:]
    rng = random.Random(0)
    batches = [
        [genome[s : s + args.bases] for s in (rng.randrange(len(genome) - args.bases) for _ in range(args.docs))]
        for _ in range(args.batches)
    ]
    arrays = [np.frombuffer("".join(b).encode(), dtype=np.uint8) for b in batches]
    bounds = [np.concatenate([[0], np.cumsum([len(d) for d in b])]).astype(np.int64) for b in batches]
    for batch, text, edges in zip(batches, arrays, bounds):
        found = encoder.encode(text, edges)
        library = [i for enc in tok.encode_batch_fast(batch, add_special_tokens=False) for i in enc.ids]
        if found is None or found[0].tolist() != library:
            raise SystemExit("the ids differ from the library's")
    lib = best(lambda: [tok.encode_batch_fast(b, add_special_tokens=False) for b in batches], args.repeat)
    ours = best(lambda: [encoder.encode(t, e) for t, e in zip(arrays, bounds)], args.repeat)
    bases = sum(len(t) for t in arrays)
    print(f"{args.batches} batches of {args.docs} x {args.bases} bases, ids equal; per batch, best of {args.repeat}:")
    for name, (wall, cpu) in (("tokenizers encode_batch_fast", lib), ("exact_bpe (C)", ours)):
        per = 1e3 / args.batches
        print(f"  {name:30s} {wall * per:7.2f} ms wall {cpu * per:7.2f} ms CPU  {bases / cpu / 1e6:6.1f} Mbp per CPU-s")
    print(f"  the C encoder: {lib[0] / ours[0]:.1f}x the library's wall-clock speed, {lib[1] / ours[1]:.1f}x per CPU-s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
