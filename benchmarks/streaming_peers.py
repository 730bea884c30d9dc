"""The benchmark's streaming-library peers: LitData and MosaicML Streaming, on the same windows.

Both store every window (all windows of every sequence: seq_length, stride and tail as given, no
split) as a uint8 byte string of its bases, in chunks of about `SAMPLES_PER_SHARD` windows (the
size of `ours`' shards, so every loader worker has chunks of its own), and load them with the
library's own shuffling ``StreamingDataset`` over the local directory:

- ``litdata``: written by ``litdata.optimize`` (a generator over spans of window indices, in worker
  processes as the library starts them), read by ``litdata.StreamingDataset(shuffle=True, seed=...)``
  in ``litdata.StreamingDataLoader``, the loader its docs pair it with.
- ``mosaic``: written by ``streaming.MDSWriter`` (one ``bytes`` column, one process: the writer has
  no workers), read by ``streaming.StreamingDataset(local=..., shuffle=True, shuffle_seed=...,
  batch_size=...)`` in a torch ``DataLoader``, as its quick start shows.

From there both end like the other peers: the loader's ``collate_fn`` (in the worker) flips each
window to the other strand with probability `rc_prob` (Python's RNG per window, as `eden_fly`) and
packs the batch into a compact uint8 batch; the main process expands it with `to_model_inputs`
(as `raw_limit`): tokens and labels int64, loss mask, position ids.

Neither library is a dependency: `unavailable` says why a peer cannot run here (the benchmark skips
it with that note), and the library is imported only by the peer that uses it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.peers import SAMPLES_PER_SHARD, SEED, Peer, WindowIndex
from bionemo_wds.core.tokenizer import COMPLEMENT_TABLE, PAD_ID

#: Peer name -> the module its library is imported as.
LIBRARIES = {"litdata": "litdata", "mosaic": "streaming", "litdata_packed": "litdata"}
INSTALL_HINT = "pip install 'bionemo-wds[bench]'"


def import_library(peer: str) -> Any:
    """Import the library of streaming peer `peer` (ImportError, or the library's own error, when
    it cannot be). Typed ``Any``: neither library is a dependency, so neither is type-checked.

    LitData's version check against PyPI is turned off (a benchmark sends no request outside this
    machine). MosaicML Streaming's package imports its torchvision-based image datasets at the top;
    where torchvision cannot be imported (not installed, or a CUDA build beside a CPU torch, which
    fails on load) that one subpackage is replaced by an empty module: MDS reading and writing
    never use it."""
    if LIBRARIES.get(peer) == "litdata":
        os.environ.setdefault("LITDATA_DISABLE_VERSION_CHECK", "1")
    elif peer == "mosaic" and "streaming" not in sys.modules:
        try:
            importlib.import_module("torchvision")
        except Exception:  # ImportError, or RuntimeError from a mismatched build
            sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))
    elif peer not in LIBRARIES:
        raise ValueError(f"{peer!r} is not a streaming peer ({', '.join(LIBRARIES)})")
    return importlib.import_module(LIBRARIES[peer])


def unavailable(peer: str) -> str | None:
    """Why `peer` cannot run here (its library is missing or fails to import), or None when it can
    (and for every peer that needs no optional library). The sequence-layout peers say so where
    this checkout cannot prepare or load that layout yet (`packing_peers.layout_missing`)."""
    from benchmarks.format_peers import FORMAT_PEERS, format_missing
    from benchmarks.packing_peers import SEQUENCE_PEERS, layout_missing
    from benchmarks.tokenizer_peers import TOKENIZER_PEERS, tokenizer_missing

    if peer in TOKENIZER_PEERS:
        return layout_missing() or tokenizer_missing()
    if peer in SEQUENCE_PEERS:
        return layout_missing() or (format_missing(peer) if peer in FORMAT_PEERS else None)
    if peer in FORMAT_PEERS:
        return format_missing(peer)
    if peer not in LIBRARIES:
        return None
    try:
        import_library(peer)
    except Exception as exc:  # any failure to import means: skip, and say why
        return f"{LIBRARIES[peer]} is not installed or does not import ({type(exc).__name__}: {exc}); {INSTALL_HINT}"
    return None


class WindowBytes:
    """Picklable ``fn`` for `litdata.optimize`: yields the bases of windows ``lo..hi-1`` (FASTA
    order) as bytes; each optimize worker opens the FASTA once."""

    def __init__(self, fasta: Path, seq_length: int, stride: int, tail: str):
        self.fasta, self.seq_length, self.stride, self.tail = fasta, seq_length, stride, tail
        self._index: WindowIndex | None = None
        self._fa: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_index": None, "_fa": None}

    def __call__(self, span: tuple[int, int]) -> Iterator[bytes]:
        import pyfaidx

        if self._index is None:
            self._index = WindowIndex(self.fasta, self.seq_length, self.stride, self.tail)
            self._fa = pyfaidx.Fasta(str(self.fasta), as_raw=True)
        for i in range(*span):
            yield self._index.bases(self._fa, i)


class CompactBatch:
    """``collate_fn`` run in the loader worker: windows (bytes, memoryviews, or dicts with `key`)
    -> a compact batch (uint8 bases padded with PAD to `window`, lengths, no tags), each window
    reverse-complemented with probability `rc_prob` (Python's RNG, seeded per worker)."""

    def __init__(self, window: int, rc_prob: float, seed: int = SEED, key: str | None = None):
        self.window, self.rc_prob, self.seed, self.key = window, rc_prob, seed, key
        self._rng: random.Random | None = None

    def __call__(self, items: list[Any]) -> dict[str, np.ndarray]:
        if self._rng is None:  # first batch in this process: a stream of its own per worker
            info = torch.utils.data.get_worker_info()
            self._rng = random.Random(f"{self.seed}/{info.id if info else -1}")
        n = len(items)
        bases = np.full((n, self.window), PAD_ID, dtype=np.uint8)
        lengths = np.empty(n, dtype=np.int32)
        for i, item in enumerate(items):
            row = item if self.key is None else item[self.key]
            if self.rc_prob > 0 and self._rng.random() < self.rc_prob:
                row = bytes(row)[::-1].translate(COMPLEMENT_TABLE)
            lengths[i] = len(row)
            bases[i, : len(row)] = np.frombuffer(row, dtype=np.uint8)
        return {
            "bases": bases,
            "lengths": lengths,
            "tags": np.zeros((n, 0), dtype=np.uint8),
            "tag_lengths": np.zeros(n, dtype=np.int32),
        }


class _StreamingPeer(Peer):
    """Shared by both: the window table, the spans of window indices, the model-ready batches."""

    def _index(self) -> WindowIndex:
        return WindowIndex(self.fasta, self.seq_length, self.stride, self.tail)

    def _spans(self, n: int) -> list[tuple[int, int]]:
        return [(lo, min(lo + SAMPLES_PER_SHARD, n)) for lo in range(0, n, SAMPLES_PER_SHARD)]

    def _chunk_bytes(self, window: int) -> int:
        return SAMPLES_PER_SHARD * window  # what `ours` puts in one shard: 4 MB at 8 kb windows

    def _model_inputs(self, loader: Any) -> Iterator[dict[str, Any]]:
        from bionemo_wds.load.batch.model_inputs import to_model_inputs

        for compact in loader:
            yield to_model_inputs(compact, self.seq_length, control_tags=True)


class LitData(_StreamingPeer):
    name = "litdata"

    def prepare(self, workers: int) -> None:
        n = len(self._index())
        fn = WindowBytes(self.fasta, self.seq_length, self.stride, self.tail)
        self._optimize(fn, self._spans(n), n, workers, chunk_bytes=self._chunk_bytes(self._index().window))

    def _optimize(self, fn: Any, inputs: list[Any], items: int, workers: int, **options: Any) -> None:
        """``litdata.optimize(fn, inputs, ...)`` into `dir` with `options`, its scratch folders kept
        beside `dir`; checks that it wrote `items` items (it logs a worker's failure and carries on)."""
        ld = import_library(self.name)
        start_method = multiprocessing.get_start_method(allow_none=True)
        # optimize's scratch folders default to /tmp/chunks and /tmp/data: keep them in our directory
        scratch = {
            "DATA_OPTIMIZER_CACHE_FOLDER": str(self.dir.parent / f".{self.name}_cache"),
            "DATA_OPTIMIZER_DATA_CACHE_FOLDER": str(self.dir.parent / f".{self.name}_data"),
        }
        saved = {k: os.environ.get(k) for k in scratch}
        os.environ.update(scratch)
        Path(scratch["DATA_OPTIMIZER_CACHE_FOLDER"]).mkdir(parents=True, exist_ok=True)
        try:
            with _tempdir(Path(scratch["DATA_OPTIMIZER_CACHE_FOLDER"])):  # and its list of inputs, /tmp
                ld.optimize(
                    fn=fn,
                    inputs=inputs,
                    output_dir=str(self.dir),
                    num_workers=max(workers, 1),
                    verbose=False,
                    **options,
                )
        finally:
            # optimize sets the process-wide start method (to spawn): give the caller its own back
            multiprocessing.set_start_method(start_method, force=True)
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            for path in scratch.values():
                shutil.rmtree(path, ignore_errors=True)
        written = sum(c["chunk_size"] for c in json.loads((self.dir / "index.json").read_text())["chunks"])
        if written != items:
            raise RuntimeError(f"litdata.optimize wrote {written} of {items} items into {self.dir}")

    def batches(self, workers: int, rc_prob: float = 0.5) -> Iterator[dict[str, Any]]:
        ld = import_library(self.name)
        dataset = ld.StreamingDataset(str(self.dir), shuffle=True, seed=SEED)
        loader = ld.StreamingDataLoader(
            dataset,
            batch_size=self.batch_size,
            num_workers=workers,
            collate_fn=CompactBatch(self._index().window, rc_prob),
        )
        return self._model_inputs(loader)


class Mosaic(_StreamingPeer):
    name = "mosaic"

    @property
    def _locks(self) -> Path:
        """Where the dataset's file locks go (the library puts them in the temp directory)."""
        return self.dir / "locks"

    def prepare(self, workers: int) -> None:
        import pyfaidx

        streaming = import_library(self.name)
        index = self._index()
        fa = pyfaidx.Fasta(str(self.fasta), as_raw=True)
        limit = self._chunk_bytes(index.window)
        with streaming.MDSWriter(out=str(self.dir), columns={"tokens": "bytes"}, size_limit=limit) as out:
            for i in range(len(index)):
                out.write({"tokens": index.bases(fa, i)})

    def batches(self, workers: int, rc_prob: float = 0.5) -> Iterator[dict[str, Any]]:
        streaming = import_library(self.name)
        # shared-memory segments that a killed earlier run left behind
        importlib.import_module("streaming.base.util").clean_stale_shared_memory()
        self._locks.mkdir(parents=True, exist_ok=True)
        with _tempdir(self._locks):  # the dataset keeps the lock directory it saw when made
            dataset = streaming.StreamingDataset(
                local=str(self.dir), shuffle=True, shuffle_seed=SEED, batch_size=self.batch_size
            )
        loader = torch.utils.data.DataLoader(
            dataset,
            batch_size=self.batch_size,
            num_workers=workers,
            collate_fn=CompactBatch(self._index().window, rc_prob, key="tokens"),
        )
        return self._model_inputs(loader)

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.dir.rglob("*") if p.is_file() and self._locks not in p.parents)


@contextlib.contextmanager
def _tempdir(path: Path) -> Iterator[None]:
    """`tempfile.gettempdir()` is `path` inside the block (this process only)."""
    saved = tempfile.tempdir
    tempfile.tempdir = str(path)
    try:
        yield
    finally:
        tempfile.tempdir = saved
