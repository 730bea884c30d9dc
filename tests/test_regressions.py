"""Regression tests for defects found in review (each names what went wrong)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch

from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.load.sharding import loader_workers
from bionemo_wds.load.world import World

from conftest import KLEBSIELLA

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


def test_a_rank_without_train_shards_is_refused():
    with pytest.raises(ValueError, match="rank 3 would get no data"):
        loader_workers("train", 3, World(3, 4), 0, require_data=True)


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
