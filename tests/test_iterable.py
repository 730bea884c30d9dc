"""`GenomicIterableDataset` with a plain torch DataLoader: the data module's batches, for any number of
workers, and checkpoint states that move between the two (on the prepared Klebsiella assembly)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from bionemo_wds import GenomicIterableDataset
from bionemo_wds.format import read_manifest
from bionemo_wds.lightning.datamodule import GenomicWebDataModule

OPTIONS = {"seed": 7, "shuffle_buffer": 256, "rc_prob": 0.5}
MICRO = 16


@pytest.fixture(scope="module")
def dataset(kleb_1024) -> Path:
    return kleb_1024  # read-only


def dataset_of(root: Path, split: str = "train", **kw) -> GenomicIterableDataset:
    return GenomicIterableDataset(str(root), split, MICRO, **{**OPTIONS, **kw})


def module(root: Path, **kw) -> GenomicWebDataModule:
    dm = GenomicWebDataModule(str(root), MICRO, **{**OPTIONS, **kw})
    dm.setup("fit")
    return dm


def module_batches(dm: GenomicWebDataModule, split: str, epoch: int) -> list[dict]:
    dm.set_epoch(epoch)
    loader = dm.train_dataloader() if split == "train" else dm.val_dataloader()
    return [dm.model_inputs(b) for b in loader]


def loader_of(ds: GenomicIterableDataset, workers: int) -> DataLoader:
    return DataLoader(ds, batch_size=None, num_workers=workers)


def keys(batches) -> list[list[str]]:
    return [list(b["keys"]) for b in batches]


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("split", ["train", "val"])
def test_same_batches_as_the_data_module(dataset, split, workers):
    """Same seed and epoch: the same windows in the same order with equal model inputs, and len() is the count."""
    epoch = 1
    expected = module_batches(module(dataset), split, epoch)
    ds = dataset_of(dataset, split)
    ds.set_epoch(epoch)
    got = list(loader_of(ds, workers))
    assert keys(got) == keys(expected)
    assert len(ds) == len(got) == len(expected) > 10
    for a, b in zip(got, expected):
        for name in ("tokens", "labels", "loss_mask", "position_ids", "rc", "start"):
            assert torch.equal(a[name], b[name]), name
    if split == "train":
        assert any(b["rc"].any() for b in got) and not all(b["rc"].all() for b in got)
        n = read_manifest(dataset).splits["train"].n_samples
        assert len(got) == n // MICRO


def test_compact_batches_expand_to_the_same_model_inputs(dataset):
    """model_inputs=False yields compact uint8 batches; ds.model_inputs expands them to what the default yields."""
    compact = dataset_of(dataset, model_inputs=False)
    full = dataset_of(dataset)
    for n, (c, f) in enumerate(zip(loader_of(compact, 0), loader_of(full, 0))):
        assert c["bases"].dtype == torch.uint8 and "tokens" not in c
        assert torch.equal(compact.model_inputs(c)["tokens"], f["tokens"])
        if n == 5:
            break


def test_epochs_differ_and_repeat(dataset):
    """set_epoch picks the epoch's order: epoch 0 twice is the same, epoch 1 is another order."""
    ds = dataset_of(dataset)
    ds.set_epoch(0)
    first = keys(loader_of(ds, 0))
    again = keys(loader_of(ds, 0))
    ds.set_epoch(1)
    other = keys(loader_of(ds, 0))
    assert first == again and first != other


def take(loader, n: int) -> list[dict]:
    it = iter(loader)
    return [next(it) for _ in range(n)]


@pytest.mark.slow
def test_resume_after_n_batches_with_other_workers(dataset):
    """state_dict() after n batches (counted in-process: num_workers=0) resumes a fresh dataset
    iterated by 2 workers at exactly the remaining batches."""
    ds = dataset_of(dataset)
    ds.set_epoch(3)
    whole = keys(loader_of(ds, 0))
    assert ds.state_dict() == {**ds.state_dict(), "epoch": 4, "consumed": []}  # a finished pass: the next epoch
    taken = keys(take(loader_of(ds, 0), 9))
    state = ds.state_dict()
    assert state["epoch"] == 3 and state["consumed"] == [[1, MICRO, 9]]
    fresh = dataset_of(dataset)
    fresh.load_state_dict(state)
    assert len(fresh) == len(whole) - 9
    rest = keys(loader_of(fresh, 2))
    assert taken + rest == whole
    # the pass after the resumed one is the whole next epoch
    fresh.set_epoch(4)
    nxt = dataset_of(dataset)
    nxt.set_epoch(4)
    assert keys(loader_of(fresh, 0)) == keys(loader_of(nxt, 0))


def test_state_dict_with_an_explicit_batch_count(dataset):
    """With loader workers the caller says how many batches it took: state_dict(batches=n)."""
    ds = dataset_of(dataset)
    whole = keys(loader_of(ds, 0))
    taken = keys(take(loader_of(ds, 2), 6))
    fresh = dataset_of(dataset)
    fresh.load_state_dict(ds.state_dict(batches=6))
    assert taken + keys(loader_of(fresh, 0)) == whole


def test_data_module_state_loads_into_the_dataset_and_back(dataset):
    """A data module's state_dict resumes the iterable dataset, and the dataset's resumes a data module."""
    whole = keys(module_batches(module(dataset), "train", 2))
    dm = module(dataset)
    dm.set_epoch(2)
    taken = keys(take(dm.train_dataloader(), 5))
    ds = dataset_of(dataset)
    ds.load_state_dict(dm.state_dict())
    assert taken + keys(loader_of(ds, 0)) == whole

    ds = dataset_of(dataset)
    ds.set_epoch(2)
    taken = keys(take(loader_of(ds, 0), 11))
    dm = module(dataset, num_workers=2)
    dm.load_state_dict(ds.state_dict())
    assert taken + keys(dm.train_dataloader()) == whole
