#!/usr/bin/env python
"""Rates of prepare's passes over the inputs per worker, and the wall time they project for 10 Tbp.

Writes a synthetic input of `--mbp` Mbp in `--files` FASTA files (copies of the bundled Klebsiella
assembly and lambda phage, each copy with its own names and a few point changes), then times, for
each configuration (the local executor with 1 and 2 processes, a Dask LocalCluster of 1 and 2
single-threaded workers, started and warmed (our modules imported) before the timing, as a
running cluster would be):

    index   `index_fasta`: one task per file builds its .fai, one per `--range-mb` MB of a larger
            file (a fresh cache each time)
    check   `scan` with --split-at-n 1000 and --on-invalid replace-N (every byte read, N runs looked for):
            tasks of `--task-mbp` Mbp

and checks that every configuration gives the same catalog. With `--source jsonl` or `--source
parquet` the same copies are written as records of `--record-kb` kb (each text starting with an Evo2
lineage tag, as OpenGenome2's do) in JSON lines files (`--packing` gz, zst or plain) or Parquet files,
and the index is the source's catalog (`catalog_jsonl` / `catalog_parquet`: parse, take the tag out,
copy the bases into the cache); the line "catalog + check" gives both passes' rate per worker, and
the line "CPU time" the rates per CPU second of the one-process local run (what a core does when
nothing else runs on it); `--repeat N` times every run N times and keeps the fastest of each pass,
for a machine shared with other work. The inputs are read from the page cache (written just before): the rates
are of the CPU, not of a disk. `--write-mbp` Mbp of the input are also prepared (shards written)
with the local executor and one process, for the rate of the writers. Then prints the model: per
pass, bases / (rate per worker x nodes x cores per node; the slower of the two one-worker runs,
local and Dask), bounded below by bytes / `--fs-gbps` (the shared filesystem's aggregate read
rate), plus the plan (`--plan-seconds`, measured by tools/plan_scale.py), for 10 Tbp on the node
counts of `--nodes`.

    python tools/scan_scale.py --mbp 1000 --files 8 --workdir /tmp/scan-scale
    python tools/scan_scale.py --source jsonl --mbp 1000 --files 8 --workers 1 --write-mbp 0
"""

from __future__ import annotations

import argparse
import importlib
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root

import distributed

from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare import scan_tasks as tasks_module
from bionemo_wds.prepare.executors.dask_client import client_session, local_cluster
from bionemo_wds.prepare.executors.tasks import TaskPlace
from bionemo_wds.prepare.scan import scan
from bionemo_wds.prepare.sources import fasta_index, text_source
from bionemo_wds.prepare.sources.fasta import index_fasta
from bionemo_wds.prepare.sources.jsonl import catalog_jsonl
from bionemo_wds.prepare.sources.parquet import catalog_parquet

DATA = Path(__file__).resolve().parents[1] / "bionemo_wds" / "data"


def read_fasta(path: Path) -> dict[str, bytes]:
    import gzip

    seqs: dict[str, list[bytes]] = {}
    name = ""
    with gzip.open(path, "rb") as fh:
        for line in fh:
            if line.startswith(b">"):
                name = line[1:].split()[0].decode()
                seqs[name] = []
            else:
                seqs[name].append(line.strip())
    return {k: b"".join(v) for k, v in seqs.items()}


def write_inputs(work: Path, mbp: int, files: int, seed: int = 1) -> list[Path]:
    """`files` FASTA files of about `mbp` Mbp in all, 80 bases per line."""
    rng = random.Random(seed)
    source = {
        **read_fasta(DATA / "klebsiella_fragmented_assembly.fa.gz"),
        **read_fasta(DATA / "lambda_phage_NC_001416.fa.gz"),
    }
    per_file = mbp * 1_000_000 // files
    paths = []
    copy = 0
    for f in range(files):
        path = work / f"input{f:03d}.fa"
        paths.append(path)
        if path.exists():
            continue
        written = 0
        with open(path, "wb") as out:
            while written < per_file:
                copy += 1
                for name, seq in source.items():
                    at, base = rng.randrange(len(seq)), rng.randrange(4)
                    seq = seq[:at] + b"ACGT"[base : base + 1] + seq[at + 1 :]  # one point change
                    out.write(f">{name}_f{f}_c{copy}\n".encode())
                    out.write(b"\n".join(seq[i : i + 80] for i in range(0, len(seq), 80)) + b"\n")
                    written += len(seq)
    return paths


#: A lineage tag each record's text starts with (`--source jsonl` / `parquet`).
TAG = "|d__Bacteria;p__Pseudomonadota;c__Gammaproteobacteria;o__Enterobacterales;f__Enterobacteriaceae;g__Klebsiella|"


def as_records(fasta: Path, source: str, record_kb: int, packing: str) -> Path:
    """The FASTA file `fasta` as JSON lines or Parquet records of `record_kb` kb (a contig's tail a
    shorter one), each text starting with `TAG`; written beside it once."""
    import gzip
    import json

    suffix = {"gz": ".jsonl.gz", "zst": ".jsonl.zst", "plain": ".jsonl"}[packing] if source == "jsonl" else ".parquet"
    path = fasta.with_suffix(suffix)
    if path.exists():
        return path
    size = record_kb * 1000
    texts = [TAG + seq[i : i + size].decode() for seq in read_plain_fasta(fasta) for i in range(0, len(seq), size)]
    if source == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.table({"text": texts}), path, row_group_size=max(1, 64_000_000 // size))
        return path
    data = "".join(json.dumps({"text": text}) + "\n" for text in texts).encode()
    if packing == "gz":
        data = gzip.compress(data, 6)
    elif packing == "zst":
        import zstandard

        data = zstandard.ZstdCompressor(level=3).compress(data)
    path.write_bytes(data)
    return path


def read_plain_fasta(path: Path) -> list[bytes]:
    """The sequences of a plain FASTA file this tool wrote."""
    return [b"".join(record.split(b"\n")[1:]) for record in path.read_bytes().split(b">")[1:]]


def timed(
    place: TaskPlace, inputs: list[Path], work: Path, source: str = "fasta"
) -> tuple[float, float, tuple, tuple[float, float]]:
    """Wall seconds of the index and of the check, the checked catalog's summary, and the CPU
    seconds of both in this process (all of the work with one local worker, which runs here)."""
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    c0 = time.process_time()
    t0 = time.perf_counter()
    if source == "fasta":
        catalog = index_fasta(inputs, cache, progress=False, place=place)
    else:
        opts = PrepareOptions(
            source=source, workers=place.workers, executor=place.executor, scheduler=place.scheduler, progress=False
        )
        build = catalog_jsonl if source == "jsonl" else catalog_parquet
        catalog = build([str(p) for p in inputs], opts, cache)
    t1, c1 = time.perf_counter(), time.process_time()
    checked = scan(catalog, "replace-N", 1000, False, place)
    t2, c2 = time.perf_counter(), time.process_time()
    summary = (checked.names, checked.lengths.tolist(), checked.origin.tolist(), checked.notes)
    return t1 - t0, t2 - t1, summary, (c1 - c0, c2 - c1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--source", choices=("fasta", "jsonl", "parquet"), default="fasta", help="input kind")
    parser.add_argument("--record-kb", type=int, default=5, help="jsonl, parquet: kb per record (default 5)")
    parser.add_argument("--packing", choices=("gz", "zst", "plain"), default="gz", help="jsonl: compression")
    parser.add_argument("--executors", default="local,dask", help="executors to time (default local,dask)")
    parser.add_argument("--repeat", type=int, default=1, help="time each run this often, keep the fastest (default 1)")
    parser.add_argument("--mbp", type=int, default=1000, help="input size in Mbp (default 1000)")
    parser.add_argument("--files", type=int, default=8, help="input files (default 8)")
    parser.add_argument("--task-mbp", type=int, default=64, help="Mbp per check task (default 64)")
    parser.add_argument("--range-mb", type=int, default=256, help="MB per index task of a large file (default 256)")
    parser.add_argument("--workers", default="1,2", help="worker counts to time, comma-separated (default 1,2)")
    parser.add_argument("--write-mbp", type=int, default=200, help="Mbp prepared for the writers' rate (0: skip)")
    parser.add_argument("--workdir", default=None, help="where inputs go, kept for a rerun (default: temporary)")
    parser.add_argument("--total-tbp", type=float, default=10.0, help="input size of the model, Tbp (default 10)")
    parser.add_argument("--nodes", default="1,8,32,128", help="node counts of the model (default 1,8,32,128)")
    parser.add_argument("--cores", type=int, default=64, help="worker processes per node in the model (default 64)")
    parser.add_argument("--fs-gbps", type=float, default=20.0, help="shared filesystem read rate, GB/s (default 20)")
    parser.add_argument("--plan-seconds", type=float, default=3.0, help="the plan at that size (default 3)")
    args = parser.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="scan-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    inputs = write_inputs(work, args.mbp, args.files)
    if args.source != "fasta":
        inputs = [as_records(path, args.source, args.record_kb, args.packing) for path in inputs]
    bases = None
    tasks_module.TASK_BASES = args.task_mbp * 1_000_000
    fasta_index.RANGE_BYTES = args.range_mb << 20
    text_source.POOL_BYTES = 0  # the pool of every local run with 2 workers or more, as at scale
    rows, summaries = [], []
    cpu_alone = None
    for executor in args.executors.split(","):
        for workers in [int(w) for w in args.workers.split(",")]:
            if executor == "dask":
                started = time.perf_counter()
                cluster = local_cluster(workers)
                with distributed.Client(cluster) as client:  # warm: the workers have imported our modules
                    client.run(importlib.import_module, "bionemo_wds.prepare.sources.fasta_index")
                startup = time.perf_counter() - started
                place = TaskPlace("dask", workers, cluster.scheduler_address)
            else:
                cluster, startup, place = None, 0.0, TaskPlace("local", workers)
            try:
                with client_session():  # one client for both passes, as in a prepare run
                    runs = [timed(place, inputs, work, args.source) for _ in range(args.repeat)]
                    index_s, check_s = min(run[0] for run in runs), min(run[1] for run in runs)
                    if (executor, workers) == ("local", 1):
                        cpu_alone = (min(run[3][0] for run in runs), min(run[3][1] for run in runs))
            finally:
                if cluster is not None:
                    cluster.close()
            summaries.extend(run[2] for run in runs)
            bases = sum(summaries[-1][1])
            rows.append((f"{executor} x{workers}", index_s, check_s, startup))
    same = all(s == summaries[0] for s in summaries)
    kind = "FASTA" if args.source == "fasta" else f"{args.source} ({args.record_kb} kb records, {inputs[0].name})"
    print(f"input: {bases / 1e6:.0f} Mbp of {kind} in {args.files} files; check tasks of {args.task_mbp} Mbp")
    print(f"{'run':<10} {'index s':>8} {'Mbp/s':>7} {'check s':>8} {'Mbp/s':>7} {'cluster start s':>16}")
    for name, index_s, check_s, startup in rows:
        print(
            f"{name:<10} {index_s:8.2f} {bases / index_s / 1e6:7.0f} "
            f"{check_s:8.2f} {bases / check_s / 1e6:7.0f} {startup:16.2f}"
        )
    print(f"same catalog in every run: {same}")
    alone = [row for row in rows if row[0].endswith(" x1")] or rows[:1]  # one worker: its rate is per core
    index_rate = min(bases / row[1] for row in alone)  # the slower of the local process and the Dask worker
    check_rate = min(bases / row[2] for row in alone)
    both = min(bases / (row[1] + row[2]) for row in alone)
    print(f"catalog + check: {both / 1e6:.0f} Mbp/s per worker (the slower one-worker run)")
    if cpu_alone is not None:  # what a core does when it is not shared: the CPU seconds of the local x1 run
        index_cpu, check_cpu = cpu_alone
        print(
            f"CPU time of local x1: index {bases / index_cpu / 1e6:.0f}, check {bases / check_cpu / 1e6:.0f}, "
            f"catalog + check {bases / (index_cpu + check_cpu) / 1e6:.0f} Mbp/s per CPU second"
        )
    write_rate = None
    if args.write_mbp:
        (work / "write").mkdir(exist_ok=True)
        part = write_inputs(work / "write", args.write_mbp, 1)
        if args.source != "fasta":
            part = [as_records(path, args.source, args.record_kb, args.packing) for path in part]
        out = work / "written"
        shutil.rmtree(out, ignore_errors=True)
        result = prepare(part, out, PrepareOptions(source=args.source, workers=1, progress=False))
        part_bases = sum(int(info.n_bases or 0) for info in result.manifest.splits.values())
        write_rate = part_bases / result.seconds
        print(
            f"write: {part_bases / 1e6:.0f} Mbp prepared by one process in {result.seconds:.1f} s: "
            f"{write_rate / 1e6:.0f} Mbp/s (catalog, check and plan included)"
        )
        shutil.rmtree(out, ignore_errors=True)
    total = args.total_tbp * 1e12
    fs = args.fs_gbps * 1e9
    print(
        f"\nmodel: {args.total_tbp:g} Tbp, {args.cores} workers per node, rates of one worker here "
        f"(index {index_rate / 1e6:.0f}, check {check_rate / 1e6:.0f}"
        + (f", write {write_rate / 1e6:.0f}" if write_rate else "")
        + f" Mbp/s), reads bounded by {args.fs_gbps:g} GB/s, plan {args.plan_seconds:g} s"
    )
    print(f"{'nodes':>6} {'index':>9} {'check':>9} {'write':>9} {'total':>9}")
    for nodes in [int(n) for n in args.nodes.split(",")]:
        workers = nodes * args.cores
        index_t = max(total / (index_rate * workers), total / fs)
        check_t = max(total / (check_rate * workers), total / fs)
        write_t = max(total / (write_rate * workers), total / fs) if write_rate else float("nan")
        whole = index_t + check_t + args.plan_seconds + write_t
        print(f"{nodes:6d} {hours(index_t):>9} {hours(check_t):>9} {hours(write_t):>9} {hours(whole):>9}")
    return 0 if same else 1


def hours(seconds: float) -> str:
    if seconds != seconds:
        return "-"
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


if __name__ == "__main__":
    sys.exit(main())
