"""The loaders compared by the benchmark, each reduced to `prepare` and `batches`.

Every peer serves the same windows (all windows of every sequence: seq_length, stride and tail as
given, no split) and ends in the same model-ready batch on the main process: ``tokens`` and
``labels`` int64, ``loss_mask`` float32, ``position_ids``, ``BOS + SEP + bases + EOS`` padded to
``seq_length``. What each peer does inside its timing is the approach it stands for:

- ``eden_fly``: map-style dataset; ``__getitem__`` finds the window with `np.searchsorted`, reads it
  from the FASTA through pyfaidx, reverse-complements it with probability 0.5 (global RNG, as Eden),
  tokenizes and builds the sample's tensors; default collate.
- ``pickled_int64``: each window's int64 token tensor pickled into tar shards by `PickledDataWDS`,
  read through `WebDataModule` with the pipelines its docs show (untuple + shuffle, shuffle +
  batched/vstack); labels, loss mask and positions built per batch in the main process.
- ``raw_limit``: all windows in one uint8 memmap, sliced into batches (seeded batch order) and
  expanded with `to_model_inputs`: the ceiling for any loader of these windows.
- ``ours``: `GenomicWebDataModule`'s training loader (the epoch plan, records read by their index,
  reverse complement, compact batches) and `model_inputs` on each batch; an exact epoch leaves
  fewer than one batch of windows out.
- ``litdata``, ``mosaic``: the windows as uint8 byte strings in LitData's and MosaicML Streaming's
  own formats, read by their shuffling ``StreamingDataset`` (`streaming_peers`; optional libraries).

The packing peers (`packing_peers`) serve other samples from the same FASTA: ``ours_windows`` the
same windows cut at load from a sequence-layout dataset, ``ours_packed`` and ``litdata_packed``
samples filled with whole sequences; the benchmark's padding column tells them apart.

``ours`` can also live behind a URL (``url="s3://bucket/ours"``: prepared into it, read through the
storage layer with an optional node-local range cache, `cache_dir`); `storage_stats` then says what a
pass fetched.
"""

from __future__ import annotations

import math
import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bionemo_wds.core.tokenizer import BOS_ID, COMPLEMENT_TABLE, EOS_ID, PAD_ID, SEP_ID, UPPERCASE_TABLE

PEERS = (
    "eden_fly",
    "pickled_int64",
    "raw_limit",
    "ours",
    "ours_windows",
    "ours_packed",
    "ours_hf",
    "ours_packed_hf",
    "ours_mlm",
    "ours_mlm_main",
    "ours_hf_device",
    "ours_mlm_device",
    "ours_nt",
    "ours_dnabert6",
    "ours_caduceus",
    "ours_bpe",
    "ours_nt_mlm",
    "litdata",
    "litdata_packed",
    "mosaic",
)
SEED = 1234
#: Shard size for `ours` (4 MB at 8 kb windows): enough shards that every loader worker has some.
SAMPLES_PER_SHARD = 512


def labels_mask_positions(tokens: torch.Tensor) -> dict[str, torch.Tensor]:
    """Complete int64 token rows into a model-ready batch (labels, loss mask, positions)."""
    labels = torch.full_like(tokens, PAD_ID)
    labels[:, :-1] = tokens[:, 1:]
    loss_mask = (labels > SEP_ID + 1).to(torch.float32)  # bases are >= 65; specials are 0..4
    positions = torch.arange(tokens.shape[1]).expand_as(tokens)
    return {"tokens": tokens, "labels": labels, "loss_mask": loss_mask, "position_ids": positions}


def sample_tokens(bases: bytes, seq_length: int) -> np.ndarray:
    """One sample's int64 tokens: BOS + SEP + bases + EOS, PAD to `seq_length`."""
    out = np.full(seq_length, PAD_ID, dtype=np.int64)
    out[0], out[1] = BOS_ID, SEP_ID
    n = len(bases)
    out[2 : 2 + n] = np.frombuffer(bases, dtype=np.uint8)
    out[2 + n] = EOS_ID
    return out


class WindowIndex:
    """The windows of a FASTA (from its .fai), shared by peers that need them in FASTA order."""

    def __init__(self, fasta: Path, seq_length: int, stride: int, tail: str):
        import pyfaidx

        from bionemo_wds.prepare.windows import window_length, window_table

        self.faidx = pyfaidx.Faidx(str(fasta))
        self.names = list(self.faidx.index)
        lengths = np.array([self.faidx.index[n].rlen for n in self.names], dtype=np.int64)
        self.window = window_length(seq_length, 0)
        self.table = window_table(np.arange(len(lengths)), lengths, self.window, stride, tail)
        # Eden's lookup structure: cumulative window counts per sequence
        counts = np.bincount(self.table.seq_index, minlength=len(lengths))
        self.cumulative = np.cumsum(counts)

    def __len__(self) -> int:
        return len(self.table)

    def bases(self, fa, i: int) -> bytes:
        """Window `i`'s bases, upper case, read through a ``pyfaidx.Fasta(..., as_raw=True)``."""
        seq, start, n = int(self.table.seq_index[i]), int(self.table.start[i]), int(self.table.length[i])
        return fa[self.names[seq]][start : start + n].encode().translate(UPPERCASE_TABLE)


# --- eden_fly ------------------------------------------------------------------------------------


class EdenFlyDataset(torch.utils.data.Dataset):
    """Eden's approach: locate, read and tokenize each window on every access."""

    def __init__(self, fasta: Path, seq_length: int, stride: int, tail: str):
        self.fasta, self.seq_length, self.stride, self.tail = fasta, seq_length, stride, tail
        self.index = WindowIndex(fasta, seq_length, stride, tail)
        self._fa: Any = None  # a pyfaidx.Fasta once opened (pyfaidx ships no type hints)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        import pyfaidx

        if self._fa is None:  # opened per worker process
            self._fa = pyfaidx.Fasta(str(self.fasta), as_raw=True)
        idx = self.index
        seq = int(np.searchsorted(idx.cumulative, i, side="right"))  # Eden's lookup of the sequence
        start, n = int(idx.table.start[i]), int(idx.table.length[i])
        bases = self._fa[idx.names[seq]][start : start + n].encode().translate(UPPERCASE_TABLE)
        if random.random() < 0.5:  # Eden's reverse-complement augmentation (global RNG, as Eden)
            bases = bases[::-1].translate(COMPLEMENT_TABLE)
        tokens = torch.from_numpy(sample_tokens(bases, self.seq_length))
        labels = torch.full_like(tokens, PAD_ID)
        labels[:-1] = tokens[1:]
        return {
            "tokens": tokens,
            "labels": labels,
            "loss_mask": (labels > SEP_ID + 1).float(),
            "position_ids": torch.arange(self.seq_length),
        }


# --- the peers -----------------------------------------------------------------------------------


class Peer:
    """prepare() once; batches() sets the loader up (untimed) and returns an iterator over one full
    pass of model-ready batches (timed)."""

    name = ""

    def __init__(
        self,
        fasta: Path,
        workdir: Path,
        seq_length: int,
        stride: int,
        tail: str,
        batch_size: int,
        compress: str | None = None,
    ):
        self.fasta, self.dir = Path(fasta), Path(workdir) / self.name
        self.seq_length, self.stride, self.tail, self.batch_size = seq_length, stride, tail, batch_size
        self.compress = compress

    def prepare(self, workers: int) -> None:
        raise NotImplementedError

    def disk_bytes(self) -> int:
        return sum(p.stat().st_size for p in self.dir.rglob("*") if p.is_file())

    def batches(self, workers: int) -> Iterator[dict[str, Any]]:
        raise NotImplementedError

    def storage_stats(self) -> dict[str, int] | None:
        """What the storage layer fetched since the loader was set up (None: a peer without one)."""
        return None


class EdenFly(Peer):
    name = "eden_fly"

    def prepare(self, workers: int) -> None:
        import pyfaidx

        self.dir.mkdir(parents=True, exist_ok=True)
        local = self.dir / self.fasta.name
        if not local.exists():
            os.link(self.fasta, local) if self.fasta.stat().st_dev == self.dir.stat().st_dev else shutil.copy(
                self.fasta, local
            )
        pyfaidx.Faidx(str(local))  # builds the .fai

    def batches(self, workers: int) -> Iterator[dict[str, Any]]:
        dataset = EdenFlyDataset(self.dir / self.fasta.name, self.seq_length, self.stride, self.tail)
        loader = torch.utils.data.DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=True,
            num_workers=workers,
            generator=torch.Generator().manual_seed(SEED),
        )
        return iter(loader)


class PickledInt64(Peer):
    name = "pickled_int64"

    def _names(self) -> list[str]:
        return [f"w{i:08d}" for i in range(len(WindowIndex(self.fasta, self.seq_length, self.stride, self.tail)))]

    def prepare(self, workers: int) -> None:
        import pickle

        import pyfaidx

        from bionemo_wds.compat.webdatamodule import PickledDataWDS, Split

        pickles = self.dir / "pickles"
        pickles.mkdir(parents=True, exist_ok=True)
        index = WindowIndex(self.fasta, self.seq_length, self.stride, self.tail)
        fa = pyfaidx.Fasta(str(self.fasta), as_raw=True)
        names = []
        for i in range(len(index)):
            bases = index.bases(fa, i)
            name = f"w{i:08d}"
            (pickles / f"{name}.tensor.pyd").write_bytes(
                pickle.dumps(torch.from_numpy(sample_tokens(bases, self.seq_length)))
            )
            names.append(name)
        module = PickledDataWDS(
            str(pickles),
            "tensor.pyd",
            {Split.train: names},
            str(self.dir / "tars-"),
            self.batch_size,
            n_tars_wds=max(4, len(names) // 1000),
        )
        module.prepare_data()
        shutil.rmtree(pickles)  # the loader reads only the tars

    def batches(self, workers: int) -> Iterator[dict[str, Any]]:
        import webdataset as wds
        from webdataset.filters import batched, shuffle

        from bionemo_wds.compat.webdatamodule import Split, WebDataModule

        n = len(self._names())
        untuple = lambda source: (sample for (sample,) in source)
        tars = str(self.dir / "tars-train")
        module = WebDataModule(  # fit needs a val split too; it is never read here
            {Split.train: tars, Split.val: tars},
            {Split.train: n, Split.val: n},
            "tensor.pyd",
            self.batch_size,
            pipeline_wds={Split.train: [untuple, shuffle(1000, rng=random.Random(SEED))]},
            pipeline_prebatch_wld={
                Split.train: [
                    shuffle(1000, rng=random.Random(SEED)),
                    batched(self.batch_size, collation_fn=torch.vstack),
                ]
            },
            kwargs_wds={Split.train: {"shardshuffle": 100, "nodesplitter": wds.split_by_node, "seed": SEED}},
            kwargs_wld={Split.train: {"num_workers": workers}},
        )
        module.setup("fit")
        return (labels_mask_positions(tokens) for tokens in module.train_dataloader())


class RawLimit(Peer):
    name = "raw_limit"

    def prepare(self, workers: int) -> None:
        import pyfaidx

        self.dir.mkdir(parents=True, exist_ok=True)
        index = WindowIndex(self.fasta, self.seq_length, self.stride, self.tail)
        fa = pyfaidx.Fasta(str(self.fasta), as_raw=True)
        mm = np.lib.format.open_memmap(
            self.dir / "windows.npy", mode="w+", dtype=np.uint8, shape=(len(index), index.window)
        )
        mm[:] = PAD_ID
        for i in range(len(index)):
            bases = index.bases(fa, i)
            mm[i, : len(bases)] = np.frombuffer(bases, np.uint8)
        mm.flush()
        np.save(self.dir / "lengths.npy", index.table.length.astype(np.int32))

    def batches(self, workers: int) -> Iterator[dict[str, Any]]:
        from bionemo_wds.load.batch.model_inputs import to_model_inputs
        from bionemo_wds.load.batch.to_torch import keep_numpy

        dataset = _RawBatches(self.dir, self.batch_size)
        # numpy batches, passed through as they are: the cheapest way across the worker boundary
        loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=workers, collate_fn=keep_numpy)
        return (to_model_inputs(compact, self.seq_length, control_tags=True) for compact in loader)


class _RawBatches(torch.utils.data.IterableDataset):
    """Compact batches sliced from the memmap, batch order seeded, batches split across workers."""

    def __init__(self, root: Path, batch_size: int):
        self.root, self.batch_size = root, batch_size

    def __iter__(self):
        mm = np.load(self.root / "windows.npy", mmap_mode="r")
        lengths = np.load(self.root / "lengths.npy")
        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        order = np.random.default_rng(SEED).permutation(len(lengths))
        n_batches = math.ceil(len(lengths) / self.batch_size)
        for b in range(wid, n_batches, nw):
            rows = np.sort(order[b * self.batch_size : (b + 1) * self.batch_size])
            yield {
                "bases": mm[rows],
                "lengths": lengths[rows],
                "tags": np.zeros((len(rows), 0), dtype=np.uint8),
                "tag_lengths": np.zeros(len(rows), dtype=np.int32),
            }


class Ours(Peer):
    name = "ours"

    def __init__(self, *args: Any, url: str | None = None, cache_dir: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.url, self.cache_dir = url, cache_dir  # url: prepared into and read from there, not `dir`
        self.dm: Any = None

    @property
    def location(self) -> str:
        return self.url or str(self.dir)

    def prepare_options(self) -> dict[str, Any]:
        """`PrepareOptions` that replace or add to the shared ones (none: format 4 windows; see
        `packing_peers`)."""
        return {}

    def load_options(self) -> dict[str, Any]:
        """`GenomicWebDataModule` arguments beyond the shared ones (none: the windows the shards hold)."""
        return {}

    def disk_bytes(self) -> int:
        if not self.url:
            return super().disk_bytes()
        from bionemo_wds.storage.store import Store

        return int(Store(self.url).fs.du(self.url, total=True))

    def prepare(self, workers: int) -> None:
        from bionemo_wds.prepare import PrepareOptions, prepare

        opts: dict[str, Any] = {
            "seq_length": self.seq_length,
            "stride": self.stride,
            "tail": self.tail,
            "split": (1, 0, 0),
            "workers": max(workers, 1),
            "progress": False,
            "overwrite": True,
            "samples_per_shard": SAMPLES_PER_SHARD,
            "compress": self.compress or "none",
        }
        # a URL's endpoint and credentials: from the environment
        prepare([self.fasta], self.location, PrepareOptions(**(opts | self.prepare_options())))

    def batches(self, workers: int, rc_prob: float = 0.5) -> Iterator[dict[str, Any]]:
        from bionemo_wds.lightning.datamodule import GenomicWebDataModule

        self.dm = dm = GenomicWebDataModule(
            self.location,
            micro_batch_size=self.batch_size,
            num_workers=workers,
            seed=SEED,
            rc_prob=rc_prob,
            cache_dir=self.cache_dir,
            **self.load_options(),
        )
        dm.setup("fit")
        return (self.expand(dm, compact) for compact in dm.train_dataloader())

    def expand(self, dm: Any, compact: dict[str, Any]) -> dict[str, Any]:
        """A compact batch -> the model inputs (`format_peers.OursMLMMain` draws masks here too)."""
        return dm.model_inputs(compact)

    def storage_stats(self) -> dict[str, int] | None:
        return self.dm.storage_stats if self.dm is not None else None


def make_peer(name: str, *args, **kwargs) -> Peer:
    from benchmarks.format_peers import OursHF, OursHFDevice, OursMLM, OursMLMDevice, OursMLMMain, OursPackedHF
    from benchmarks.packing_peers import LitDataPacked, OursPacked, OursWindows
    from benchmarks.streaming_peers import LitData, Mosaic  # optional libraries: see there
    from benchmarks.tokenizer_peers import TOKENIZER_CLASSES

    kinds: tuple[type[Peer], ...] = (EdenFly, PickledInt64, RawLimit, Ours, OursWindows, OursPacked, OursHF)
    kinds += (OursPackedHF, OursMLM, OursMLMMain, OursHFDevice, OursMLMDevice, *TOKENIZER_CLASSES)
    kinds += (LitData, LitDataPacked, Mosaic)
    classes = {cls.name: cls for cls in kinds}
    if name not in classes:
        raise ValueError(f"unknown peer {name!r}; choose from {', '.join(PEERS)}")
    return classes[name](*args, **kwargs)
