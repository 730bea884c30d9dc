"""The genomic module's hot path: records in, compact batches out, with no object per window.

`decode_sample -> shuffle -> reverse_complement -> batch` (pipeline.py) builds a dict per window
and passes it through four generators; at 8 kb windows that per-window Python is most of a
loader's cost (measured: ~20 us per window of ~30). `decode_blocks` + `shuffle_batch` do the
same work with the window as a (block, row) pair: the shuffle buffer holds pairs, the RC choice
is the same pure function of (seed, epoch, window key) (`pipeline.flips`), and each batch is
filled with one slice copy per row. The per-window stages stay the composable, documented form;
this is the same work fused for speed (the same RC choices; the shuffle draws its random numbers
differently, so the orders differ).
"""

from __future__ import annotations

import random
from typing import Any, Iterable, Iterator

import numpy as np
from webdataset.filters import pipelinefilter

from bionemo_wds.format import WindowBlock, window_key
from bionemo_wds.load.pipeline import (EpochState, _mix, _worker_identity, flip_salt, iter_blocks, reverse_complement_bases,
                                  salted_flip)
from bionemo_wds.load.shard_errors import ShardErrorPolicy
from bionemo_wds.tokenizer import PAD_ID


class _Block:
    """A decoded record with the per-window columns a batch needs, as plain Python lists."""

    __slots__ = ("tokens", "offsets", "seq_id", "start", "window", "tag")

    def __init__(self, block: WindowBlock):
        self.tokens = block.tokens
        self.offsets = block.offsets.tolist()
        self.seq_id = block.seq_id
        self.start = block.start.tolist()
        self.window = block.window.tolist()
        self.tag = [t.encode("ascii") for t in block.tag]


def _decode_blocks(src: Iterable[Any], policy: ShardErrorPolicy | None = None) -> Iterator[_Block]:
    """Records -> blocks of windows (`pipeline.iter_blocks`, with the columns as Python lists)."""
    for block in iter_blocks(src, policy):
        yield _Block(block)


def _shuffle_batch(src: Iterable[_Block], batch_size: int, window: int, max_tag: int = 0, bufsize: int = 0,
                   initial: int = 100, seed: int = 0, epoch: EpochState | None = None, rank: int = 0,
                   rc_prob: float = 0.0, partial: bool = True) -> Iterator[dict[str, Any]]:
    """Blocks -> compact batches (the `collate_compact` layout), through a seeded shuffle buffer
    of `bufsize` windows (0: keep order) and reverse complement with probability `rc_prob`."""
    e = epoch.epoch if epoch else 0
    worker, _ = _worker_identity()
    rng = random.Random(_mix(seed, e, rank, worker, 0x5EED))
    buf: list[tuple[_Block, int]] = []
    initial = min(initial, bufsize)
    picked: list[tuple[_Block, int]] = []

    def take() -> tuple[_Block, int]:
        k = int(rng.random() * len(buf))  # randrange costs 3x as much
        buf[k], buf[-1] = buf[-1], buf[k]
        return buf.pop()

    seen = 0
    for blk in src:
        for row in range(len(blk.seq_id)):
            if not bufsize:
                picked.append((blk, row))
            else:
                buf.append((blk, row))
                seen += 1
                # as webdataset's shuffle: output starts at `initial`, one out per two in while
                # the buffer grows to `bufsize`, then one out per one in
                if len(buf) < initial or (len(buf) < bufsize and seen % 2):
                    continue
                picked.append(take())
            if len(picked) == batch_size:
                yield _assemble(picked, window, max_tag, rc_prob, seed, e)
                picked = []
    while buf:
        picked.append(take())
        if len(picked) == batch_size:
            yield _assemble(picked, window, max_tag, rc_prob, seed, e)
            picked = []
    if picked and partial:
        yield _assemble(picked, window, max_tag, rc_prob, seed, e)


def _assemble(picked: list[tuple[_Block, int]], window: int, max_tag: int, rc_prob: float, seed: int,
              epoch: int) -> dict[str, Any]:
    n = len(picked)
    salt = flip_salt(seed, epoch)
    always = rc_prob >= 1
    bases = np.full((n, window), PAD_ID, dtype=np.uint8)
    tags = np.full((n, max_tag), PAD_ID, dtype=np.uint8)
    lengths = np.empty(n, dtype=np.int32)
    tag_lengths = np.empty(n, dtype=np.int32)
    rc = np.zeros(n, dtype=bool)
    starts = np.empty(n, dtype=np.int64)
    keys, seq_ids = [], []
    for i, (blk, row) in enumerate(picked):
        a, b = blk.offsets[row], blk.offsets[row + 1]
        seq_id = blk.seq_id[row]
        key = window_key(seq_id, blk.window[row])
        if rc_prob > 0 and (always or salted_flip(key, rc_prob, salt)):
            bases[i, : b - a] = reverse_complement_bases(blk.tokens[a:b])
            rc[i] = True
        else:
            bases[i, : b - a] = blk.tokens[a:b]
        lengths[i] = b - a
        tag = blk.tag[row]
        tag_lengths[i] = len(tag)
        if tag:
            tags[i, : len(tag)] = np.frombuffer(tag, np.uint8)
        starts[i] = blk.start[row]
        keys.append(key)
        seq_ids.append(seq_id)
    return {"bases": bases, "lengths": lengths, "tags": tags, "tag_lengths": tag_lengths, "rc": rc,
            "start": starts, "seq_id": seq_ids, "keys": keys}


decode_blocks = pipelinefilter(_decode_blocks)
shuffle_batch = pipelinefilter(_shuffle_batch)
