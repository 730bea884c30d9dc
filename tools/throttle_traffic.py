#!/usr/bin/env python
"""Request traffic of a loader against an object store that throttles: what the store sees.

The Klebsiella assembly bundled with the package is prepared once into ``--out`` (1024-token windows,
50 per record, as the remote tests do) and served by a local HTTP server on 127.0.0.1 in a process
of its own (the test suite's `servers.HTTPServer` with a `servers.Traffic`): it holds every request
``--delay`` seconds, answers 503 ``SlowDown`` to every ``--every``-th request and to any request
above ``--server-limit`` in flight, and records the most requests it had in flight at once and in
any window of ``--delay`` seconds. For each ``--max-requests`` bound, a `GenomicWebDataModule`
with ``--workers`` loader workers and a fresh ``cache_dir`` (the node's bound is shared through
it) reads one training epoch and the validation split; its batches are checked against the same
epoch read from local disk. One table row per bound (and ``--json``: one JSON line per bound):

    python tools/throttle_traffic.py --max-requests 4 16 --out /tmp/throttle

Columns: the store's requests, its 503 answers, its peak in flight, the most requests it had in a
window of ``--delay`` and in one second, its mean request rate over the run, the loader's retries
and throttled count (`storage_stats`; they leave out the metadata reads), the wall time, and whether
the batches equal local disk's. Needs the test extras (the server lives in ``tests/servers.py``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing as mp
import shutil
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]  # the package and the test servers (also in the spawned server)
KLEBSIELLA = REPO / "bionemo_wds" / "data" / "klebsiella_fragmented_assembly.fa.gz"
PREPARE = {"seq_length": 1024, "stride": 1000, "samples_per_shard": 400, "windows_per_record": 50, "progress": False}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="see the module docstring for the columns")
    p.add_argument("--max-requests", type=int, nargs="+", default=[4, 16], help="loader bounds to run (default 4 16)")
    p.add_argument("--every", type=int, default=4, help="the server answers 503 SlowDown to every N-th request")
    p.add_argument(
        "--server-limit", type=int, default=8, help="the server answers 503 above this many in flight (0: no limit)"
    )
    p.add_argument("--delay", type=float, default=0.02, help="seconds the server holds each request (default 0.02)")
    p.add_argument("--workers", type=int, default=2, help="loader workers (default 2)")
    p.add_argument("--retries", type=int, default=10, help="attempts per request (default 10)")
    p.add_argument("--retry-backoff", type=float, default=0.01, help="first wait, seconds (default 0.01)")
    p.add_argument("--out", type=Path, required=True, help="a scratch folder (the dataset and the caches)")
    p.add_argument("--json", action="store_true", help="one JSON line per bound instead of the table")
    return p.parse_args(argv)


def _serve(directory: str, every: int, limit: int, delay: float, conn: Any) -> None:
    """(in the server's own process) Serve `directory`, throttling, until told to stop; send the summary."""
    from servers import HTTPServer, Traffic

    traffic = Traffic(every=every, max_concurrent=limit or None, delay=delay)
    server = HTTPServer(directory, traffic=traffic)
    server.start()
    conn.send(server.url)
    conn.recv()
    server.stop()
    conn.send(traffic.summary())


def digest(batches: Any) -> tuple[int, str]:
    """(batches, sha256 of every field of every batch) of a loader's pass."""
    import torch

    h, n = hashlib.sha256(), 0
    for batch in batches:
        n += 1
        for field in sorted(batch):
            value = batch[field]
            data = value.numpy().tobytes() if isinstance(value, torch.Tensor) else repr(list(value)).encode()
            h.update(field.encode() + b"\0" + data)
    return n, h.hexdigest()


def make(root: str, args: argparse.Namespace, **kw: Any) -> Any:
    from bionemo_wds.lightning.datamodule import GenomicWebDataModule

    dm = GenomicWebDataModule(root, micro_batch_size=16, seed=7, shuffle_buffer=256, num_workers=args.workers, **kw)
    dm.setup("fit")
    return dm


def passes(dm: Any) -> list[tuple[int, str]]:
    return [digest(dm.train_dataloader()), digest(dm.val_dataloader())]


def run_bound(bound: int, dataset: Path, args: argparse.Namespace, want: list[tuple[int, str]]) -> dict[str, Any]:
    ours, theirs = mp.get_context("spawn").Pipe()
    server = mp.get_context("spawn").Process(
        target=_serve, args=(str(dataset.parent), args.every, args.server_limit, args.delay, theirs)
    )
    server.start()
    try:
        url = ours.recv()
        cache = args.out / f"cache-{bound}"
        shutil.rmtree(cache, ignore_errors=True)
        t0 = time.perf_counter()
        dm = make(
            f"{url}/{dataset.name}",
            args,
            cache_dir=str(cache),
            max_requests=bound,
            retries=args.retries,
            retry_backoff=args.retry_backoff,
        )
        got = passes(dm)
        seconds = time.perf_counter() - t0
        stats = dm.storage_stats
        ours.send("stop")
        seen = ours.recv()
    finally:
        server.join(30)
        if server.is_alive():
            server.kill()
    return {
        "max_requests": bound,
        **{f"server_{k}": v for k, v in seen.items()},
        "loader_retries": stats["retries"],
        "loader_throttled": stats["throttled"],
        "seconds": round(seconds, 2),
        "same_batches": got == want,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from bionemo_wds.prepare import PrepareOptions, prepare

    args.out.mkdir(parents=True, exist_ok=True)
    dataset = args.out / "kleb"
    prepare([KLEBSIELLA], dataset, PrepareOptions(**PREPARE))
    want = passes(make(str(dataset), args))
    rows = [run_bound(bound, dataset, args, want) for bound in args.max_requests]
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return 0
    limit = f"above {args.server_limit} in flight" if args.server_limit else "no limit in flight"
    print(
        f"server: 503 SlowDown to every {args.every}th request, {limit}, each held {args.delay * 1000:.0f} ms; "
        f"loader: {args.workers} workers, {args.retries} attempts"
    )
    head = ("max_requests", "requests", "503s", "peak in flight", f"busiest {args.delay * 1000:.0f} ms",
            "busiest 1 s", "mean req/s", "retries", "throttled", "seconds", "same batches")  # fmt: skip
    print(" | ".join(head))
    for r in rows:
        rate = f"{r['server_mean_rate']:.0f}" if r["server_mean_rate"] else "-"
        cells = (r["max_requests"], r["server_requests"], r["server_throttled"], r["server_peak_in_flight"],
                 r["server_busiest_window"], r["server_busiest_second"], rate, r["loader_retries"],
                 r["loader_throttled"], r["seconds"], r["same_batches"])  # fmt: skip
        print(" | ".join(str(c) for c in cells))
    return 0 if all(r["same_batches"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
