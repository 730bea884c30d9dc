"""``cache_in_memory=("val",)``: validation batches read from the shards once, then served from memory.

Shard reads are counted by wrapping `LocalShards.read`; the counting needs the in-process loader
(``num_workers=0``): loader workers would count in their own copies of the wrapper.
"""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pytest
import torch

from bionemo_wds.format import read_manifest
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.lightning.memory_cache import MemoryCachedLoader, accelerator_available
from bionemo_wds.models.tiny_lm import TinyDNALM
from bionemo_wds.storage.shards import LocalShards

MICRO = 16


@pytest.fixture(scope="module")
def dataset(kleb_1024) -> Path:
    return kleb_1024  # read-only


@pytest.fixture
def reads(monkeypatch) -> list[tuple[str, int, int]]:
    """(shard url, offset, size) of every `LocalShards.read` in this process, in order."""
    calls: list[tuple[str, int, int]] = []
    original = LocalShards.read

    def counting(self, shard: int, offset: int, size: int) -> bytes:
        calls.append((self.urls[shard], offset, size))
        return original(self, shard, offset, size)

    monkeypatch.setattr(LocalShards, "read", counting)
    return calls


def module(root: Path, **kw) -> GenomicWebDataModule:
    dm = GenomicWebDataModule(str(root), **{"micro_batch_size": MICRO, "seed": 7, **kw})
    dm.setup("fit")
    return dm


def val_records(root: Path) -> int:
    return read_manifest(root).splits["val"].record_index.records


def same_batches(a: list[dict], b: list[dict]) -> bool:
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if list(x["keys"]) != list(y["keys"]):
            return False
        if not all(torch.equal(x[k], y[k]) for k in ("bases", "lengths", "tags", "tag_lengths", "start", "filler")):
            return False
    return True


def test_second_val_pass_reads_no_shard_and_yields_identical_batches(dataset, reads):
    """The first pass reads every val record once; later passes (and later val_dataloader() calls) read nothing."""
    uncached = list(module(dataset).val_dataloader())
    reads.clear()
    dm = module(dataset, cache_in_memory=("val",))
    loader = dm.val_dataloader()
    assert isinstance(loader, MemoryCachedLoader) and len(loader) == len(uncached)
    first = list(loader)
    n_first = len(reads)
    assert n_first == len(set(reads)) == val_records(dataset)
    second = list(loader)
    third = list(dm.val_dataloader())
    assert len(reads) == n_first
    assert same_batches(first, uncached) and same_batches(second, uncached) and same_batches(third, uncached)
    assert loader.passes_read == 1 and loader.complete and loader.nbytes > 0
    # an uncached module reads the shards again on every pass
    plain = module(dataset)
    reads.clear()
    list(plain.val_dataloader())
    list(plain.val_dataloader())
    assert len(reads) == 2 * val_records(dataset)


def test_a_pass_stopped_early_is_continued_not_repeated(dataset, reads):
    """Stop after 2 batches, then a full pass: the batches of an uncached module, no record read twice."""
    uncached = list(module(dataset).val_dataloader())
    reads.clear()
    loader = module(dataset, cache_in_memory=("val",)).val_dataloader()
    it = iter(loader)
    head = [next(it), next(it)]
    del it
    assert len(loader.batches) == 2 and 0 < len(reads) < val_records(dataset)
    full = list(loader)
    assert same_batches(head, uncached[:2]) and same_batches(full, uncached)
    assert len(reads) == len(set(reads)) == val_records(dataset)
    assert loader.passes_read == 2
    list(loader)
    assert len(reads) == val_records(dataset)


def test_a_pass_stopped_early_is_continued_by_loader_workers(dataset):
    """With 2 loader workers the continued pass starts at the first missing batch too."""
    uncached = list(module(dataset).val_dataloader())
    loader = module(dataset, cache_in_memory=("val",), num_workers=2).val_dataloader()
    it = iter(loader)
    for _ in range(3):
        next(it)
    del it
    assert same_batches(list(loader), uncached)
    assert same_batches(list(loader), uncached) and loader.passes_read == 2


def test_shared_memory_cache_holds_shared_tensors(dataset):
    """cache_memory="shared": every cached tensor is in shared memory, and later passes yield those tensors."""
    loader = module(dataset, cache_in_memory=("val",), cache_memory="shared").val_dataloader()
    first = list(loader)
    tensors = [v for b in loader.batches for v in b.values() if isinstance(v, torch.Tensor)]
    assert tensors and all(t.is_shared() for t in tensors)
    second = list(loader)
    assert all(v.is_shared() for b in second for v in b.values() if isinstance(v, torch.Tensor))
    assert same_batches(first, second)
    plain = module(dataset, cache_in_memory=("val",)).val_dataloader()
    list(plain)
    assert not any(v.is_shared() for b in plain.batches for v in b.values() if isinstance(v, torch.Tensor))


def test_bad_cache_arguments_are_refused(dataset):
    """train cannot be cached (its order changes by epoch); unknown splits and memory kinds are errors."""
    with pytest.raises(ValueError, match="cache_in_memory is for val and test"):
        GenomicWebDataModule(str(dataset), cache_in_memory=("train",))
    with pytest.raises(ValueError, match="not a split"):
        GenomicWebDataModule(str(dataset), cache_in_memory=("validation",))
    with pytest.raises(ValueError, match="cache_memory must be one of"):
        GenomicWebDataModule(str(dataset), cache_in_memory=("val",), cache_memory="gpu")


@pytest.mark.skipif(accelerator_available(), reason="checks the refusal on a machine without an accelerator")
def test_pinned_cache_without_an_accelerator_is_refused(dataset):
    """cache_memory="pinned" serves copies to an accelerator; without one it is a clear error."""
    with pytest.raises(ValueError, match='"pinned" needs an accelerator'):
        GenomicWebDataModule(str(dataset), cache_in_memory=("val",), cache_memory="pinned")


class ValReads(L.Callback):
    """Val shard reads during each validation run: (sanity check?, epoch) -> reads."""

    def __init__(self, reads: list[tuple[str, int, int]]):
        self.reads, self.per_run, self.start = reads, [], 0

    def val_count(self) -> int:
        return sum("/val/" in url for url, _, _ in self.reads)

    def on_validation_start(self, trainer, pl_module):
        self.start = self.val_count()

    def on_validation_end(self, trainer, pl_module):
        self.per_run.append((trainer.sanity_checking, trainer.current_epoch, self.val_count() - self.start))


@pytest.mark.slow
def test_trainer_reads_val_shards_only_in_the_first_epoch(dataset, reads):
    """fit for 2 epochs with a 2-batch sanity check and 4 val batches per run: the sanity check reads
    batches 0-1, the first validation only batches 2-3 (each record once), the second epoch nothing."""
    reference = iter(module(dataset).val_dataloader())
    for _ in range(4):
        next(reference)
    first_four = len(reads)  # records of val batches 0-3, read in-process
    del reference
    reads.clear()
    dm = module(dataset, cache_in_memory=("val",))
    counter = ValReads(reads)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        max_epochs=2,
        limit_train_batches=2,
        limit_val_batches=4,
        num_sanity_val_steps=2,
        callbacks=[counter],
    )
    trainer.fit(TinyDNALM(d_model=16, n_layers=1, n_heads=1, max_len=1024), datamodule=dm)
    sanity, first, second = counter.per_run
    assert sanity[0] and sanity[2] > 0
    assert first[:2] == (False, 0) and first[2] > 0
    assert second[:2] == (False, 1) and second[2] == 0
    val_reads = [r for r in reads if "/val/" in r[0]]
    assert len(val_reads) == len(set(val_reads)) == first_four == sanity[2] + first[2]
    assert len(dm.val_dataloader().batches) == 4
