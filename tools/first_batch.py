"""Set-up to the first training batch of a large dataset whose shards can really be read: one real
shard hard-linked as every shard of the manifest (the readable dataset of `manifest_scale.py
--readable`, and its ``first-batch`` measurement).

`make_template` prepares a small real dataset (`prepare`, all train) whose first shard is full;
`write_linked` makes a dataset of `shards` shards, each a hard link of that shard (same bytes,
size and sha256; a link costs a directory entry, no data blocks), listed in a manifest written by
the real writer (`format.write_manifest`: the record index file holds that shard's rows once per
shard). Every check the loader makes on what it reads (sizes against the manifest, each record's
crc32 and window count) passes as on a prepared dataset, so `measure` times what a training job
waits for: ``GenomicWebDataModule.setup("fit")`` and the first batch of ``train_dataloader()``, on
one data-parallel rank of a given world size, with a given number of loader workers.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from bionemo_wds.format import MANIFEST_NAME, read_manifest, shard_indexes, shard_name
from bionemo_wds.format.manifest import write_manifest
from bionemo_wds.storage.store import Store

REPO = Path(__file__).resolve().parents[1]
#: The genome the template is prepared from by default (5.5 Mb: 762 windows of 8,192 tokens).
KLEBSIELLA = REPO / "bionemo_wds" / "data" / "klebsiella_fragmented_assembly.fa.gz"


def make_template(where: Path, seq_length: int, records: int, windows: int, fasta: Path = KLEBSIELLA) -> Path:
    """A prepared dataset at `where` (all train; reused when there) whose shards hold `records`
    records of `windows` windows of `seq_length` tokens; an error when its first shard is not full
    (the genome is too short for one)."""
    from bionemo_wds.prepare import PrepareOptions, prepare

    if not (where / MANIFEST_NAME).exists():
        opts = PrepareOptions(
            seq_length=seq_length,
            samples_per_shard=records * windows,
            windows_per_record=windows,
            split=(1, 0, 0),
            progress=False,
        )
        prepare([fasta], where, opts)
    first = read_manifest(where).splits["train"].shards[0]
    if first.n_samples != records * windows:
        raise SystemExit(f"{fasta} gives {first.n_samples} windows in its first shard, not {records * windows}")
    return where


def write_linked(root: Path, template: Path, shards: int, mark: str | None = None, link: bool = True) -> int:
    """Write at `root` a dataset of `shards` train shards, each the template's first shard (a hard
    link, or a copy when not `link`), its manifest written by `write_manifest` (request marked
    ``synthetic: mark``); the template's other files (the sequence table) are linked beside it.
    Returns the shards written."""
    manifest = read_manifest(template)
    index = shard_indexes(Store(template), manifest, "train")[0]  # type: ignore[index]
    assert index is not None
    obj = manifest.to_json()
    info = obj["splits"]["train"]
    first = info["shards"][0]
    info.pop("record_index", None)  # written again, for the linked shards
    prefix = manifest.params.prefix
    (root / "train").mkdir(parents=True, exist_ok=True)
    source = template / first["path"]
    put = os.link if link else shutil.copyfile
    entries = []
    for i in range(shards):
        rel = f"train/{shard_name(i, prefix)}"
        target = root / rel
        if target.exists():
            target.unlink()
        try:
            put(source, target)
        except OSError as exc:  # a file system's most links to one file (ext4: 65,000): link a fresh copy
            if exc.errno != errno.EMLINK:
                raise
            shutil.copyfile(source, target)
            source = target
        entry = {key: first[key] for key in ("n_samples", "n_tokens", "bytes", "sha256")}
        entries.append({"path": rel, **entry, "records": index})
    info["shards"] = entries
    info["n_samples"] = shards * first["n_samples"]
    info["n_tokens"] = shards * first["n_tokens"]
    info["n_bases"] = info["n_tokens"] - 3 * info["n_samples"]  # BOS, SEP and EOS of each window
    obj["splits"] = {"train": info}
    if mark is not None:
        obj["request"] = {"synthetic": mark, **obj["request"]}
    for path in template.iterdir():
        if path.is_file() and path.name != MANIFEST_NAME and not (root / path.name).exists():
            put(path, root / path.name)
    write_manifest(root / MANIFEST_NAME, obj)
    return shards


def _peak_kib(pid: int | str) -> int:
    """``VmHWM`` of a process (KiB; 0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def children_peak_mb() -> float:
    """The largest peak resident memory (``VmHWM``, MB) of this process's children now (loader workers)."""
    pids: list[str] = []
    for task in Path("/proc/self/task").iterdir():
        try:
            pids += (task / "children").read_text().split()
        except OSError:
            continue
    return max((_peak_kib(pid) for pid in pids), default=0) / 1024


def batch_digest(batch: dict[str, Any]) -> str:
    """sha256 of a batch's arrays (by key, in key order): equal batches, equal digests."""
    sha = hashlib.sha256()
    for key in sorted(batch):
        value = batch[key]
        array = value.numpy() if hasattr(value, "numpy") else np.asarray(value)
        sha.update(key.encode() + str(array.dtype).encode() + str(array.shape).encode())
        sha.update(np.ascontiguousarray(array).tobytes())
    return sha.hexdigest()


def measure(root: Path, seq_length: int, micro: int, workers: int, rank: int, world: int) -> dict[str, Any]:
    """Set-up to the first training batch of rank `rank` of `world` with `workers` loader workers:
    the seconds of ``setup("fit")`` and of the first batch (wall clock, and this process's CPU), the
    rank's plan (batches), the peak
    resident memory of this process (and of its loader workers), and the first batch's digest."""
    from benchmarks.memory import peak_rss_mb
    from bionemo_wds import GenomicWebDataModule
    from bionemo_wds.load.splits import Split

    dm = GenomicWebDataModule(
        str(root), seq_length=seq_length, micro_batch_size=micro, num_workers=workers, dp_rank=rank, dp_size=world
    )
    with open("/proc/self/statm") as statm:  # after the imports (torch, Lightning), before the set-up
        base = int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    c0, t0 = time.process_time(), time.perf_counter()
    dm.setup("fit")
    c1, t1 = time.process_time(), time.perf_counter()
    batches = iter(dm.train_dataloader())
    batch = next(batches)
    c2, t2 = time.process_time(), time.perf_counter()
    out: dict[str, Any] = {
        "setup_fit_s": t1 - t0,
        "first_batch_s": t2 - t1,
        "to_first_batch_s": t2 - t0,
        "setup_cpu_s": c1 - c0,  # this process's CPU seconds: less moved by a busy machine than the wall clock
        "first_batch_cpu_s": c2 - c1,
        "plan_batches": len(dm.plans[Split.train]),
        "base_rss_mb": base,
        "peak_rss_mb": peak_rss_mb(),
    }
    if workers:
        out["worker_peak_rss_mb"] = children_peak_mb()
    out["batch_sha256"] = batch_digest(batch)
    del batches
    return out
