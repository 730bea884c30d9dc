"""`GenomicDataset` (issue 24): the framework-free dataset under the data module and
`GenomicIterableDataset`, for a plain torch ``DataLoader``.

Pinned here: importing and iterating it imports no Lightning; a Lightning model trains through a plain
``DataLoader`` over it without the data module; ``state_dict(batches=n)`` resumes a fresh dataset
exactly with another worker count (one dataset and a blend of two); a single dataset is a blend of
one; the layers above it (`GenomicIterableDataset`, `GenomicWebDataModule`) yield the same batches;
val splits by data-parallel rank with every window read once; ``len()`` is the number of batches;
a bad option names itself.

Datasets: the prepared Klebsiella assembly (`conftest.kleb_1024`), lambda cut for the same 1024
tokens (a second dataset to blend with) and the lambda pieces with lineage tags and soft-masked
stretches (`conftest.lambda_lineage_fa`), for tag dropout and soft-mask weights.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import LAMBDA, shard_windows
from torch.utils.data import DataLoader

from bionemo_wds import GenomicDataset, GenomicIterableDataset
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.prepare import PrepareOptions, prepare

ROOT = Path(__file__).resolve().parents[1]
MICRO = 16
OPTIONS = {"seed": 7, "shuffle_buffer": 256, "rc_prob": 0.5}
#: The tagged lambda pieces: reverse complement, lineage tag dropout and soft-mask weights all drawn.
TAGGED_OPTIONS = {**OPTIONS, "tag_dropout": 0.3, "soft_mask_weight": 0.1}
#: Windows of the blend of two's epoch (Klebsiella subsampled, lambda's 48 windows repeated).
BLEND_SAMPLES = 1200
#: What a model-input batch must agree on, row by row.
COMPARED = ("tokens", "labels", "loss_mask", "position_ids", "rc", "start")
LIGHTNING = ("lightning", "pytorch_lightning", "lightning_fabric")


# --- datasets ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def kleb(kleb_1024) -> Path:
    return kleb_1024  # read-only


@pytest.fixture(scope="module")
def lam(tmp_path_factory) -> Path:
    """Lambda phage cut for 1024 tokens like `kleb` (train only): the second dataset of a blend."""
    out = tmp_path_factory.mktemp("dataset_lam") / "lam"
    prepare([LAMBDA], out, PrepareOptions(seq_length=1024, stride=1000, split=(1, 0, 0), progress=False))
    return out


@pytest.fixture(scope="module")
def tagged(lambda_lineage_fa, tmp_path_factory) -> Path:
    """The lambda pieces with lineage tags, lower case kept (soft-masked stretches)."""
    fasta, _, _ = lambda_lineage_fa
    out = tmp_path_factory.mktemp("dataset_tagged") / "tagged"
    opts = PrepareOptions(seq_length=384, stride=150, tags="lineage", case="keep", samples_per_shard=64, progress=False)
    prepare([fasta], out, opts)
    return out


def two(kleb: Path, lam: Path) -> dict[str, Any]:
    """The options of a blend of two datasets (0.7 / 0.3 of a 1200-window epoch)."""
    return {
        "datasets": [{"path": str(kleb), "weight": 0.7}, {"path": str(lam), "weight": 0.3}],
        "samples_per_epoch": BLEND_SAMPLES,
    }


# --- helpers ----------------------------------------------------------------------------------------


def manifest(root: Path) -> dict[str, Any]:
    """The dataset's manifest.json as written (the on-disk format, not the package's reader)."""
    return json.loads((root / "manifest.json").read_text())


def loader(ds: torch.utils.data.Dataset, workers: int) -> DataLoader:
    return DataLoader(ds, batch_size=None, num_workers=workers)


def batches_of(ds: torch.utils.data.Dataset, workers: int = 0, epoch: int | None = None) -> list[dict]:
    if epoch is not None:
        ds.set_epoch(epoch)  # type: ignore[attr-defined]
    return list(loader(ds, workers))


def take(ds: torch.utils.data.Dataset, workers: int, n: int) -> list[dict]:
    """The first `n` batches of a pass (the loader and its workers dropped after)."""
    it = iter(loader(ds, workers))
    out = [next(it) for _ in range(n)]
    del it
    return out


def keys(batches: list[dict]) -> list[list[str]]:
    return [list(b["keys"]) for b in batches]


def assert_same(got: list[dict], expected: list[dict], fields: tuple[str, ...] = COMPARED) -> None:
    """The same windows in the same batches, with equal `fields`."""
    assert len(got) == len(expected)
    assert keys(got) == keys(expected)
    for n, (a, b) in enumerate(zip(got, expected)):
        for name in fields:
            assert torch.equal(a[name], b[name]), f"batch {n}: {name}"


def assert_identical(got: list[dict], expected: list[dict]) -> None:
    """Batches equal in every field (tensors, key and sequence-id lists)."""
    assert keys(got) == keys(expected)
    for n, (a, b) in enumerate(zip(got, expected)):
        assert sorted(a) == sorted(b), f"batch {n}"
        for name, value in a.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, b[name]), f"batch {n}: {name}"
            else:
                assert list(value) == list(b[name]), f"batch {n}: {name}"


def module(root: Path | None, micro: int = MICRO, **kw: Any) -> GenomicWebDataModule:
    dm = GenomicWebDataModule(None if root is None else str(root), micro, **kw)
    dm.setup("fit")
    return dm


def module_batches(dm: GenomicWebDataModule, split: str, epoch: int) -> list[dict]:
    """The data module's batches of `split` in `epoch`, expanded to model inputs."""
    dm.set_epoch(epoch)
    got = dm.train_dataloader() if split == "train" else dm.val_dataloader()
    return [dm.model_inputs(b) for b in got]


# --- 1. no Lightning --------------------------------------------------------------------------------

NO_LIGHTNING = """
import json, sys
import bionemo_wds
from bionemo_wds import GenomicDataset
from torch.utils.data import DataLoader, IterableDataset

ds = GenomicDataset(sys.argv[1], micro_batch_size=4, seed=3)
one = next(iter(DataLoader(ds, batch_size=None, num_workers=0)))
other = next(iter(DataLoader(ds, batch_size=None, num_workers=2)))
print(json.dumps({
    "iterable": isinstance(ds, IterableDataset),
    "shape": list(one["tokens"].shape),
    "same": list(one["keys"]) == list(other["keys"]),
    "lightning": sorted(m for m in sys.modules if m.split(".")[0] in %r),
}))
"""


@pytest.mark.slow
def test_importing_and_iterating_imports_no_lightning(kleb):
    """A fresh interpreter imports bionemo_wds and GenomicDataset, builds one and takes a batch with
    and without loader workers: an IterableDataset, model inputs of the micro batch, and no Lightning module."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    code = NO_LIGHTNING % (LIGHTNING,)
    done = subprocess.run(
        [sys.executable, "-c", code, str(kleb)], capture_output=True, text=True, env=env, cwd=ROOT, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    seq_length = manifest(kleb)["params"]["seq_length"]
    assert report == {"iterable": True, "shape": [4, seq_length], "same": True, "lightning": []}


# --- 2. a Lightning model through a plain DataLoader ------------------------------------------------


@pytest.mark.slow
def test_a_lightning_model_trains_through_a_plain_dataloader(kleb, tmp_path):
    """Trainer.fit(model, train_dataloaders=DataLoader(GenomicDataset(...))) with 2 workers and no data
    module: 8 steps, a finite loss, and the model saw the dataset's first 8 batches in order."""
    import lightning as L

    from bionemo_wds.models.tiny_lm import TinyDNALM

    class Recording(TinyDNALM):
        def __init__(self, **kw: Any):
            super().__init__(**kw)
            self.seen: list[list[str]] = []

        def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
            self.seen.append(list(batch["keys"]))
            return super().training_step(batch, batch_idx)

    seq_length = manifest(kleb)["params"]["seq_length"]
    model = Recording(d_model=32, n_layers=1, n_heads=2, max_len=seq_length, warmup_steps=1)
    ds = GenomicDataset(kleb, micro_batch_size=4, seed=1)
    trainer = L.Trainer(
        max_steps=8,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(model, train_dataloaders=DataLoader(ds, batch_size=None, num_workers=2))
    assert trainer.global_step == 8
    loss = trainer.callback_metrics["train_loss"]
    assert torch.isfinite(loss) and loss > 0
    assert model.seen == keys(take(GenomicDataset(kleb, micro_batch_size=4, seed=1), 0, 8))


# --- 3. exact resume with another worker count ------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("blended", [False, True], ids=["one_dataset", "blend_of_two"])
def test_resume_from_state_dict_with_another_worker_count(kleb, lam, blended):
    """k batches read by 2 workers, state_dict(batches=k) through JSON; a fresh dataset loading it yields
    exactly the rest of the epoch with 0 and with 3 workers, and the next epoch whole after it."""
    root, micro, extra = (None, 8, two(kleb, lam)) if blended else (kleb, MICRO, {})

    def fresh() -> GenomicDataset:
        return GenomicDataset(root, micro_batch_size=micro, **OPTIONS, **extra)

    epoch, k = 2, 7
    whole = batches_of(fresh(), workers=2, epoch=epoch)
    assert len(whole) > 2 * k
    first = fresh()
    first.set_epoch(epoch)
    taken = take(first, 2, k)
    assert_same(taken, whole[:k])
    state = json.loads(json.dumps(first.state_dict(batches=k)))  # what a checkpoint keeps
    assert state["epoch"] == epoch
    for workers in (0, 3):
        resumed = fresh()
        resumed.load_state_dict(state)
        assert len(resumed) == len(whole) - k
        assert_same(batches_of(resumed, workers), whole[k:])
    # the pass after the resumed one starts the next epoch from its beginning
    resumed = fresh()
    resumed.load_state_dict(state)
    assert len(batches_of(resumed)) == len(whole) - k
    resumed.set_epoch(epoch + 1)
    following = fresh()
    following.set_epoch(epoch + 1)
    assert len(resumed) == len(following) == len(whole)
    assert_same(take(resumed, 0, 3), take(following, 0, 3))


def test_state_dict_without_batches_warns_when_workers_read_the_pass(kleb):
    """Loader workers iterate copies of the dataset: the one in this process counted nothing, so a
    state without ``batches=`` would restart the epoch. It says so; with 0 workers it counts."""
    read_by_workers = GenomicDataset(kleb, micro_batch_size=MICRO, **OPTIONS)
    take(read_by_workers, 2, 3)
    with pytest.warns(UserWarning, match="batches="):
        state = read_by_workers.state_dict()
    assert state["consumed"] == [] and state["blend"][0]["position"] == 0  # what it can know: nothing
    assert read_by_workers.state_dict(batches=3)["consumed"] == [[1, MICRO, 3]]  # the count given
    read_here = GenomicDataset(kleb, micro_batch_size=MICRO, **OPTIONS)
    take(read_here, 0, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert read_here.state_dict() == read_by_workers.state_dict(batches=3)


# --- 4. one dataset is a blend of one; the layers above add nothing ----------------------------------


def options_for(name: str) -> dict[str, Any]:
    return TAGGED_OPTIONS if name == "tagged" else OPTIONS


@pytest.mark.slow
@pytest.mark.parametrize("name", ["kleb", "tagged"])
def test_a_single_dataset_is_a_blend_of_one(request, name):
    """GenomicDataset(root) and GenomicDataset(datasets=[{path: root, weight: 1}]) yield identical train
    batches in two epochs (reverse complement, tag dropout and soft-mask weights drawn the same)."""
    root = request.getfixturevalue(name)
    single = GenomicDataset(root, micro_batch_size=MICRO, **options_for(name))
    blended = GenomicDataset(datasets=[{"path": str(root), "weight": 1.0}], micro_batch_size=MICRO, **options_for(name))
    for epoch in (0, 1):
        got = batches_of(single, epoch=epoch)
        assert len(single) == len(blended) == len(got) > 10
        assert any(b["rc"].any() for b in got) and not all(b["rc"].all() for b in got)
        assert_identical(batches_of(blended, epoch=epoch), got)


@pytest.mark.parametrize("name", ["kleb", "tagged"])
def test_the_layers_above_yield_its_batches(request, name):
    """Same options: GenomicDataset, GenomicIterableDataset and the data module's train loader (its
    compact batches expanded by dm.model_inputs) yield the same batches, epoch by epoch; so do the
    compact batches (model_inputs=False)."""
    root = request.getfixturevalue(name)
    options = options_for(name)
    ds = GenomicDataset(root, micro_batch_size=MICRO, **options)
    wrapper = GenomicIterableDataset(str(root), "train", MICRO, **options)
    dm = module(root, **options)
    for epoch in (0, 1):
        got = batches_of(ds, epoch=epoch)
        assert_same(got, batches_of(wrapper, epoch=epoch), (*COMPARED, "dataset", "lengths"))
        assert_same(got, module_batches(dm, "train", epoch), (*COMPARED, "dataset", "lengths"))
        assert [list(b["seq_id"]) for b in got] == [[k.rsplit("/", 1)[0] for k in b["keys"]] for b in got]
    compact = GenomicDataset(root, micro_batch_size=MICRO, model_inputs=False, **options)
    dm.set_epoch(1)
    expected = list(dm.train_dataloader())
    got = batches_of(compact, epoch=1)
    assert len(got) == len(expected)
    for n, (a, b) in enumerate(zip(got, expected)):
        assert "tokens" not in a and a["bases"].dtype == torch.uint8
        for field, value in a.items():
            same = torch.equal(value, b[field]) if isinstance(value, torch.Tensor) else list(value) == list(b[field])
            assert same, f"batch {n}: {field}"


# --- 5. val ------------------------------------------------------------------------------------------


def test_val_split_is_the_data_modules_and_shared_by_data_parallel_ranks(kleb):
    """split="val" yields the data module's val batches; with dp_size=2 both ranks have the same len
    (their own data module's batches) and together read each val window exactly once."""
    ds = GenomicDataset(kleb, split="val", micro_batch_size=MICRO, **OPTIONS)
    got = batches_of(ds)
    assert len(ds) == len(got) > 10
    assert_same(got, module_batches(module(kleb, **OPTIONS), "val", 0))

    windows = sorted(f"{s}/{w}" for s, _, w, _, _ in shard_windows(kleb)["val"])
    ranks = []
    for rank in (0, 1):
        dp = {"dp_rank": rank, "dp_size": 2}
        part = GenomicDataset(kleb, split="val", micro_batch_size=MICRO, **OPTIONS, **dp)
        ranks.append(batches_of(part, workers=rank))  # 0 and 1 loader workers
        assert len(part) == len(ranks[-1])
        assert_same(ranks[-1], module_batches(module(kleb, **OPTIONS, **dp), "val", 0))
    assert len(ranks[0]) == len(ranks[1]) == math.ceil(len(windows) / (2 * MICRO))
    read = [k for batches in ranks for row in keys(batches) for k in row if k]  # filler rows have no key
    assert Counter(read) == Counter(windows)


# --- 6. len() ----------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("case", ["train", "train_two_ranks", "resampled", "val", "blend_of_two", "after_restore"])
def test_len_is_the_number_of_batches_yielded(kleb, lam, case):
    """len(ds) is the pass's batch count, as documented for each mode (exact: windows // (micro x dp);
    resampled: ceil(windows / global batch); val: ceil(windows / micro); a blend: samples_per_epoch //
    micro; after a restore: the rest), and the loader yields exactly that many."""
    n_train = manifest(kleb)["splits"]["train"]["n_samples"]
    kw: dict[str, Any] = {"root": kleb, "micro_batch_size": MICRO, **OPTIONS}
    expected = n_train // MICRO
    if case == "train_two_ranks":
        kw.update(dp_rank=1, dp_size=2)
        expected = n_train // (2 * MICRO)
    elif case == "resampled":
        kw.update(epoch="resampled", global_batch_size=4 * MICRO)
        expected = math.ceil(n_train / (4 * MICRO))
    elif case == "val":
        kw.update(split="val")
        expected = math.ceil(manifest(kleb)["splits"]["val"]["n_samples"] / MICRO)
    elif case == "blend_of_two":
        kw.update(root=None, **two(kleb, lam))
        expected = BLEND_SAMPLES // MICRO
    ds = GenomicDataset(**kw)
    if case == "after_restore":
        first = GenomicDataset(**kw)
        first.set_epoch(1)
        take(first, 0, 5)
        ds.load_state_dict(first.state_dict(batches=5))
        expected -= 5
    assert len(ds) == expected
    workers = 2 if case in ("blend_of_two", "after_restore") else 0  # loader workers cost seconds to start
    assert len(batches_of(ds, workers)) == expected


# --- counters ----------------------------------------------------------------------------------------


def test_counters_of_a_blend(kleb, lam):
    """A blend's quotas are the data module's; after a pass without workers its per-dataset counts
    are the data module's for the same epoch; a healthy local dataset skips nothing and fetches nothing."""
    ds = GenomicDataset(micro_batch_size=MICRO, **OPTIONS, **two(kleb, lam))
    dm = module(None, **OPTIONS, **two(kleb, lam))
    assert ds.quotas is not None and ds.quotas.tolist() == dm.quotas.tolist()
    assert sum(ds.quotas.tolist()) == BLEND_SAMPLES
    got = batches_of(ds, epoch=1)
    module_batches(dm, "train", 1)
    assert ds.source_counts[1] == dm.source_counts[1]
    assert sum(ds.source_counts[1].values()) == len(got) * MICRO
    assert ds.skipped == 0
    assert ds.storage_stats == dm.storage_stats
    assert set(ds.storage_stats) and not any(ds.storage_stats.values())


# --- 7. bad options ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("micro_batch_size", 0),
        ("global_batch_size", 0),
        ("rc_prob", 1.5),
        ("tag_dropout", -0.1),
        ("soft_mask_weight", 2.0),
        ("epoch", "weird"),
        ("handler", "explode"),
        ("split", "bogus"),
    ],
)
def test_a_bad_option_names_itself(kleb, option, value):
    with pytest.raises(ValueError, match=option) as err:
        GenomicDataset(**{"root": kleb, option: value})
    assert repr(value) in str(err.value) or str(value) in str(err.value)
    assert "\n" not in str(err.value).strip()


def test_an_unknown_option_is_a_type_error_naming_it(kleb):
    with pytest.raises(TypeError, match="shufle_buffer"):
        GenomicDataset(kleb, shufle_buffer=10)


def test_a_negative_epoch_names_itself(kleb):
    ds = GenomicDataset(kleb)
    with pytest.raises(ValueError, match="epoch"):
        ds.set_epoch(-1)
