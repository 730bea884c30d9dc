"""The epoch order of a streaming recipe over JSON lines files: files dealt to ranks, a buffer shuffle.

NVIDIA's OpenGenome2 recipe (bionemo-recipes, ``opengenome2_llama_native_te``) streams the
metagenome subset's JSON lines files with Hugging Face ``datasets``: ``dataset.shard(world, rank)``
deals each rank a contiguous block of whole files (``split_dataset_by_node`` when there are more
ranks than files), ``IterableDataset.shuffle(seed, buffer_size)`` puts the rank's files in a seeded
order and passes the windows (each record's windows in order, record after record) through a
buffer. `buffer_shuffle` is that buffer as ``datasets``' ``BufferShuffledExamplesIterable`` runs
it: the first `buffer_size` examples fill it; from then on each new example takes a slot drawn at
random and the example that was there is yielded; at the end the rest is shuffled and yielded.
Slots are drawn from a ``numpy`` generator of the seed in blocks of 1,000, as there.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar

import numpy as np

T = TypeVar("T")

#: Slots drawn from the generator at a time (``datasets`` draws 1,000).
DRAW_BLOCK = 1000


def buffer_shuffle(items: Iterable[T], buffer_size: int, seed: int) -> Iterator[T]:
    """`items` through a shuffle buffer of `buffer_size` (module text): every item once, seeded."""
    if buffer_size < 1:
        raise ValueError(f"a shuffle buffer holds at least 1 item, got {buffer_size}")
    rng = np.random.default_rng(seed)
    buffer: list[T] = []
    slots: Iterator[int] = iter(())
    for item in items:
        if len(buffer) < buffer_size:
            buffer.append(item)
            continue
        slot = next(slots, None)
        if slot is None:
            slots = iter(rng.integers(0, buffer_size, size=DRAW_BLOCK).tolist())
            slot = next(slots)
        yield buffer[slot]
        buffer[slot] = item
    rng.shuffle(buffer)
    yield from buffer


def files_of_rank(n_files: int, rank: int, world: int) -> tuple[list[int], int]:
    """The files a rank streams, and which examples of that stream it keeps (every n-th): a
    contiguous block of files (``IterableDataset.shard(contiguous=True)``: the first
    ``n_files % world`` ranks one file more), all of them; with more ranks than files
    (``split_dataset_by_node``, the file count not a multiple of the world), every file, keeping
    every `world`-th example from the rank's place on."""
    if world > n_files:
        return list(range(n_files)), world
    per, extra = divmod(n_files, world)
    start = rank * per + min(rank, extra)
    return list(range(start, start + per + (rank < extra))), 1


def recipe_order(file_windows: Sequence[np.ndarray], rank: int, world: int, buffer_size: int, seed: int) -> np.ndarray:
    """One rank's epoch in the recipe's order: `file_windows[f]` holds file f's window ids in stream
    order (records in line order, each record's windows in order); the rank's files in a seeded
    order, their windows one after another (`files_of_rank`), through `buffer_shuffle`."""
    mine, every = files_of_rank(len(file_windows), rank, world)
    order = np.random.default_rng([seed, 7]).permutation(len(mine))
    stream = np.concatenate([file_windows[mine[i]] for i in order]) if mine else np.zeros(0, np.int64)
    stream = stream[rank % every :: every]
    return np.fromiter(buffer_shuffle(stream.tolist(), buffer_size, seed), dtype=np.int64, count=len(stream))
