"""Which samples a rank reads in an epoch: the one place that decides it. Pure functions, no I/O.

- `types`: a split's `RecordTable`, a rank's `RankPlan` of one pass, resume segments (`Consumed`);
- `order`: a training epoch's seeded order of one dataset (`EpochOrder`), computed for any positions;
- `mixing`: several datasets' exact quotas, interleaving and streams of passes (one dataset is a
  mixture of one); virtual sample ids carry the source and the pass that seeds a sample's draws;
- `cut`: an epoch's sequence cut into every rank's batches, resumed (also elastically), evaluation
  splits, and batches dealt to loader workers (`worker_units`);
- `modes`: the registry of epoch modes (``"exact"``, ``"resampled"``, ``"eval"``) over an `EpochSpec`;
- `progress`: the batches consumed in the current epoch and the checkpoint state that carries them.

**The unit is a sample.** A plan deals sample ids; today a sample is one stored window (its bases
are one span of one record), so a sample id is a window id. Samples made at load time fit the same
plan unchanged: windows cut at load become a sample table of (sequence, start, length) spans per
split, and packing several short sequences into one sample makes a sample a list of such spans
(one row of a ragged table). The plan still deals int64 ids into that table, resumes by counting
them and cuts them across ranks and workers the same way; only the reader that turns an id into
bases, and the batch builder that lays spans out in a row, learn what a sample holds.
"""

from bionemo_wds.load.plan.cut import (
    Runs,
    check_rank,
    eval_plan,
    plan_of_order,
    remaining_runs,
    remaining_sequence,
    train_batches,
    train_plan,
    worker_units,
)
from bionemo_wds.load.plan.modes import (
    EPOCH_MODES,
    EpochSpec,
    epoch_batches,
    epoch_length,
    epoch_mode,
    rank_plan,
    resampled_plan,
    training_modes,
)
from bionemo_wds.load.plan.order import EpochOrder, epoch_sequence
from bionemo_wds.load.plan.types import CHUNK, DEFAULT_MIX, FILLER, UNIT_BATCHES, Consumed, RankPlan, RecordTable

__all__ = [
    "CHUNK",
    "DEFAULT_MIX",
    "EPOCH_MODES",
    "FILLER",
    "UNIT_BATCHES",
    "Consumed",
    "EpochOrder",
    "EpochSpec",
    "RankPlan",
    "RecordTable",
    "Runs",
    "check_rank",
    "epoch_batches",
    "epoch_length",
    "epoch_mode",
    "epoch_sequence",
    "eval_plan",
    "plan_of_order",
    "rank_plan",
    "remaining_runs",
    "remaining_sequence",
    "resampled_plan",
    "train_batches",
    "train_plan",
    "training_modes",
    "worker_units",
]
