"""Where a process stands: data-parallel rank and size, from arguments, the Trainer strategy, or alone."""

from __future__ import annotations

from types import SimpleNamespace

import lightning as L
import pytest

from bionemo_wds.load.world import World


def test_explicit_dp_arguments_win_over_the_trainer():
    trainer = SimpleNamespace(distributed_sampler_kwargs={"rank": 1, "num_replicas": 2}, global_rank=3, world_size=4)
    assert World.detect(trainer, dp_rank=0, dp_size=2) == World(0, 2)


def test_the_strategys_data_parallel_mesh_wins_over_global_rank():
    """What `ModelParallelStrategy.distributed_sampler_kwargs` reports (a stand-in trainer object:
    no multi-GPU mesh can run here): the data-parallel rank and size, not the global ones."""
    trainer = SimpleNamespace(distributed_sampler_kwargs={"rank": 1, "num_replicas": 2}, global_rank=3, world_size=4)
    assert World.detect(trainer) == World(1, 2)
    single_device = SimpleNamespace(distributed_sampler_kwargs=None, global_rank=0, world_size=1)
    assert World.detect(single_device) == World(0, 1)


def test_a_real_single_device_trainer_is_rank_0_of_1():
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False)
    assert World.detect(trainer) == World(0, 1)


def test_bad_ranks_are_refused():
    with pytest.raises(ValueError, match="together"):
        World.detect(None, dp_rank=1)
    with pytest.raises(ValueError, match="not within"):
        World(3, 2)
    assert World.detect(None) == World(0, 1)
