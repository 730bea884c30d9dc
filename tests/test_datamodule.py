"""GenomicWebDataModule end to end on real shards: determinism, disjoint splits, Trainer parity."""

from __future__ import annotations

import multiprocessing as mp
import shutil
from pathlib import Path

import lightning as L
import pytest
import torch
from conftest import KLEBSIELLA, LAMBDA, TINY_FIT

from bionemo_wds.cli.main import main
from bionemo_wds.core.tokenizer import reverse_complement_bases
from bionemo_wds.format import read_manifest
from bionemo_wds.lightning.datamodule import GenomicWebDataModule

SEQ = 1024


@pytest.fixture(scope="module")
def dataset(kleb_1024) -> Path:
    return kleb_1024


def make(root, **kw) -> GenomicWebDataModule:
    kw = {"micro_batch_size": 16, "seed": 7, "shuffle_buffer": 256, **kw}
    return GenomicWebDataModule(str(root), **kw)


def quiet_trainer(**kwargs) -> L.Trainer:
    """A CPU Trainer that writes and prints nothing of its own."""
    return L.Trainer(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


def keys_of(loader) -> list[list[str]]:
    return [list(b["keys"]) for b in loader]


@pytest.mark.parametrize("workers", [0, 2])
def test_identically_seeded_modules_yield_identical_batches(dataset, workers):
    a, b = make(dataset, num_workers=workers), make(dataset, num_workers=workers)
    a.setup("fit")
    b.setup("fit")
    la, lb = a.train_dataloader(), b.train_dataloader()
    first_a, first_b = list(la), list(lb)
    assert [x["keys"] for x in first_a] == [x["keys"] for x in first_b]
    assert all(torch.equal(x["bases"], y["bases"]) for x, y in zip(first_a, first_b))
    # the next pass is the next epoch: a new order, the same for both modules
    second_a, second_b = keys_of(la), keys_of(lb)
    assert second_a == second_b and second_a != [x["keys"] for x in first_a]
    other_seed = make(dataset, num_workers=workers, seed=8)
    other_seed.setup("fit")
    assert keys_of(other_seed.train_dataloader()) != [x["keys"] for x in first_a]


@pytest.mark.parametrize("workers", [0, 2])
def test_every_split_read_exactly_once_and_disjoint(dataset, workers):
    manifest = read_manifest(dataset)
    dm = make(dataset, num_workers=workers)
    dm.setup("fit")
    dm.setup("test")
    seen = {}
    for split, loader in (("val", dm.val_dataloader()), ("test", dm.test_dataloader())):
        batches = list(loader)
        keys = [k for b in batches for k, filler in zip(b["keys"], b["filler"].tolist()) if not filler]
        assert len(keys) == len(set(keys)) == manifest.splits[split].n_samples
        assert all(k == "" for b in batches for k, f in zip(b["keys"], b["filler"].tolist()) if f)
        seen[split] = keys
    train = [k for b in dm.train_dataloader() for k in b["keys"]]
    n_train = manifest.splits["train"].n_samples
    # an exact epoch: every window at most once, fewer than one batch of them left out
    assert len(train) == len(set(train)) == n_train // 16 * 16
    seen["train"] = train
    seqs = {split: {k.rsplit("/", 1)[0] for k in keys} for split, keys in seen.items()}
    assert not seqs["train"] & seqs["val"] and not seqs["train"] & seqs["test"] and not seqs["val"] & seqs["test"]


@pytest.mark.parametrize("workers", [0, 2])
def test_keys_lead_back_to_the_fasta(dataset, klebsiella_seqs, workers):
    dm = make(dataset, rc_prob=0.5, num_workers=workers)
    dm.setup("fit")
    window = read_manifest(dataset).params.window_length
    flipped = 0
    for i, b in enumerate(dm.train_dataloader()):
        for j, key in enumerate(b["keys"]):
            seq_id = key.rsplit("/", 1)[0]
            assert seq_id == b["seq_id"][j]
            n = int(b["lengths"][j])
            bases = b["bases"][j, :n].numpy()
            if b["rc"][j]:
                bases = reverse_complement_bases(bases)
                flipped += 1
            start = int(b["start"][j])
            assert bases.tobytes() == klebsiella_seqs[seq_id][start : start + window].upper().encode()
        if i == 20:
            break
    assert 0 < flipped < 21 * 16


class Recorder(L.LightningModule):
    """Records the keys of every batch it is given, and checks the batch is model-ready."""

    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen = {"train": [], "val": [], "test": [], "predict": []}

    def _record(self, stage, batch):
        assert batch["tokens"].dtype == torch.int64 and batch["tokens"].shape[1] == SEQ
        assert set(batch) >= {"tokens", "labels", "loss_mask", "position_ids", "keys"}
        self.seen[stage].append(list(batch["keys"]))
        return self.layer(batch["loss_mask"].sum(1, keepdim=True)).sum()

    def training_step(self, batch, idx):
        return self._record("train", batch)

    def validation_step(self, batch, idx):
        self._record("val", batch)

    def test_step(self, batch, idx):
        self._record("test", batch)

    def predict_step(self, batch, idx):
        self._record("predict", batch)
        return torch.zeros(1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


@pytest.mark.slow
def test_trainer_sees_the_same_batches_as_direct_iteration(dataset):
    model = Recorder()
    trainer = quiet_trainer(max_epochs=2, devices=1, num_sanity_val_steps=0)
    dm = make(dataset, num_workers=2)
    trainer.fit(model, datamodule=dm)
    trainer.validate(model, datamodule=dm)
    trainer.test(model, datamodule=dm)
    trainer.predict(model, datamodule=dm)
    direct = make(dataset, num_workers=2)
    direct.setup("fit")
    direct.setup("test")
    train_loader = direct.train_dataloader()
    epoch0, epoch1 = keys_of(train_loader), keys_of(train_loader)
    val = keys_of(direct.val_dataloader())
    assert model.seen["train"] == epoch0 + epoch1
    assert model.seen["val"] == val * 3  # after each of the two epochs, then validate()
    assert model.seen["test"] == keys_of(direct.test_dataloader()) == model.seen["predict"]


def _prepare_in_process(root: str, q) -> None:
    dm = GenomicWebDataModule(
        root,
        seq_length=SEQ,
        fasta=[str(KLEBSIELLA)],
        prepare_options={"stride": 1000, "samples_per_shard": 400, "windows_per_record": 8, "progress": False},
    )
    dm.prepare_data()
    q.put(read_manifest(Path(root)).splits["train"].shards[0].sha256)


def test_fasta_to_training_in_one_call_and_concurrent_prepare(tmp_path, dataset):
    root = tmp_path / "shared_fs" / "ds"
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_prepare_in_process, args=(str(root), q)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    hashes = {q.get(timeout=5) for _ in procs}
    assert len(hashes) == 1
    # same windows and order as the fixture (which used the same options, except workers)
    assert hashes == {read_manifest(dataset).splits["train"].shards[0].sha256}
    dm = GenomicWebDataModule(
        str(root),
        seq_length=SEQ,
        fasta=[str(KLEBSIELLA)],
        micro_batch_size=4,
        prepare_options={"stride": 1000, "samples_per_shard": 400, "windows_per_record": 8, "progress": False},
    )
    trainer = quiet_trainer(max_steps=3, num_sanity_val_steps=0, limit_val_batches=2)
    model = Recorder()
    trainer.fit(model, datamodule=dm)
    assert len(model.seen["train"]) == 3


def test_seq_length_mismatch_is_refused(dataset):
    with pytest.raises(ValueError, match=f"cut for seq_length {SEQ}.*seq_length=2048"):
        make(dataset, seq_length=2048).setup("fit")


@pytest.mark.slow
def test_lightning_cli_fit_from_yaml(dataset, tmp_path):
    code = main(
        [
            "fit",
            "--config",
            "configs/fit_demo.yaml",
            "--data.shards",
            str(dataset),
            "--data.fasta",
            "null",
            "--data.seq_length",
            str(SEQ),
            "--model.max_len",
            str(SEQ),
            *TINY_FIT,
            "--trainer.log_every_n_steps",
            "1",
            "--trainer.callbacks.log_every_n_steps",
            "1",
            "--trainer.logger.init_args.save_dir",
            str(tmp_path / "logs"),
        ]
    )
    assert code == 0
    metrics = (next((tmp_path / "logs").rglob("metrics.csv"))).read_text()
    assert "train_loss" in metrics and "val_loss" in metrics and "samples_per_s" in metrics


def test_abandoned_pass_does_not_corrupt_the_next(dataset):
    """Workers hand batches over in shared memory: leaving a pass early must not garble the next one."""
    dm = make(dataset, num_workers=2)
    dm.setup("fit")
    loader = dm.val_dataloader()
    full = [(list(b["keys"]), b["bases"].clone()) for b in loader]
    for i, _ in enumerate(loader):
        if i == 3:
            break
    again = [(list(b["keys"]), b["bases"].clone()) for b in loader]
    assert [k for k, _ in again] == [k for k, _ in full]
    assert all(torch.equal(a, b) for (_, a), (_, b) in zip(again, full))


# --- regressions found in review ---------------------------------------------------------------


class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)

    def training_step(self, batch, idx):
        return self.layer(batch["loss_mask"].sum(1, keepdim=True)).sum()

    def validation_step(self, batch, idx):
        pass

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.0)


def test_sanity_check_then_training_is_not_a_manifest_mismatch(dataset):
    """The sanity check reads 2 val batches and drops its iterator; the half-read shard's count was
    then held against the manifest when training started (0 workers, Lightning's defaults)."""
    trainer = quiet_trainer(max_steps=3, limit_val_batches=3, val_check_interval=2)
    trainer.fit(Tiny(), datamodule=GenomicWebDataModule(str(dataset), micro_batch_size=8))
    assert trainer.global_step == 3


def test_passes_without_a_trainer_are_successive_epochs(dataset):
    dm = GenomicWebDataModule(str(dataset), micro_batch_size=16, seed=3)
    dm.setup("fit")
    first = [list(b["keys"]) for b in dm.train_dataloader()]
    second = [list(b["keys"]) for b in dm.train_dataloader()]  # a new loader object: the next epoch
    assert first != second


def test_prepare_options_may_carry_the_seed(tmp_path):
    dm = GenomicWebDataModule(
        str(tmp_path / "ds"),
        seq_length=1024,
        fasta=[str(LAMBDA)],
        prepare_options={"stride": 1000, "split": [1, 0, 0], "seed": 9, "progress": False},
    )
    dm.prepare_data()
    assert read_manifest(tmp_path / "ds").params.seed == 9


# --- the manifest is the list -------------------------------------------------------------------


def test_a_stray_copy_of_a_shard_is_not_read(dataset, tmp_path):
    """A copy of a shard beside the listed ones (a glob would train on it twice) is ignored, with a warning."""
    root = tmp_path / "ds"
    shutil.copytree(dataset, root)
    first = sorted((root / "train").glob("wdshards-*.tar"))[0]
    shutil.copy(first, root / "train" / "wdshards-999999.tar")
    dm = make(root)
    with pytest.warns(
        UserWarning, match=r"ignoring 1 file\(s\) not listed in manifest.json: train/wdshards-999999.tar"
    ):
        dm.setup("fit")
    keys = [k for b in dm.train_dataloader() for k in b["keys"]]
    assert len(keys) == len(set(keys)) == read_manifest(root).splits["train"].n_samples // 16 * 16


@pytest.mark.parametrize("factor", [2, 0])
def test_a_split_count_that_disagrees_with_its_shards_is_refused(dataset, tmp_path, factor):
    """n_samples doubled would read every sample twice per epoch; 0 would make the epoch endless."""
    import json

    from bionemo_wds.load.shard_errors import CorruptShardError

    root = tmp_path / "ds"
    shutil.copytree(dataset, root)
    manifest = read_manifest(root).to_json()
    held = manifest["splits"]["train"]["n_samples"]
    manifest["splits"]["train"]["n_samples"] = held * factor
    (root / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(
        CorruptShardError, match=rf"train split lists n_samples {held * factor} but its shards hold {held}"
    ):
        make(root).setup("fit")


# --- epochs and data-parallel ranks -------------------------------------------------------------


def test_set_epoch_selects_the_epoch_outside_a_trainer(dataset):
    counted = make(dataset)
    counted.setup("fit")
    passes = [keys_of(counted.train_dataloader()) for _ in range(3)]  # epochs 0, 1, 2
    chosen = make(dataset)
    chosen.setup("fit")
    chosen.set_epoch(2)
    assert keys_of(chosen.train_dataloader()) == passes[2]
    assert keys_of(chosen.train_dataloader()) != passes[2]  # and the next pass is epoch 3
    with pytest.raises(ValueError, match="non-negative"):
        chosen.set_epoch(-1)


def test_ranks_of_one_model_parallel_group_read_identical_batches(dataset):
    """dp_size=2 over 4 ranks: the two ranks of a group (same dp_rank) get identical batches, the two
    groups disjoint ones."""
    keys = {}
    for rank, dp_rank in enumerate([0, 0, 1, 1]):
        dm = make(dataset, dp_rank=dp_rank, dp_size=2, global_batch_size=32)
        dm.setup("fit")
        assert (dm.world.rank, dm.world.size) == (dp_rank, 2)
        keys[rank] = keys_of(dm.train_dataloader())
    assert keys[0] == keys[1] and keys[2] == keys[3]
    assert not {k for b in keys[0] for k in b} & {k for b in keys[2] for k in b}
    with pytest.raises(ValueError, match="dp_rank and dp_size together"):
        make(dataset, dp_rank=0)
    with pytest.raises(ValueError, match="rank 2 is not within a world of 2"):
        make(dataset, dp_rank=2, dp_size=2)


# --- Lightning knows the epoch length -----------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_every_loader_reports_the_batches_a_pass_yields(dataset, workers):
    dm = make(dataset, num_workers=workers)
    dm.setup("fit")
    dm.setup("test")
    for loader in (dm.train_dataloader(), dm.val_dataloader(), dm.test_dataloader()):
        assert len(loader) == sum(1 for _ in loader) > 0


class OneCycle(Tiny):
    """Builds its schedule from the trainer's estimate, as users of OneCycleLR do."""

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.01)
        total = self.trainer.estimated_stepping_batches
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def test_trainer_knows_the_epoch_and_a_one_cycle_schedule_runs_to_the_end(dataset):
    dm = make(dataset, micro_batch_size=64)
    trainer = quiet_trainer(max_epochs=2, val_check_interval=0.5, limit_val_batches=2, num_sanity_val_steps=0)
    trainer.fit(OneCycle(), datamodule=dm)
    per_epoch = read_manifest(dataset).splits["train"].n_samples // 64
    assert trainer.num_training_batches == per_epoch
    assert trainer.estimated_stepping_batches == trainer.global_step == 2 * per_epoch


# --- resume -------------------------------------------------------------------------------------


def _epoch(dm: GenomicWebDataModule) -> list[list[str]]:
    return keys_of(dm.train_dataloader())


def test_resume_mid_epoch_yields_exactly_the_rest_with_other_workers(dataset):
    full = _epoch(_fit(make(dataset)))
    first = _fit(make(dataset))
    it = iter(first.train_dataloader())
    taken = [list(next(it)["keys"]) for _ in range(7)]
    state = first.state_dict()
    assert state["epoch"] == 0 and state["consumed"] == [[1, 16, 7]]
    again = _fit(make(dataset, num_workers=2))
    again.load_state_dict(state)
    assert taken + _epoch(again) == full
    assert _epoch(again) == _next_epoch(dataset)  # and the pass after is a whole new epoch


def _fit(dm: GenomicWebDataModule) -> GenomicWebDataModule:
    dm.setup("fit")
    return dm


def _next_epoch(dataset) -> list[list[str]]:
    dm = _fit(make(dataset))
    dm.set_epoch(1)
    return _epoch(dm)


def test_a_finished_epoch_is_saved_as_the_start_of_the_next(dataset):
    dm = _fit(make(dataset))
    _epoch(dm)
    assert dm.state_dict()["epoch"] == 1 and dm.state_dict()["consumed"] == []


def test_elastic_resume_reads_exactly_the_windows_not_yet_consumed(dataset):
    """2 ranks (micro 12) consume 5 batches each; 3 ranks (micro 8, the same global batch) finish the
    epoch: no window twice, and everything but the logged remainder read."""
    n = read_manifest(dataset).splits["train"].n_samples
    consumed, states = [], []
    for rank in range(2):
        dm = _fit(make(dataset, micro_batch_size=12, dp_rank=rank, dp_size=2))
        it = iter(dm.train_dataloader())
        consumed += [k for _ in range(5) for k in next(it)["keys"]]
        states.append(dm.state_dict())
    assert states[0] == states[1]
    rest, counts = [], []
    for rank in range(3):
        dm = _fit(make(dataset, micro_batch_size=8, dp_rank=rank, dp_size=3))
        dm.load_state_dict(states[0])
        batches = _epoch(dm)
        counts.append(len(batches))
        rest += [k for b in batches for k in b]
    every = consumed + rest
    assert len(every) == len(set(every)) and n - len(every) < 24
    assert len(set(counts)) == 1


def test_resampled_epochs_resume_too(dataset):
    def module(**kw):
        return _fit(make(dataset, epoch="resampled", **kw))

    full = _epoch(module())
    n = read_manifest(dataset).splits["train"].n_samples
    assert len(full) == -(-n // 16)  # bionemo's pseudo-epoch
    first = module()
    it = iter(first.train_dataloader())
    taken = [list(next(it)["keys"]) for _ in range(3)]
    again = module(num_workers=2)
    again.load_state_dict(first.state_dict())
    assert taken + _epoch(again) == full
    with pytest.raises(ValueError, match="epoch must be one of"):
        make(dataset, epoch="sometimes")
