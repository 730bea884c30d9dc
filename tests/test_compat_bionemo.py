"""The bionemo-webdatamodule API: the 1.0 constructors in `bionemo_wds.compat.bionemo`, and the
first release's `PickledDataWDS` (the main API) driven by a real Lightning `Trainer` exactly as
the original bionemo-webdatamodule tests drive it.

Data as upstream builds it: 30 samples ``sample-0000 .. sample-0029``, each a pickled
``torch.tensor(i, dtype=torch.int32)`` under the suffixes ``tensor.pyd`` and ``tensor_copy.pyd``,
split 10 / 10 / 10 into train, val and test.
"""

from __future__ import annotations

import glob
import math
import pickle
import random
from pathlib import Path

import lightning as L
import pytest
import torch
import webdataset as wds
from webdataset.filters import batched, shuffle

from bionemo_wds.compat import webdatamodule as main_api
from bionemo_wds.compat.bionemo import PickledDataWDS, Split, WebDataModule, pickles_to_tars

N_PER_SPLIT = 10
SUFFIXES = ["tensor.pyd", "tensor_copy.pyd"]
SPLIT_VALUES = {Split.train: list(range(0, 10)), Split.val: list(range(10, 20)), Split.test: list(range(20, 30))}


def untuple(source):
    return (sample for (sample,) in source)


# --- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pickles(tmp_path_factory):
    """(dir_pickles, names per split) as upstream's `gen_pickle_files` makes them."""
    dir_pickles = tmp_path_factory.mktemp("pickles")
    names = []
    for i in range(3 * N_PER_SPLIT):
        name = f"sample-{i:04}"
        names.append(name)
        t = torch.tensor(i, dtype=torch.int32)
        for suffix in SUFFIXES:
            with open(dir_pickles / f"{name}.{suffix}", "wb") as fh:
                pickle.dump(t, fh)
    subsets = {
        Split.train: names[0:N_PER_SPLIT],
        Split.val: names[N_PER_SPLIT : 2 * N_PER_SPLIT],
        Split.test: names[2 * N_PER_SPLIT : 3 * N_PER_SPLIT],
    }
    return str(dir_pickles), subsets


@pytest.fixture(scope="module")
def tars(tmp_path_factory, pickles):
    """Every split written with both suffixes by `pickles_to_tars` (min 3 shards) into its own dir."""
    dir_pickles, subsets = pickles
    root = tmp_path_factory.mktemp("tars")
    dirs = {}
    for split, names in subsets.items():
        dirs[split] = str(root / split.name)
        pickles_to_tars(dir_pickles, names, SUFFIXES, dirs[split], "wdshards", min_num_shards=3)
    return dirs


def values(batches) -> list[int]:
    """Sorted ints of every tensor in `batches`."""
    return sorted(int(x) for b in batches for x in torch.as_tensor(b).reshape(-1))


def read_tars(directory: str, prefix: str) -> list[dict]:
    urls = sorted(glob.glob(f"{directory}/{prefix}-*.tar"))
    return list(wds.WebDataset(urls, shardshuffle=False).decode())


# --- pickles_to_tars ----------------------------------------------------------------------------


def test_pickles_to_tars_writes_min_num_shards_and_reads_back(tmp_path, pickles):
    dir_pickles, subsets = pickles
    out = tmp_path / "tars"
    written = pickles_to_tars(dir_pickles, subsets[Split.val], "tensor.pyd", str(out), "tensor", min_num_shards=3)
    files = sorted(p.name for p in out.iterdir())
    assert len(files) >= 3
    assert files == [f"tensor-{i:06d}.tar" for i in range(len(files))]
    assert sorted(Path(p).name for p in written) == files
    samples = read_tars(str(out), "tensor")
    assert [s["__key__"] for s in samples] == subsets[Split.val]
    for s in samples:
        assert set(k for k in s if not k.startswith("__")) == {"tensor.pyd"}
        assert s["tensor.pyd"].dtype == torch.int32
    assert [int(s["tensor.pyd"]) for s in samples] == SPLIT_VALUES[Split.val]


def test_pickles_to_tars_without_min_num_shards_writes_one_shard(tmp_path, pickles):
    dir_pickles, subsets = pickles
    out = tmp_path / "tars"
    pickles_to_tars(dir_pickles, subsets[Split.train], "tensor.pyd", str(out), "one")
    assert sorted(p.name for p in out.iterdir()) == ["one-000000.tar"]
    assert [int(s["tensor.pyd"]) for s in read_tars(str(out), "one")] == SPLIT_VALUES[Split.train]


def test_pickles_to_tars_two_suffixes(tmp_path, pickles):
    dir_pickles, subsets = pickles
    out = tmp_path / "tars"
    pickles_to_tars(dir_pickles, subsets[Split.test], SUFFIXES, str(out), "tensor", min_num_shards=3)
    samples = read_tars(str(out), "tensor")
    assert len(samples) == N_PER_SPLIT
    for s, expected in zip(samples, SPLIT_VALUES[Split.test]):
        assert int(s["tensor.pyd"]) == int(s["tensor_copy.pyd"]) == expected


def test_pickles_to_tars_keys_replace_dots(tmp_path):
    """Sample names with dots become keys with dashes (a dot would start the member suffix)."""
    dir_pickles = tmp_path / "pickles"
    dir_pickles.mkdir()
    names = ["a.b.0", "a.b.1", "plain"]
    for i, name in enumerate(names):
        (dir_pickles / f"{name}.tensor.pyd").write_bytes(pickle.dumps(torch.tensor(i, dtype=torch.int32)))
    out = tmp_path / "tars"
    pickles_to_tars(str(dir_pickles), names, "tensor.pyd", str(out), "dots")
    samples = read_tars(str(out), "dots")
    assert [s["__key__"] for s in samples] == ["a-b-0", "a-b-1", "plain"]
    assert [int(s["tensor.pyd"]) for s in samples] == [0, 1, 2]


def test_pickles_to_tars_is_deterministic(tmp_path, pickles):
    dir_pickles, subsets = pickles
    outs = [tmp_path / "first", tmp_path / "second"]
    for out in outs:
        pickles_to_tars(dir_pickles, subsets[Split.train], SUFFIXES, str(out), "tensor", min_num_shards=3)
    first = {p.name: p.read_bytes() for p in outs[0].iterdir()}
    second = {p.name: p.read_bytes() for p in outs[1].iterdir()}
    assert len(first) >= 3
    assert first == second
    # and rewriting in place gives the same bytes again
    pickles_to_tars(dir_pickles, subsets[Split.train], SUFFIXES, str(outs[0]), "tensor", min_num_shards=3)
    assert {p.name: p.read_bytes() for p in outs[0].iterdir()} == first


@pytest.mark.parametrize("bad", [0, -1])
def test_pickles_to_tars_refuses_non_positive_min_num_shards(tmp_path, pickles, bad):
    dir_pickles, subsets = pickles
    out = tmp_path / "tars"
    with pytest.raises(ValueError, match=f"min_num_shards must be positive, got {bad}"):
        pickles_to_tars(dir_pickles, subsets[Split.train], "tensor.pyd", str(out), "tensor", min_num_shards=bad)
    assert not out.exists() or not any(out.iterdir())


def test_pickles_to_tars_names_a_missing_pickle(tmp_path, pickles):
    dir_pickles, _subsets = pickles
    with pytest.raises(RuntimeError, match=r"cannot read pickle .*sample-9999\.tensor\.pyd"):
        pickles_to_tars(dir_pickles, ["sample-0000", "sample-9999"], "tensor.pyd", str(tmp_path / "t"), "tensor")
    assert not list((tmp_path / "t").glob("*.tar*"))  # nothing half-written left behind


# --- compat WebDataModule -----------------------------------------------------------------------


def compat_module(tars, **kwargs) -> WebDataModule:
    kwargs.setdefault("pipeline_wds", {split: untuple for split in Split})
    return WebDataModule("tensor.pyd", tars, **kwargs)


def test_compat_webdatamodule_batches_with_kwargs_wld_batch_size(tars):
    dm = compat_module(tars, kwargs_wld={split: {"num_workers": 0, "batch_size": 2} for split in Split})
    dm.setup("fit")
    for split, loader in ((Split.train, dm.train_dataloader()), (Split.val, dm.val_dataloader())):
        batches = list(loader)
        assert [tuple(b.shape) for b in batches] == [(2,)] * (N_PER_SPLIT // 2)
        assert values(batches) == SPLIT_VALUES[split]
    dm.setup("test")
    assert values(dm.test_dataloader()) == SPLIT_VALUES[Split.test]
    assert values(dm.predict_dataloader()) == SPLIT_VALUES[Split.test]


def test_compat_webdatamodule_keeps_dataloader_default_batch_size(tars):
    """1.0 leaves the DataLoader's batch_size alone: default 1, so each batch has a leading dim of 1."""
    dm = compat_module(tars, kwargs_wld={split: {"num_workers": 0} for split in Split})
    dm.setup("validate")
    batches = list(dm.val_dataloader())
    assert len(batches) == N_PER_SPLIT
    for b, expected in zip(batches, SPLIT_VALUES[Split.val]):
        assert isinstance(b, torch.Tensor)
        assert tuple(b.shape) == (1,)
        assert int(b[0]) == expected


def test_compat_webdatamodule_two_suffix_keys(tars):
    dm = WebDataModule(SUFFIXES, tars, kwargs_wld={split: {"num_workers": 0, "batch_size": 3} for split in Split})
    dm.setup("test")
    batches = list(dm.test_dataloader())
    assert [len(b[0]) for b in batches] == [3, 3, 3, 1]
    for tensor, copy in batches:
        assert torch.equal(tensor, copy)
    assert values(b[0] for b in batches) == SPLIT_VALUES[Split.test]


@pytest.mark.parametrize("nbatches", [5, 13])
def test_compat_invoke_wld_with_epoch_sets_batches_per_pass(tars, nbatches):
    """Without batch_size there are 10 batches of 1; with_epoch makes every pass exactly nbatches."""
    dm = compat_module(
        tars,
        kwargs_wld={split: {"num_workers": 0} for split in Split},
        invoke_wld={split: [("with_epoch", {"nbatches": nbatches})] for split in Split},
    )
    dm.setup("fit")
    loader = dm.train_dataloader()
    assert [len(list(loader)) for _ in range(3)] == [nbatches] * 3
    assert len(list(dm.val_dataloader())) == nbatches
    if nbatches < N_PER_SPLIT:
        assert values(loader) == SPLIT_VALUES[Split.train][:nbatches]  # unshuffled: the first ones


def test_compat_without_with_epoch_reads_each_sample_once(tars):
    """The 1.0 module has no n_samples, so no pseudo-epoch of its own."""
    dm = compat_module(tars, kwargs_wld={split: {"num_workers": 0, "batch_size": 4} for split in Split})
    dm.setup("fit")
    loader = dm.train_dataloader()
    for _ in range(2):
        assert values(loader) == SPLIT_VALUES[Split.train]


def test_compat_invoke_wds_calls_dataset_methods(tars):
    dm = compat_module(
        tars,
        kwargs_wld={split: {"num_workers": 0} for split in Split},
        invoke_wds={Split.val: [("select", {"predicate": lambda t: int(t) % 2 == 0})]},
    )
    dm.setup("validate")
    assert values(dm.val_dataloader()) == [v for v in SPLIT_VALUES[Split.val] if v % 2 == 0]


def test_compat_more_workers_than_shards(tars):
    n_shards = len(glob.glob(f"{tars[Split.train]}/wdshards-*.tar"))
    dm = compat_module(tars, kwargs_wld={split: {"num_workers": n_shards + 1} for split in Split})
    dm.setup("fit")  # as upstream: setup builds the datasets, the loader refuses when it is iterated
    dm.setup("test")
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
        # in this process, naming the split, its shards and the workers (upstream: webdataset's error in a worker)
        with pytest.raises(
            ValueError,
            match=rf"split has {n_shards} shard\(s\) .* num_workers={n_shards + 1}, so its "
            "loader workers would have fewer shards than workers",
        ):
            for _ in loader:
                pass
    dm._kwargs_wld[Split.train]["num_workers"] = n_shards  # read when the loader is iterated, as upstream changes it
    assert values(dm.train_dataloader()) == SPLIT_VALUES[Split.train]


def test_compat_positional_signature(tars):
    """1.0 order: suffix_keys_wds, dirs_tars_wds, prefix_tars_wds, pipeline_wds, ..."""
    dm = WebDataModule(
        "tensor.pyd",
        tars,
        "wdshards",
        {split: untuple for split in Split},
        None,
        None,
        {split: {"num_workers": 0, "batch_size": 5} for split in Split},
    )
    dm.setup("validate")
    assert [tuple(b.shape) for b in dm.val_dataloader()] == [(5,), (5,)]


# --- compat PickledDataWDS ----------------------------------------------------------------------


def test_compat_pickleddatawds_prepare_and_read_every_sample_once(tmp_path, pickles):
    dir_pickles, subsets = pickles
    dirs = {split: str(tmp_path / f"tars_{split.name}") for split in Split}
    dm = PickledDataWDS(
        dir_pickles,
        subsets,
        "tensor.pyd",
        dirs,
        n_tars_wds=3,
        pipeline_wds={split: untuple for split in Split},
        kwargs_wld={split: {"num_workers": 2, "batch_size": 2} for split in Split},
    )
    dm.prepare_data()
    for split in Split:
        shards = sorted(Path(dirs[split]).glob("wdshards-*.tar"))
        assert len(shards) >= 3
        assert shards[0].name == "wdshards-000000.tar"
    dm.setup("fit")
    train = [int(x) for b in dm.train_dataloader() for x in b]
    assert sorted(train) == SPLIT_VALUES[Split.train]  # every sample, exactly once
    assert values(dm.val_dataloader()) == SPLIT_VALUES[Split.val]
    dm.setup("test")
    assert values(dm.test_dataloader()) == SPLIT_VALUES[Split.test]


def test_compat_pickleddatawds_two_suffixes_and_prefix(tmp_path, pickles):
    dir_pickles, subsets = pickles
    dirs = {split: str(tmp_path / split.name) for split in Split}
    dm = PickledDataWDS(
        dir_pickles,
        subsets,
        SUFFIXES,
        dirs,
        n_tars_wds=2,
        prefix_tars_wds="pk",
        kwargs_wld={split: {"num_workers": 0, "batch_size": 10} for split in Split},
    )
    dm.prepare_data()
    assert sorted(p.name for p in Path(dirs[Split.val]).iterdir()) == ["pk-000000.tar", "pk-000001.tar"]
    dm.setup("validate")
    (batch,) = list(dm.val_dataloader())
    assert torch.equal(batch[0], batch[1])
    assert batch[0].tolist() == SPLIT_VALUES[Split.val]


def test_compat_pickleddatawds_more_workers_than_shards(tmp_path, pickles):
    dir_pickles, subsets = pickles
    dirs = {split: str(tmp_path / split.name) for split in Split}
    dm = PickledDataWDS(
        dir_pickles,
        subsets,
        "tensor.pyd",
        dirs,  # n_tars_wds=None: one shard
        kwargs_wld={split: {"num_workers": 2} for split in Split},
    )
    dm.prepare_data()
    dm.setup("fit")
    with pytest.raises(ValueError, match=r"the train split has 1 shard\(s\) .* num_workers=2, .* n_tars_wds=2"):
        iter(dm.train_dataloader())


# --- the main API's PickledDataWDS in a real Trainer, as upstream tests it -----------------------


class Recorder(L.LightningModule):
    """Records the batches of every stage; trains a single scalar so the optimizer has work."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))
        self.seen = {"train": [], "val": [], "test": [], "predict": []}

    def _record(self, stage, batch):
        self.seen[stage].append(batch.detach().cpu().clone())
        return (self.w * batch.float()).sum()

    def training_step(self, batch, batch_idx):
        return self._record("train", batch)

    def validation_step(self, batch, batch_idx):
        self._record("val", batch)

    def test_step(self, batch, batch_idx):
        self._record("test", batch)

    def predict_step(self, batch, batch_idx):
        self._record("predict", batch)
        return batch

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.fixture
def upstream_pickled_wds(tmp_path, pickles):
    """`PickledDataWDS` built the way bionemo-webdatamodule's `create_PickledDataWDS` fixture does."""
    dir_pickles, subsets = pickles
    seed = 0
    local_batch_size = global_batch_size = 2
    collate = lambda list_samples: torch.vstack(list_samples)
    pipeline_wds = {
        Split.train: [untuple, shuffle(N_PER_SPLIT, rng=random.Random(seed))],
        Split.val: untuple,
        Split.test: untuple,
    }
    pipeline_prebatch_wld = {
        Split.train: [shuffle(N_PER_SPLIT, rng=random.Random(seed)), batched(local_batch_size, collation_fn=collate)],
        Split.val: batched(local_batch_size, collation_fn=collate),
        Split.test: batched(local_batch_size, collation_fn=collate),
    }
    kwargs_wds = {
        split: {"shardshuffle": split == Split.train, "nodesplitter": wds.split_by_node, "seed": seed}
        for split in Split
    }
    kwargs_wld = {split: {"num_workers": 2} for split in Split}
    prefix_dir = f"{tmp_path}/tars_wds_"
    dm = main_api.PickledDataWDS(
        dir_pickles,
        "tensor.pyd",
        subsets,
        prefix_dir,
        global_batch_size,
        n_tars_wds=3,
        prefix_tars_wds="tensor",
        pipeline_wds=pipeline_wds,
        pipeline_prebatch_wld=pipeline_prebatch_wld,
        kwargs_wds=kwargs_wds,
        kwargs_wld=kwargs_wld,
    )
    return dm, prefix_dir, global_batch_size


def make_trainer() -> L.Trainer:
    return L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )


@pytest.mark.filterwarnings("ignore")
def test_upstream_pickleddatawds_in_a_trainer(upstream_pickled_wds):
    dm, prefix_dir, global_batch_size = upstream_pickled_wds
    model = Recorder()
    trainer = make_trainer()
    trainer.fit(model, datamodule=dm)  # runs prepare_data, setup("fit"), train and one validation
    for split in Split:
        shards = sorted(Path(f"{prefix_dir}{split.name}").glob("tensor-*.tar"))
        assert len(shards) >= 3, split
    trainer.validate(model, datamodule=dm)
    trainer.test(model, datamodule=dm)
    predictions = trainer.predict(model, datamodule=dm)

    n_batches = math.ceil(N_PER_SPLIT / global_batch_size)
    seen = {stage: [int(x) for b in batches for x in b.reshape(-1)] for stage, batches in model.seen.items()}
    for stage in model.seen:
        assert len(model.seen[stage]) == (2 * n_batches if stage == "val" else n_batches), stage
        assert all(tuple(b.shape) == (global_batch_size, 1) for b in model.seen[stage]), stage
    assert sorted(seen["train"]) == SPLIT_VALUES[Split.train]  # each train sample exactly once
    assert sorted(seen["val"]) == sorted(SPLIT_VALUES[Split.val] * 2)  # fit's validation + validate()
    assert sorted(seen["test"]) == SPLIT_VALUES[Split.test]
    assert sorted(seen["predict"]) == SPLIT_VALUES[Split.test]
    assert sorted(int(x) for b in predictions for x in b.reshape(-1)) == SPLIT_VALUES[Split.test]
    assert not set(seen["train"]) & set(seen["val"])
    assert not set(seen["train"]) & set(seen["test"])
    assert not set(seen["val"]) & set(seen["test"])


def test_upstream_pickleddatawds_train_loader_is_shuffled_and_complete(upstream_pickled_wds):
    """Without a Trainer: prepare, setup, and two passes over the training pseudo-epoch."""
    dm, _, global_batch_size = upstream_pickled_wds
    dm.prepare_data()
    dm.setup("fit")
    loader = dm.train_dataloader()
    passes = []
    for _ in range(2):
        batches = list(loader)
        assert len(batches) == math.ceil(N_PER_SPLIT / global_batch_size)
        passes.append([int(x) for b in batches for x in b.reshape(-1)])
        assert sorted(passes[-1]) == SPLIT_VALUES[Split.train]
    assert any(p != SPLIT_VALUES[Split.train] for p in passes)  # the shuffles did something
    val = [int(x) for b in dm.val_dataloader() for x in b.reshape(-1)]
    assert sorted(val) == SPLIT_VALUES[Split.val]


def test_pickles_to_tars_leaves_no_shards_of_an_earlier_run(tmp_path):
    import pickle

    for i in range(8):
        (tmp_path / f"s{i}.x.pyd").write_bytes(pickle.dumps(i))
    names = [f"s{i}" for i in range(8)]
    out = tmp_path / "tars"
    assert len(pickles_to_tars(str(tmp_path), names, "x.pyd", str(out), "p", min_num_shards=4)) == 4
    assert len(pickles_to_tars(str(tmp_path), names, "x.pyd", str(out), "p", min_num_shards=2)) == 2
    assert len(list(out.glob("p-*.tar"))) == 2
