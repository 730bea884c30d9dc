"""One measurement in its own process, so the parent can watch its memory from outside.

``python -m benchmarks.child prepare|load --peer NAME ...`` prints one JSON line.
With ``--url`` (peer ``ours`` only) the data is prepared into / read from that URL (endpoint and
credentials from the environment), through a range cache in ``--cache-dir`` when given, and a load
also reports the storage counters of its pass (``storage``). With ``--ready-file`` it creates that
file once its imports are done (`memory.PeakPss` samples the start-up before it less often).

A load reports the pass alone (``seconds``: first request for a batch to the last batch, worker
start-up included) and with the peer's loader set-up before it (``setup_s``: making its dataset and
loader objects; ``total_s`` = both), the time to the first model-ready batch from the start of
set-up (``ttfb_s``), the token slots that are not padding (``real_tokens``: tokens other than
PAD in every batch of the pass, counted outside the pass's time and CPU), and the CPU seconds of set-up
and pass in this process and its loader workers (``cpu_s``). Module imports come before all of
it (a process pays them once, whatever it loads).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.peers import PEERS, make_peer
from bionemo_wds.core.tokenizer import PAD_ID

#: The peers whose loaders are Lightning data modules (ours, or the classic WebDataModule's pickles).
LIGHTNING_PEERS = frozenset(
    {"ours", "ours_windows", "ours_packed", "ours_hf", "ours_packed_hf", "ours_mlm", "ours_mlm_main", "pickled_int64"}
    | {"ours_nt", "ours_dnabert6", "ours_caduceus", "ours_bpe", "ours_nt_mlm", "ours_hf_device", "ours_mlm_device"}
)

#: What the server of the timing runs imports before it forks them (`forked.Children`): what
#: `_import_everything` imports for any peer, but the optional libraries (litdata, streaming), which
#: a run of their peer imports itself (before its timing). A memory run starts as a fresh interpreter
#: and imports only what its peer uses.
PRELOAD = (
    "numpy.random",
    "pyfaidx",
    "webdataset",
    "bionemo_wds.prepare",
    "benchmarks.streaming_peers",
    "bionemo_wds.compat.webdatamodule",
    "bionemo_wds.lightning.datamodule",
    "benchmarks.child",
)


def _import_everything(peer: str, action: str) -> None:
    """Import what the peer uses before any timing, and only that: an optional library, and
    Lightning (which only our data modules and `pickled_int64`'s `PickledDataWDS` use), would count
    in the memory of every peer that does not use it, and Lightning takes most of a child's start-up."""
    import numpy.random  # noqa: F401  (`prepare` draws from it; numpy imports it lazily)
    import pyfaidx  # noqa: F401
    import webdataset  # noqa: F401

    import bionemo_wds.prepare
    from benchmarks.streaming_peers import LIBRARIES, import_library

    if peer in LIGHTNING_PEERS and (action == "load" or peer == "pickled_int64"):
        import bionemo_wds.compat.webdatamodule
        import bionemo_wds.lightning.datamodule  # noqa: F401
    if peer in LIBRARIES:
        import_library(peer)


def cpu_seconds(who: int) -> float:
    """CPU seconds (user + system) used so far by this process, all its threads
    (``resource.RUSAGE_SELF``), or by every child process it has waited for
    (``resource.RUSAGE_CHILDREN``: DataLoader workers count once their loader has joined them)."""
    usage = resource.getrusage(who)
    return usage.ru_utime + usage.ru_stime


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("action", choices=("prepare", "load"))
    p.add_argument("--peer", choices=PEERS, required=True)
    p.add_argument("--fasta", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--seq-length", type=int, required=True)
    p.add_argument("--stride", type=int, required=True)
    p.add_argument("--tail", default="end")
    p.add_argument("--batch-size", type=int, required=True)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--compress", default=None)
    p.add_argument("--url", default=None, help="ours only: prepare into / read from this URL")
    p.add_argument("--cache-dir", default=None, help="with --url: the loader's range cache")
    p.add_argument("--ready-file", default=None, help="created once the imports are done (for `memory.PeakPss`)")
    args = p.parse_args(argv)
    if (args.url or args.cache_dir) and args.peer != "ours":
        p.error("--url and --cache-dir are for --peer ours")
    if args.cache_dir and not args.url:
        p.error("--cache-dir needs --url")
    remote = {"url": args.url, "cache_dir": args.cache_dir} if args.url else {}
    _import_everything(args.peer, args.action)  # module imports are start-up cost, outside every peer's timing
    if args.ready_file:
        Path(args.ready_file).touch()
    peer = make_peer(
        args.peer,
        Path(args.fasta),
        Path(args.workdir),
        args.seq_length,
        args.stride,
        args.tail,
        args.batch_size,
        compress=args.compress,
        **remote,
    )
    if args.action == "prepare":
        if not args.url:  # a URL is prepared with overwrite=True (its bucket is the benchmark's own)
            shutil.rmtree(peer.dir, ignore_errors=True)  # every prepare starts from nothing
        t0 = time.perf_counter()
        peer.prepare(args.workers)
        seconds = time.perf_counter() - t0
        print(json.dumps({"seconds": seconds, "disk_bytes": peer.disk_bytes()}))
        return 0
    samples = tokens = real = bases = 0
    first = None
    own0, children0 = cpu_seconds(resource.RUSAGE_SELF), cpu_seconds(resource.RUSAGE_CHILDREN)
    t_setup = time.perf_counter()
    batches = peer.batches(args.workers)  # loader set-up (index, manifest, dataset, loader objects)
    t0 = time.perf_counter()
    counting = counting_cpu = 0.0  # counting the real tokens: left out of the pass's time and CPU
    for batch in batches:
        if first is None:
            first = time.perf_counter() - t0
        t_count, cpu_count = time.perf_counter(), time.thread_time()
        ids = batch["tokens"] if "tokens" in batch else batch["input_ids"]  # the hf format's name
        samples += ids.shape[0]
        tokens += ids.numel()
        # the slots that are not padding (numpy: one thread, whose CPU time thread_time measures)
        on_cpu = ids.device.type == "cpu"  # the device peers' batches are on the GPU
        real += int(np.count_nonzero(ids.numpy() != PAD_ID)) if on_cpu else int((ids != PAD_ID).sum())
        if "lengths" in batch:  # bases of each row (a tokenizer's rows hold more than one per token)
            bases += int(batch["lengths"].sum())
        counting += time.perf_counter() - t_count
        counting_cpu += time.thread_time() - cpu_count
    seconds = time.perf_counter() - t0 - counting
    own = cpu_seconds(resource.RUSAGE_SELF) - own0 - counting_cpu
    del batches  # an exhausted loader has joined its workers already; this shuts down any left
    cpu = own + cpu_seconds(resource.RUSAGE_CHILDREN) - children0
    setup = t0 - t_setup
    out: dict[str, Any] = {
        "seconds": seconds,  # the pass: from the first request for a batch to the last batch
        "setup_s": setup,  # making the peer's dataset and loader objects, before the first request
        "total_s": setup + seconds,  # the pass with its set-up: what a user waits for
        "samples": samples,
        "tokens": tokens,
        "real_tokens": real,  # tokens that are not PAD: what the model learns from
        "bases": bases,  # bases the batches hold (0: the peer's batches do not say)
        "first_batch_s": first,  # first request -> first model-ready batch
        "ttfb_s": setup + first if first is not None else None,  # set-up start -> first batch
        "cpu_s": cpu,  # set-up and pass, this process and its loader workers (`cpu_seconds`)
    }
    if args.url:
        out["storage"] = peer.storage_stats()  # counted from set-up on: this pass's fetches and cache use
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
