"""The benchmark's peers for short sequences: windows cut at load, and samples packed full.

On a catalog of short contigs, a loader that makes every contig shorter than the window one padded
sample (`eden_fly`, `ours` with format 4 windows) spends much of each batch on PAD; these peers
fill the samples instead, or cut the same windows from another layout:

- ``ours_windows``: `prepare` with ``layout="sequences"`` (every base stored once, windows cut at
  load), read by `GenomicWebDataModule` with the same seq_length, stride and tail as ``ours``
  (``pack=False``, ``window_offset="fixed"``): the same windows as ``ours``, so the two rows give
  the cost of cutting windows at load against reading format 4 windows.
- ``ours_packed``: the same dataset read with ``pack=True``: every sample filled with whole
  sequences and sequence tails, each its own document (BOS, SEP, bases, EOS), position ids
  restarting at each one and the document boundaries in the batch (``seq_lens`` / ``cu_seqlens``).
- ``litdata_packed``: LitData's way for LLM pre-training: every sequence one document of uint8
  tokens (BOS, SEP, bases, EOS) written by ``litdata.optimize(..., item_loader=TokensLoader(),
  chunk_bytes=...)`` (the tokens of a chunk stored as one array), read by
  ``StreamingDataset(item_loader=TokensLoader(block_size=seq_length + 1), shuffle=True)`` in
  ``StreamingDataLoader``: a sample is the next seq_length + 1 tokens of the stream, whatever
  documents it crosses; tokens are its first seq_length, labels the last seq_length. No padding,
  but no document boundaries either (positions 0..seq_length-1, labels across documents), no reverse
  complement (a block is not one sequence), and the tokens at a chunk's end that fill no block
  are never served.

Both ``ours_*`` peers need a checkout whose `prepare` has the sequence layout; `layout_missing`
says when it has not (the benchmark skips them with that note).
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.peers import SAMPLES_PER_SHARD, SEED, Ours
from benchmarks.streaming_peers import LitData, import_library
from bionemo_wds.core.tokenizer import BOS_ID, EOS_ID, SEP_ID, UPPERCASE_TABLE
from bionemo_wds.load.batch.model_inputs import position_ids

#: The peers that read a sequence-layout dataset.
SEQUENCE_PEERS = ("ours_windows", "ours_packed", "ours_packed_hf")
#: Sequences per `litdata.optimize` input (each input a span of sequence indices).
SEQUENCES_PER_INPUT = 256


def layout_missing() -> str | None:
    """Why this checkout cannot run the sequence-layout peers (no ``layout`` prepare option, or a
    data module without ``pack``), or None when it can."""
    from bionemo_wds.lightning.datamodule import GenomicWebDataModule
    from bionemo_wds.prepare import PrepareOptions

    if "layout" not in {f.name for f in dataclasses.fields(PrepareOptions)}:
        return "this checkout's prepare has no sequence layout (prepare --layout sequences)"
    if "pack" not in inspect.signature(GenomicWebDataModule).parameters:
        return "this checkout's GenomicWebDataModule cannot cut windows at load (no pack option)"
    return None


class OursWindows(Ours):
    name = "ours_windows"
    pack = False

    def prepare_options(self) -> dict[str, Any]:
        return {"layout": "sequences", "stride": None}  # the stride is the loader's

    def load_options(self) -> dict[str, Any]:
        return {
            "seq_length": self.seq_length,
            "stride": None if self.pack else self.stride,  # packing: every base once, no stride
            "tail": None if self.pack else self.tail,
            "pack": self.pack,
            "window_offset": "fixed",
        }


class OursPacked(OursWindows):
    name = "ours_packed"
    pack = True


class DocumentTokens:
    """Picklable ``fn`` for `litdata.optimize`: yields sequences ``lo..hi-1`` of the FASTA (in its
    order) as uint8 token arrays, BOS + SEP + bases (upper case) + EOS; each optimize worker opens
    the FASTA once."""

    def __init__(self, fasta: Path):
        self.fasta = fasta
        self._fa: Any = None  # a pyfaidx.Fasta once opened
        self._names: list[str] = []

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_fa": None, "_names": []}

    def __call__(self, span: tuple[int, int]) -> Iterator[np.ndarray]:
        import pyfaidx

        if self._fa is None:
            self._fa = pyfaidx.Fasta(str(self.fasta), as_raw=True)
            self._names = list(self._fa.keys())
        for i in range(*span):
            bases = str(self._fa[self._names[i]][:]).encode().translate(UPPERCASE_TABLE)
            out = np.empty(len(bases) + 3, dtype=np.uint8)
            out[0], out[1], out[-1] = BOS_ID, SEP_ID, EOS_ID
            out[2:-1] = np.frombuffer(bases, dtype=np.uint8)
            yield out


def block_inputs(blocks: torch.Tensor) -> dict[str, torch.Tensor]:
    """Model inputs from a batch of (seq_length + 1)-token blocks: tokens the first seq_length,
    labels the next token of each, loss on the bases, positions 0..seq_length-1 (in numpy, one
    thread, as `to_model_inputs`)."""
    b = blocks.numpy()
    tokens, labels = b[:, :-1].astype(np.int64), b[:, 1:].astype(np.int64)
    return {
        "tokens": torch.from_numpy(tokens),
        "labels": torch.from_numpy(labels),
        "loss_mask": torch.from_numpy((b[:, 1:] > SEP_ID + 1).astype(np.float32)),  # bases >= 65; specials 0..4
        "position_ids": position_ids(tokens.shape[1]).expand(*tokens.shape),
    }


class LitDataPacked(LitData):
    name = "litdata_packed"

    def _block(self) -> int:
        return self.seq_length + 1  # one more token than a sample: the last label

    def prepare(self, workers: int) -> None:
        import pyfaidx

        ld = import_library(self.name)
        n = len(pyfaidx.Faidx(str(self.fasta)).index)
        spans = [(lo, min(lo + SEQUENCES_PER_INPUT, n)) for lo in range(0, n, SEQUENCES_PER_INPUT)]
        chunk = SAMPLES_PER_SHARD * self._block()  # about what `ours` puts in one shard
        self._optimize(DocumentTokens(self.fasta), spans, n, workers, chunk_bytes=chunk, item_loader=ld.TokensLoader())

    def batches(self, workers: int, rc_prob: float = 0.5) -> Iterator[dict[str, Any]]:
        """One pass of packed blocks (`rc_prob` is not used: a block is not one sequence)."""
        ld = import_library(self.name)
        dataset = ld.StreamingDataset(
            str(self.dir), item_loader=ld.TokensLoader(block_size=self._block()), shuffle=True, seed=SEED
        )
        loader = ld.StreamingDataLoader(dataset, batch_size=self.batch_size, num_workers=workers)
        return (block_inputs(blocks) for blocks in loader)
