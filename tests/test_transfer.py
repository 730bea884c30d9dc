"""Compact batches from real DataLoader worker processes through `load.transfer.BatchTransfer`."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import time
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.compat.stages import collate_compact
from bionemo_wds.format import iter_records, read_manifest
from bionemo_wds.lightning import split_loaders
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.load.batch import SHARED_FIELDS
from bionemo_wds.load.splits import Split
from bionemo_wds.load.transfer import BatchTransfer, chunks

MICRO = 16


@pytest.fixture(scope="module")
def dataset(kleb_1024) -> Path:
    return kleb_1024


@pytest.fixture
def fork_default(monkeypatch):
    """Make the data module (which asks for the default context) start its workers by fork."""
    real = mp.get_context
    monkeypatch.setattr(split_loaders.mp, "get_context", lambda method=None: real(method or "fork"))


def val_batches(root: Path, workers: int, **kw) -> tuple[GenomicWebDataModule, list[dict]]:
    # a worker that cannot send fails the test in seconds rather than hanging it
    dm = GenomicWebDataModule(str(root), micro_batch_size=MICRO, num_workers=workers, transfer_timeout=20, **kw)
    dm.setup("validate")
    return dm, list(dm.val_dataloader())


def as_numpy(batch: dict) -> dict:
    return {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def assert_same_batches(got: list[dict], want: list[dict]) -> None:
    """Same batches (matched by their keys: workers interleave), every array field equal."""
    by_keys = {tuple(b["keys"]): as_numpy(b) for b in want}
    assert len(by_keys) == len(want) == len(got)
    for batch in map(as_numpy, got):
        ref = by_keys.pop(tuple(batch["keys"]))
        assert set(batch) == set(ref)
        for key, value in batch.items():
            if isinstance(value, np.ndarray):
                assert value.dtype == ref[key].dtype and np.array_equal(value, ref[key]), key
            else:
                assert list(value) == list(ref[key]), key
    assert not by_keys


@pytest.mark.parametrize("transfer_bytes", [MICRO * 1021, 512 << 10], ids=["batch_per_message", "grouped"])
def test_forked_workers_read_every_val_sample_once(dataset, fork_default, transfer_bytes):
    manifest = read_manifest(dataset)
    dm, batches = val_batches(dataset, 2, transfer_bytes=transfer_bytes)
    assert dm.split_loaders[Split.val][0].transfer is not None
    assert dm.split_loaders[Split.val][0].loader_kwargs["num_workers"] == 2
    assert dm.split_loaders[Split.val][0].loader_kwargs["multiprocessing_context"].get_start_method() == "fork"
    keys = [k for b in batches for k in b["keys"] if k]  # not the padding of a last partial batch (empty keys)
    assert len(keys) == len(set(keys)) == manifest.splits["val"].n_samples
    # the same keys as the shards hold (the ring reused its 4 slots many times without mixing them up)
    on_disk = []
    for shard in manifest.splits["val"].shards:
        with open(dataset / shard.path, "rb") as fh:
            on_disk += [
                f"{s}/{w}" for _, block in iter_records(fh) for s, w in zip(block.seq_id, block.window.tolist())
            ]
    assert sorted(keys) == sorted(on_disk)


def test_transferred_batches_equal_the_in_process_ones(dataset, fork_default):
    shards = read_manifest(dataset).splits["val"].shards
    # each worker batches its own shard: the batches line up with num_workers=0 only on whole batches
    # (the last shard may end in a partial batch: padded alike either way)
    assert all(sh.n_samples % MICRO == 0 for sh in shards[:-1]), [sh.n_samples for sh in shards]
    _, direct = val_batches(dataset, 0)
    for transfer_bytes in (MICRO * 1021, 512 << 10):
        dm, moved = val_batches(dataset, 2, transfer_bytes=transfer_bytes)
        assert dm.split_loaders[Split.val][0].transfer is not None
        assert set(moved[0]) >= set(SHARED_FIELDS) | {"keys", "seq_id"}
        assert_same_batches(moved, direct)


def test_an_abandoned_pass_does_not_disturb_the_next(dataset, fork_default):
    dm = GenomicWebDataModule(
        str(dataset), micro_batch_size=MICRO, num_workers=2, transfer_bytes=MICRO * 1021, transfer_timeout=20
    )
    dm.setup("validate")
    loader = dm.val_dataloader()
    it = iter(loader)
    first = [next(it) for _ in range(3)]
    del it  # the pass is abandoned while its workers still hold slots
    again = list(loader)
    keys = [k for b in again for k in b["keys"] if k]  # not the padding of a last partial batch
    assert len(keys) == len(set(keys)) == read_manifest(dataset).splits["val"].n_samples
    _, direct = val_batches(dataset, 0)
    assert_same_batches(again, direct)
    assert_same_batches(first, [b for b in direct if tuple(b["keys"]) in {tuple(f["keys"]) for f in first}])


# -- the stuck main process ---------------------------------------------------------------------


def real_batches(dataset: Path, n: int) -> list[dict]:
    """`n` compact batches of 4 real windows of the fixture (through `collate_compact`)."""
    shard = read_manifest(dataset).splits["val"].shards[0]
    with open(dataset / shard.path, "rb") as fh:
        _, block = next(iter_records(fh))
    rows = [
        {
            "key": f"{block.seq_id[i]}/{int(block.window[i])}",
            "seq_id": block.seq_id[i],
            "start": int(block.start[i]),
            "bases": block.bases(i),
            "tag": block.tag[i].encode(),
            "rc": False,
        }
        for i in range(4)
    ]
    return [collate_compact(rows, window=1021, max_tag=0) for _ in range(n)]


class Batches(torch.utils.data.IterableDataset):
    """A fixed list of compact batches sent to the main process through the transfer."""

    def __init__(self, batches: list[dict], transfer: BatchTransfer):
        self.batches, self.transfer = batches, transfer

    def __iter__(self):
        return self.transfer.to_main(1)(iter(self.batches))


def test_a_worker_whose_slots_are_never_freed_fails_naming_itself(dataset):
    batches = real_batches(dataset, 3)
    transfer = BatchTransfer(workers=1, slots=1, slot_bytes=8 << 10, context=mp.get_context("fork"), timeout=0.5)
    try:
        loader = torch.utils.data.DataLoader(
            Batches(batches, transfer),
            batch_size=None,
            num_workers=1,
            collate_fn=lambda x: x,
            prefetch_factor=2,
            timeout=10,
            multiprocessing_context=mp.get_context("fork"),
        )
        it = iter(loader)
        message = next(it)  # read raw, never handed to from_workers: its slot stays taken
        assert message[0] == "batches" and message[2:4] == (0, 0)
        started = time.monotonic()
        with pytest.raises(RuntimeError, match="loader worker 0 waited") as err:
            next(it)  # the worker waits for the slot the main process never frees
        assert time.monotonic() - started < 5
        assert "0.5 s" in str(err.value)
        del it
    finally:
        transfer.close()


def arrays(batch: dict) -> list[str]:
    """The arrays of a batch (what crosses in shared memory)."""
    return [k for k, v in batch.items() if isinstance(v, np.ndarray)]


def test_slots_are_reused_once_the_main_process_takes_the_batches(dataset):
    """The counterpart of the stuck test: one slot, many batches, no wait once `from_workers` frees it."""
    batches = real_batches(dataset, 6)
    for i, b in enumerate(batches):
        b["start"] = b["start"] + i  # tell the batches apart
    transfer = BatchTransfer(workers=1, slots=1, slot_bytes=8 << 10, context=mp.get_context("fork"), timeout=5)
    try:
        loader = torch.utils.data.DataLoader(
            Batches(batches, transfer),
            batch_size=None,
            num_workers=1,
            collate_fn=lambda x: x,
            prefetch_factor=2,
            multiprocessing_context=mp.get_context("fork"),
        )
        got = list(transfer.from_workers()(iter(loader)))
    finally:
        transfer.close()
    assert len(got) == len(batches)
    for g, b in zip(got, batches):
        assert g["keys"] == b["keys"]
        for key in arrays(b):
            assert np.array_equal(g[key], b[key]) and g[key].dtype == b[key].dtype, key


def test_an_array_too_large_for_its_slot_travels_in_the_message(dataset):
    (big,) = real_batches(dataset, 1)  # 4 x 1021 bases do not fit a 1 kB slot
    transfer = BatchTransfer(workers=1, slots=2, slot_bytes=1024, context=mp.get_context("fork"), timeout=5)
    try:
        loader = torch.utils.data.DataLoader(
            Batches([big, big], transfer),
            batch_size=None,
            num_workers=1,
            collate_fn=lambda x: x,
            multiprocessing_context=mp.get_context("fork"),
        )
        got = list(transfer.from_workers()(iter(loader)))
    finally:
        transfer.close()
    assert len(got) == 2
    for g in got:
        for key in arrays(big):
            assert np.array_equal(g[key], big[key]), key


def test_the_sending_stage_refuses_to_run_outside_a_worker(dataset):
    transfer = BatchTransfer(workers=1, slots=1, slot_bytes=8 << 10)
    try:
        with pytest.raises(RuntimeError, match="DataLoader worker processes only"):
            next(iter(transfer.to_main(1)(iter(real_batches(dataset, 1)))))
    finally:
        transfer.close()


def test_close_unlinks_the_segment():
    transfer = BatchTransfer(workers=2, slots=3, slot_bytes=4096)
    name = transfer.segment.name
    attached = shared_memory.SharedMemory(name=name)  # exists while open
    attached.close()
    view = transfer.slot(transfer.generation, 1, 2)  # a live view must not keep the name alive
    transfer.close()
    view.release()
    with pytest.raises(FileNotFoundError):
        shared_memory.SharedMemory(name=name)
    transfer.close()  # twice is harmless


def test_messages_of_an_abandoned_pass_are_dropped_unread():
    transfer = BatchTransfer(workers=1, slots=2, slot_bytes=64)
    try:
        old = transfer.generation
        transfer.new_generation()
        stale = ("batches", old, 0, 0, [{"keys": ["x/0"], "__layout__": {"rc": ("|b1", (1,), 0)}}])
        current = ("batches", transfer.generation, 0, 1, [{"keys": ["y/0"], "__layout__": {}}])
        free = transfer.free[0]
        assert free.acquire(False) and free.acquire(False)  # the new pass's worker holds both slots
        got = list(transfer.from_workers()(iter([stale, current])))
        assert [b["keys"] for b in got] == [["y/0"]]
        # only the current pass's message freed a slot of the current pass
        assert free.acquire(False) and not free.acquire(False)
    finally:
        transfer.close()


def test_passes_use_alternate_halves_of_the_segment():
    transfer = BatchTransfer(workers=2, slots=3, slot_bytes=16)
    try:

        def where(view):
            return np.frombuffer(view, np.uint8).__array_interface__["data"][0]

        g = transfer.generation
        base = where(transfer.segment.buf)
        starts = {
            (gen, w, i): where(transfer.slot(gen, w, i)) - base
            for gen in (g, g + 1)
            for w in range(2)
            for i in range(3)
        }
        assert sorted(starts.values()) == list(range(0, 2 * 2 * 3 * 16, 16))  # disjoint, all of it
        old = transfer.free
        transfer.new_generation()
        assert transfer.generation == g + 1 and all(a is not b for a, b in zip(old, transfer.free))
    finally:
        transfer.close()


# -- spawn ----------------------------------------------------------------------------------------

#: Spawned workers run this file again as their main module: the data module's imports are in the
#: main block, so each worker imports what unpickling its dataset needs, not all of Lightning.
SPAWN_SCRIPT = """
import multiprocessing as mp

def batches(workers, **kw):
    from bionemo_wds.lightning.datamodule import GenomicWebDataModule

    dm = GenomicWebDataModule({root!r}, micro_batch_size={micro}, num_workers=workers, transfer_timeout=20, **kw)
    dm.setup("validate")
    return dm, list(dm.val_dataloader())

if __name__ == "__main__":
    import numpy as np
    import torch
    from bionemo_wds.format import read_manifest
    from bionemo_wds.load.splits import Split

    mp.set_start_method("spawn")
    n = read_manifest({root!r}).splits["val"].n_samples
    _, direct = batches(0)
    direct = {{tuple(b["keys"]): b for b in direct}}
    for transfer_bytes in ({micro} * 1021, 512 << 10):
        dm, moved = batches(2, transfer_bytes=transfer_bytes)
        assert dm.split_loaders[Split.val][0].transfer is not None, "no batch transfer"
        assert dm.split_loaders[Split.val][0].loader_kwargs["multiprocessing_context"].get_start_method() == "spawn"
        keys = [k for b in moved for k in b["keys"] if k]  # not the padding of a last partial batch
        assert len(keys) == len(set(keys)) == n, (len(keys), len(set(keys)), n)
        assert len(moved) == len(direct)
        for b in moved:
            ref = direct[tuple(b["keys"])]
            assert set(b) == set(ref)
            for k, v in b.items():
                if isinstance(v, torch.Tensor):
                    assert np.array_equal(v.numpy(), ref[k].numpy()), k
    print("ok", n)
"""


@pytest.mark.slow
def test_spawned_workers_read_every_val_sample_once(dataset, tmp_path):
    script = tmp_path / "spawn_transfer.py"
    script.write_text(SPAWN_SCRIPT.format(root=str(dataset), micro=MICRO))
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    n = read_manifest(dataset).splits["val"].n_samples
    assert done.stdout.split() == ["ok", str(n)]
    assert "leaked shared_memory" not in done.stderr, done.stderr[-3000:]


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=300), st.integers(min_value=1, max_value=40))
def test_a_pass_sends_its_first_batches_in_growing_groups(n, most):
    """1, 2, 4, ... batches per message up to `most` (the first batch is not held back while a whole
    group is made), every batch once and in order."""
    groups = list(chunks(iter(range(n)), most, first=1))
    assert [x for g in groups for x in g] == list(range(n))
    sizes = [len(g) for g in groups]
    expected, size = [], 1
    while sum(expected) < n:
        expected.append(min(size, n - sum(expected)))
        size = min(2 * size, most)
    assert sizes == expected
