"""`GenomicMapDataset`: sample i of the epoch plan, equal to the iterable path's i-th sample.

Index i is sample ``i mod n`` of epoch ``i // n``; it must equal what `GenomicDataset` (one rank, any
micro batch) yields at that place of that epoch: the same bases, strand, tag, labels and mask, for a
windows-layout dataset, a sequence-layout one cut at load and a blend. Samplers drive it: torch's
`DistributedSampler` over two ranks covers the epoch once, with or without loader workers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import KLEBSIELLA, LAMBDA
from torch.utils.data import DataLoader, DistributedSampler

from bionemo_wds import GenomicDataset, GenomicMapDataset
from bionemo_wds.errors import OptionError
from bionemo_wds.prepare import PrepareOptions, prepare

SEED = 11
COMPARED = ("tokens", "labels", "loss_mask", "position_ids", "start", "rc")


@pytest.fixture(scope="module")
def sequences(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("map_seq") / "data"
    prepare([str(KLEBSIELLA)], str(root), PrepareOptions(seed=SEED, layout="sequences", workers=1, progress=False))
    return root


@pytest.fixture(scope="module")
def lam(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("map_lambda") / "data"
    opts = PrepareOptions(seq_length=1024, stride=1000, seed=SEED, split=(1, 0, 0), workers=1, progress=False)
    prepare([str(LAMBDA)], str(root), opts)
    return root


def iterable_samples(epochs: int, micro: int, **kw) -> list[dict]:
    """Every sample `GenomicDataset` yields in `epochs` epochs, in order, one dict each."""
    ds = GenomicDataset(micro_batch_size=micro, seed=SEED, **kw)
    out = []
    for epoch in range(epochs):
        ds.set_epoch(epoch)
        for batch in ds:
            for r in range(batch["tokens"].shape[0]):
                out.append({k: v[r] for k, v in batch.items()})
        out.append(None)  # the epoch's end
    return out


def two_epochs(*args, **kw) -> GenomicMapDataset:
    """A map dataset of two epochs' indices."""
    return GenomicMapDataset(*args, num_samples=2 * len(GenomicMapDataset(*args, **kw)), **kw)


def assert_equal_samples(map_ds: GenomicMapDataset, expected: list[dict]) -> None:
    """`expected` (epochs separated by None; an exact epoch leaves out a last partial batch) against
    the map dataset's indices of the same epochs."""
    epoch, i = 0, 0
    for sample in expected:
        if sample is None:
            epoch, i = epoch + 1, 0
            continue
        got = map_ds[epoch * map_ds.per_epoch + i]
        assert got["keys"] == sample["keys"], (epoch, i)
        for key in COMPARED:
            assert torch.equal(got[key], sample[key]), (epoch, i, key)
        i += 1
    assert epoch == 2


@pytest.mark.slow
def test_windows_layout_equals_the_iterable_path(kleb_1024):
    map_ds = two_epochs(str(kleb_1024), "train", seed=SEED)
    expected = iterable_samples(2, 4, root=str(kleb_1024), split="train")
    assert len(map_ds) == 2 * map_ds.per_epoch >= len(expected) - 10
    assert_equal_samples(map_ds, expected)
    assert any(bool(s["rc"]) for s in expected if s) and not all(bool(s["rc"]) for s in expected if s)


@pytest.mark.slow
def test_windows_cut_at_load_equal_the_iterable_path(sequences):
    kw = {"seq_length": 2048, "stride": 1500, "window_offset": "random"}
    map_ds = two_epochs(str(sequences), "train", seed=SEED, **kw)
    assert_equal_samples(map_ds, iterable_samples(2, 3, root=str(sequences), split="train", **kw))


def test_a_blend_equals_the_iterable_path(kleb_1024, lam):
    blend = [{"path": str(kleb_1024), "weight": 1.0}, {"path": str(lam), "weight": 2.0}]
    map_ds = two_epochs(datasets=blend, samples_per_epoch=60, seed=SEED)
    assert len(map_ds) == 120
    assert_equal_samples(map_ds, iterable_samples(2, 4, datasets=blend, samples_per_epoch=60))


def test_validation_is_read_in_order(kleb_1024):
    map_ds = GenomicMapDataset(str(kleb_1024), "val", seed=SEED)
    # the iterable fills its last batch with padding (empty keys) when the split's windows do not divide into batches
    expected = [s["keys"] for s in iterable_samples(1, 5, root=str(kleb_1024), split="val")[:-1] if s["keys"]]
    assert len(expected) == len(map_ds)
    assert [map_ds[i]["keys"] for i in range(len(expected))] == expected


@pytest.mark.slow
def test_indices_past_an_epoch_continue_into_the_next(kleb_1024):
    one = GenomicMapDataset(str(kleb_1024), "train", seed=SEED)
    three = GenomicMapDataset(str(kleb_1024), "train", seed=SEED, num_samples=3 * len(one))
    n = len(one)
    assert len(three) == 3 * n
    assert three[5]["keys"] == one[5]["keys"] and three[-1]["keys"] == three[3 * n - 1]["keys"]
    epoch_keys = [{three[e * n + i]["keys"] for i in range(n)} for e in range(2)]
    assert epoch_keys[0] == epoch_keys[1]  # every window once per epoch
    assert [three[i]["keys"] for i in range(20)] != [three[n + i]["keys"] for i in range(20)]  # another order
    with pytest.raises(IndexError):
        three[3 * n]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_a_distributed_sampler_covers_the_epoch_once(kleb_1024, workers):
    map_ds = GenomicMapDataset(str(kleb_1024), "train", seed=SEED)
    keys = []
    for rank in range(2):
        sampler = DistributedSampler(map_ds, num_replicas=2, rank=rank, shuffle=False, drop_last=True)
        loader = DataLoader(map_ds, batch_size=4, sampler=sampler, num_workers=workers)
        for batch in loader:
            assert batch["tokens"].shape == (len(batch["keys"]), 1024)
            keys.extend(batch["keys"])
    assert len(keys) == len(set(keys)) == len(map_ds) // 2 * 2


def test_options_a_sampler_owns_are_refused(kleb_1024, sequences):
    with pytest.raises(OptionError, match="micro_batch_size"):
        GenomicMapDataset(str(kleb_1024), "train", micro_batch_size=4)
    with pytest.raises(OptionError, match="dp_rank, dp_size"):
        GenomicMapDataset(str(kleb_1024), "train", dp_rank=0, dp_size=2)
    with pytest.raises(OptionError, match="pack=True"):
        GenomicMapDataset(str(sequences), "train", pack=True)
    with pytest.raises(OptionError, match="num_samples"):
        GenomicMapDataset(str(kleb_1024), "train", num_samples=-1)


def megatron_batches(total: int, consumed: int, micro: int, rank: int, world: int) -> list[list[int]]:
    """The indices Megatron's `MegatronPretrainingSampler` gives `rank` (its arithmetic: from `consumed`
    on, global batches of micro x world consecutive indices, this rank's micro slice of each, the last
    partial global batch dropped). megatron-core ships no sampler, so the arithmetic is written out here."""
    out, batch = [], []
    for i in range(consumed, total):
        batch.append(i)
        if len(batch) == micro * world:
            out.append(batch[rank * micro : (rank + 1) * micro])
            batch = []
    return out


@pytest.mark.slow
def test_a_megatron_consumed_samples_resume_continues_exactly(kleb_1024):
    """Two ranks read 3 global batches, stop, and resume from the consumed-samples count with a fresh
    dataset and loader workers: together the same samples as an uninterrupted run."""
    micro, world = 4, 2
    map_ds = GenomicMapDataset(str(kleb_1024), "train", seed=SEED)
    total = len(map_ds)
    whole = {r: megatron_batches(total, 0, micro, r, world) for r in range(world)}
    consumed = 3 * micro * world
    resumed = GenomicMapDataset(str(kleb_1024), "train", seed=SEED)
    for rank in range(world):
        expected = [map_ds[i]["keys"] for batch in whole[rank] for i in batch]
        before = [map_ds[i]["keys"] for batch in whole[rank][:3] for i in batch]
        loader = DataLoader(resumed, batch_sampler=megatron_batches(total, consumed, micro, rank, world), num_workers=2)
        after = [key for batch in loader for key in batch["keys"]]
        assert before + after == expected
