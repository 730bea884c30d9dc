#!/usr/bin/env python
"""Time `prepare` of one FASTA with the local executor and on a Dask LocalCluster, 1 and 2 workers.

Each run writes a fresh output under --workdir (removed afterwards); the Dask runs use a cluster
started before the timing (as a running cluster would be) and also report the cluster's start-up.
Prints a table of seconds and Mbp/s per run, and checks that every output's shards are identical.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.executors.dask_client import local_cluster


def shard_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.tar")):
        h.update(str(p.relative_to(root)).encode() + p.read_bytes())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("fasta", help="the FASTA to prepare (e.g. from tools/make_synthetic_genome.py)")
    parser.add_argument("--workers", default="1,2", help="worker counts to try, comma-separated (default 1,2)")
    parser.add_argument("--repeat", type=int, default=2, help="runs per configuration; the table shows each")
    parser.add_argument("--samples-per-shard", type=int, default=2048, help="windows per shard (default 2048)")
    parser.add_argument("--workdir", default=None, help="where outputs go (default: a temporary directory)")
    args = parser.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="prepare-scaling-"))
    work.mkdir(parents=True, exist_ok=True)
    opts = dict(samples_per_shard=args.samples_per_shard, split=(0.9, 0.05, 0.05), progress=False)
    rows, digests = [], set()
    for n in [int(x) for x in args.workers.split(",")]:
        t = time.perf_counter()
        with local_cluster(n) as cluster:
            startup = time.perf_counter() - t
            for executor in ("local", "dask"):
                for r in range(args.repeat):
                    out = work / f"{executor}-{n}-{r}"
                    extra = {"scheduler": cluster.scheduler_address} if executor == "dask" else {}
                    result = prepare([args.fasta], out, PrepareOptions(**opts, workers=n, executor=executor, **extra))
                    bases = sum(s.n_bases or 0 for s in result.manifest.splits.values())
                    shards = sum(len(s.shards) for s in result.manifest.splits.values())
                    rows.append((executor, n, r, result.seconds, bases / result.seconds / 1e6, shards, startup))
                    digests.add(shard_digest(out))
                    shutil.rmtree(out)
    print(f"{'executor':8}  workers  run  seconds    Mbp/s  shards  cluster start-up s")
    for executor, n, r, seconds, rate, shards, startup in rows:
        print(f"{executor:8}  {n:7}  {r:3}  {seconds:7.2f}  {rate:7.1f}  {shards:6}  {startup:.2f}")
    print("identical shards in every run:", len(digests) == 1)
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
