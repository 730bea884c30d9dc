"""Which samples a rank reads in an epoch: the one place that decides it. Pure functions, no I/O.

- `types`: a split's `RecordTable`, a rank's `RankPlan` of one pass, resume segments (`Consumed`);
- `order`: a training epoch's seeded order of one dataset (`EpochOrder`), computed for any positions;
- `mixing`: several datasets' exact quotas, interleaving and streams of passes (one dataset is a
  mixture of one); virtual sample ids carry the source and the pass that seeds a sample's draws;
- `cut`: an epoch's sequence cut into every rank's batches, resumed (also elastically), evaluation
  splits, and batches dealt to loader workers (`worker_units`);
- `modes`: the registry of epoch modes (``"exact"``, ``"resampled"``, ``"eval"``) over an `EpochSpec`;
- `progress`: the batches consumed in the current epoch and the checkpoint state that carries them;
- `samples`: the samples of a sequence-layout split cut at load time (windows of any length, or
  packed documents), from its sequences' lengths alone.

**The unit is a sample.** A plan deals sample ids from a table (`types.Samples`): a `RecordTable`
of stored windows (a sample id is a window id, its bases one span of one record), or a table of
samples cut at load from a sequence layout (`samples.WindowSamples`, `samples.PackedSamples`: a
sample is one or more (sequence, start, length) documents, computed from the id and the pass). The
plan deals int64 ids into either the same way, resumes by counting them and cuts them across
ranks and workers unchanged; only the reader that turns an id into bases (`load.reader`,
`load.span_reader`) and the batch builder that lays documents out in a row (`batch.assemble`,
`batch.packed`) learn what a sample holds.
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
    unit_ranges,
    worker_batches_from,
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
    "unit_ranges",
    "worker_batches_from",
    "worker_units",
]
