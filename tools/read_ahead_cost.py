#!/usr/bin/env python
"""The throughput cost of the global epoch order over a remote store: one train epoch of
GenomicWebDataModule read over HTTP from a server on 127.0.0.1 that waits `--latency-ms` before
answering each request (standing for an object store's first-byte latency), with the reader's
read-ahead as it is and with it off.

    python tools/read_ahead_cost.py DATASET [--latency-ms 5 20] [--micro-batch-size 8] ...

DATASET is a `bionemo-wds prepare` output (the train split is read: every record once per epoch,
in the plan's global order). The server (a thread of this process; answers single byte ranges, 206)
counts the range requests of the epoch; the setup's requests (manifest, index, listings) are not
counted. "read-ahead off" sets `RemoteShards.reads_ahead` to False for the run, so the reader asks
for each record when a batch needs it, one request at a time (what a reader without read-ahead
does). Each setting runs `--repeat` times (fresh data module, no cache) and the fastest is reported:
samples per second of the epoch (after setup) and range requests per sample. The batches' keys of
every run are compared with the first run's: the read-ahead changes when bytes arrive, never which.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import http.server
import json
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.storage.shards import RemoteShards

HOST = "127.0.0.1"
_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """The module's text as written, and each option's default."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=_HelpFormatter)
    p.add_argument("dataset", type=Path, help="a prepared dataset root (served over HTTP)")
    p.add_argument("--latency-ms", type=float, nargs="+", default=[5.0, 20.0], help="wait before each answer")
    p.add_argument("--micro-batch-size", type=int, default=8, help="samples per batch")
    p.add_argument("--shuffle-buffer", type=int, default=1000, help="the data module's shuffle_buffer")
    p.add_argument("--num-workers", type=int, default=0, help="loader worker processes")
    p.add_argument("--seed", type=int, default=1, help="the data module's seed")
    p.add_argument("--repeat", type=int, default=2, help="runs of each setting; the fastest is reported")
    p.add_argument("--json", action="store_true", help="print the results as one JSON object as well")
    return p.parse_args(argv)


class Handler(http.server.SimpleHTTPRequestHandler):
    """Static files with single byte ranges, a wait before each answer and a count of range requests."""

    server: Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def send_head(self) -> Any:
        time.sleep(self.server.latency)
        header = self.headers.get("Range")
        path = self.translate_path(self.path)
        match = _RANGE.match(header or "")
        if match is None or not os.path.isfile(path):
            return super().send_head()
        with self.server.lock:
            self.server.ranges += 1
        size = os.path.getsize(path)
        first = int(match.group(1))
        last = min(int(match.group(2)) if match.group(2) else size - 1, size - 1)
        f = open(path, "rb")
        f.seek(first)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.send_header("Content-Length", str(last - first + 1))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        return Slice(f, last - first + 1)


class Slice:
    """At most `length` bytes of an open file from its position (what `copyfile` reads)."""

    def __init__(self, f: Any, length: int):
        self.f, self.left = f, length

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(self.left if n < 0 else min(n, self.left))
        self.left -= len(data)
        return bytes(data)

    def close(self) -> None:
        self.f.close()


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    latency = 0.0
    ranges = 0
    lock = threading.Lock()


@contextlib.contextmanager
def serving(directory: Path) -> Iterator[Server]:
    """`directory` served on 127.0.0.1 (a free port) in a thread of this process."""
    server = Server((HOST, 0), functools.partial(Handler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def read_ahead(on: bool) -> Iterator[None]:
    """The reader's read-ahead on (as it is) or off, for the data modules set up inside."""
    saved = RemoteShards.reads_ahead
    RemoteShards.reads_ahead = on
    try:
        yield
    finally:
        RemoteShards.reads_ahead = saved


def epoch(server: Server, args: argparse.Namespace) -> tuple[float, int, int, list[list[str]]]:
    """One train epoch over the server: (seconds after setup, samples, range requests, keys)."""
    url = f"http://{HOST}:{server.server_address[1]}"
    dm = GenomicWebDataModule(
        url,
        micro_batch_size=args.micro_batch_size,
        seed=args.seed,
        rc_prob=0.0,
        num_workers=args.num_workers,
        shuffle_buffer=args.shuffle_buffer,
    )
    dm.setup("fit")
    loader = dm.train_dataloader()
    with server.lock:
        server.ranges = 0
    t0 = time.perf_counter()
    keys = [list(batch["keys"]) for batch in loader]
    seconds = time.perf_counter() - t0
    return seconds, sum(len(k) for k in keys), server.ranges, keys


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every (latency, read-ahead) setting's fastest epoch."""
    rows: list[dict[str, Any]] = []
    reference: list[list[str]] | None = None
    with serving(args.dataset) as server:
        for latency in args.latency_ms:
            server.latency = latency / 1000
            for on in (True, False):
                runs = []
                with read_ahead(on):
                    for _ in range(args.repeat):
                        seconds, samples, ranges, keys = epoch(server, args)
                        reference = reference or keys
                        if keys != reference:
                            raise SystemExit(f"latency {latency} ms, read-ahead {on}: the batches differ")
                        runs.append((seconds, samples, ranges))
                seconds, samples, ranges = min(runs)
                rows.append(
                    {
                        "latency_ms": latency,
                        "read_ahead": on,
                        "seconds": seconds,
                        "samples": samples,
                        "samples_per_s": samples / seconds,
                        "requests": ranges,
                        "requests_per_sample": ranges / max(samples, 1),
                    }
                )
    return rows


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    rows = measure(args)
    print(f"{'latency':>8}  {'read-ahead':>10}  {'samples':>7}  {'seconds':>7}  {'samples/s':>9}  {'GETs/sample':>11}")
    for r in rows:
        print(
            f"{r['latency_ms']:>6.0f}ms  {'on' if r['read_ahead'] else 'off':>10}  {r['samples']:>7}  "
            f"{r['seconds']:>7.2f}  {r['samples_per_s']:>9.0f}  {r['requests_per_sample']:>11.3f}"
        )
    if args.json:
        print(json.dumps(rows))


if __name__ == "__main__":
    main()
