"""Regression tests for defects found in review (each names what went wrong)."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from bionemo_wds.format import decode_record, encode_record, read_manifest
from bionemo_wds.load.genomic import GenomicWebDataModule
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.compat.pickles import pickles_to_tars
from bionemo_wds.load.sharding import loader_workers
from bionemo_wds.load.world import World

from conftest import KLEBSIELLA, LAMBDA, read_fasta

OPTS = dict(seq_length=1024, stride=1000, samples_per_shard=400, windows_per_record=8, progress=False)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("reg") / "ds"
    prepare([KLEBSIELLA], out, PrepareOptions(**OPTS, workers=2))
    return out


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
    trainer = L.Trainer(max_steps=3, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, limit_val_batches=3,
                        val_check_interval=2)
    trainer.fit(Tiny(), datamodule=GenomicWebDataModule(str(dataset), micro_batch_size=8))
    assert trainer.global_step == 3


def test_a_stale_cache_is_not_taken_for_the_input(tmp_path):
    """A run killed while cataloguing leaves only .cache; a later run with another input of the same
    name must not read the cached copy of the old one."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    (a / "genome.fa.gz").write_bytes(LAMBDA.read_bytes())
    (b / "genome.fa.gz").write_bytes(gzip.compress(b">other_genome\n" + b"ACGT" * 3000 + b"\n"))
    out = tmp_path / "out"
    prepare([a / "genome.fa.gz"], out, PrepareOptions(**{**OPTS, "split": (1, 0, 0)}))
    for name in os.listdir(out):  # what a kill during cataloguing leaves: the cache only
        if name != ".cache":
            import shutil

            shutil.rmtree(out / name) if (out / name).is_dir() else (out / name).unlink()
    (out / ".cache").mkdir(exist_ok=True)
    (out / ".cache" / "0000-genome.fa").write_bytes(gzip.decompress(LAMBDA.read_bytes()))
    prepare([b / "genome.fa.gz"], out, PrepareOptions(**{**OPTS, "split": (1, 0, 0)}))
    from test_prepare import all_windows

    assert {r[0] for r in all_windows(out)["train"]} == {"other_genome"}


def test_a_rank_without_train_shards_is_refused():
    with pytest.raises(ValueError, match="rank 3 would get no data"):
        loader_workers("train", 3, World(3, 4), 0, require_data=True)


def test_inconsistent_record_is_a_decode_error():
    good = encode_record([b"ACGT", b"GGC"], ["a", "b"], [0, 0], [0, 0], ["", ""])
    assert len(decode_record(good)) == 2
    import msgpack

    obj = msgpack.unpackb(good)
    obj["lengths"] = [4, 9]
    with pytest.raises(ValueError, match="add up to 13 bases but it holds 7"):
        decode_record(msgpack.packb(obj, use_bin_type=True))
    obj["lengths"] = [4, 3]
    obj["start"] = [0]
    with pytest.raises(ValueError, match="columns"):
        decode_record(msgpack.packb(obj, use_bin_type=True))


def test_single_process_prepare_closes_its_files(tmp_path):
    out = tmp_path / "o"
    prepare([KLEBSIELLA], out, PrepareOptions(**OPTS, workers=1))
    open_paths = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
                  if os.path.exists(f"/proc/self/fd/{fd}")]
    assert not [p for p in open_paths if str(out) in p]


def test_passes_without_a_trainer_are_successive_epochs(dataset):
    dm = GenomicWebDataModule(str(dataset), micro_batch_size=16, seed=3)
    dm.setup("fit")
    first = [list(b["keys"]) for b in dm.train_dataloader()]
    second = [list(b["keys"]) for b in dm.train_dataloader()]  # a new loader object: the next epoch
    assert first != second


def test_pickles_to_tars_leaves_no_shards_of_an_earlier_run(tmp_path):
    import pickle

    for i in range(8):
        (tmp_path / f"s{i}.x.pyd").write_bytes(pickle.dumps(i))
    names = [f"s{i}" for i in range(8)]
    out = tmp_path / "tars"
    assert len(pickles_to_tars(str(tmp_path), names, "x.pyd", str(out), "p", min_num_shards=4)) == 4
    assert len(pickles_to_tars(str(tmp_path), names, "x.pyd", str(out), "p", min_num_shards=2)) == 2
    assert len(list(out.glob("p-*.tar"))) == 2


def test_prepare_options_may_carry_the_seed(tmp_path):
    dm = GenomicWebDataModule(str(tmp_path / "ds"), seq_length=1024, fasta=[str(LAMBDA)],
                              prepare_options={"stride": 1000, "split": [1, 0, 0], "seed": 9, "progress": False})
    dm.prepare_data()
    assert read_manifest(tmp_path / "ds")["params"]["seed"] == 9


@pytest.mark.slow
def test_spawned_workers_read_every_sample_once(dataset):
    """Without fork the shared-memory ring is off: batches go through the queue in groups."""
    code = f"""
import multiprocessing as mp, sys
from bionemo_wds.load.genomic import GenomicWebDataModule
from bionemo_wds.format import read_manifest
if __name__ == "__main__":
    mp.set_start_method("spawn")
    dm = GenomicWebDataModule({str(dataset)!r}, micro_batch_size=8, num_workers=2)
    dm.setup("validate")
    keys = [k for b in dm.val_dataloader() for k in b["keys"]]
    n = read_manifest(dm.root)["splits"]["val"]["n_samples"]
    assert len(keys) == len(set(keys)) == n, (len(keys), n)
    print("ok", n)
"""
    script = Path(dataset).parent / "spawn_check.py"
    script.write_text(code)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("ok")
