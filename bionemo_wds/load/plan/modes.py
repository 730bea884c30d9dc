"""Epoch modes: how a split's epoch becomes one rank's batches, as a registry of pure functions.

Every split of every loader is planned here, from an `EpochSpec` (the sources' record tables, their
quotas and stream seeds, the seed, the rank's place and the micro batch), the epoch and the resume
position. A mode is a pair of functions registered by name with `epoch_mode`:

- ``"exact"`` (training): the sources' mixed epoch (`mixing.mixed_order`; one dataset is a mixture
  of one) cut into every rank's contiguous run of whole global batches (`cut.plan_of_order`),
  resumable on another data-parallel size;
- ``"resampled"`` (training): bionemo's pseudo-epochs of ``batches_per_epoch`` batches cut from an
  endless stream of exact epochs back to back; the draws of a sample (reverse complement, tag
  dropout) are those of its pseudo-epoch;
- ``"eval"`` (validation, test): the sources' windows in stored order, one after another, every
  window once over all ranks, padded with filler (`cut.eval_plan`).

A plan's ids are virtual sample ids: ``pass x total + offset_of_source + window`` (`mixing`), where
`pass` seeds the sample's random draws; `split_virtual` recovers the window and the pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from bionemo_wds.errors import OptionError
from bionemo_wds.load.plan.cut import check_rank, eval_plan, plan_of_order, train_batches
from bionemo_wds.load.plan.mixing import mixed_order, split_virtual
from bionemo_wds.load.plan.types import DEFAULT_MIX, FILLER, Consumed, RankPlan, RecordTable, Samples


@dataclass(frozen=True)
class EpochSpec:
    """What a rank's plan of a split depends on, besides the epoch and the resume position.

    Args:
        tables: each source's record table (one for a single dataset).
        quotas: each source's samples per training epoch (the tables' sizes for one dataset).
        seeds: each source's stream seed (`mixing.source_seeds`).
        seed: the run's seed (the mixing of the sources' slots).
        rank, size: this rank's data-parallel place.
        micro: samples per batch.
        mix: samples mixed together at once in a training epoch (`shuffle_buffer`).
        batches_per_epoch: batches of a pseudo-epoch (the ``"resampled"`` mode only).
        whole: an exact epoch's last global batch is completed with filler instead of left out
            (packed samples: every base is trained once per epoch).
    """

    tables: tuple[Samples, ...]
    quotas: tuple[int, ...]
    seeds: tuple[int, ...]
    seed: int
    rank: int = 0
    size: int = 1
    micro: int = 1
    mix: int = DEFAULT_MIX
    batches_per_epoch: int | None = None
    whole: bool = False

    def __post_init__(self) -> None:
        if not len(self.tables) == len(self.quotas) == len(self.seeds) > 0:
            raise OptionError("an epoch needs at least one source, with one quota and one seed each")
        check_rank(self.rank, self.size, self.micro)

    @property
    def samples(self) -> int:
        """Samples of a training epoch (over all ranks)."""
        return int(sum(self.quotas))

    @property
    def windows(self) -> int:
        """Windows of every source together (one pass over each)."""
        return int(sum(t.n_windows for t in self.tables))


class EpochMode(Protocol):
    """How one kind of epoch is planned."""

    def __call__(self, spec: EpochSpec, epoch: int, consumed: Sequence[Consumed]) -> RankPlan:
        """Rank ``spec.rank``'s batches of `epoch`, from the resume position `consumed`."""
        ...


@dataclass(frozen=True)
class Mode:
    """A registered epoch mode: its plan, its length by arithmetic, and whether it trains."""

    plan: EpochMode
    length: Callable[[EpochSpec, Sequence[Consumed]], int]
    training: bool


#: The epoch modes by name (`epoch_mode` registers them).
EPOCH_MODES: dict[str, Mode] = {}


def epoch_mode(
    name: str, length: Callable[[EpochSpec, Sequence[Consumed]], int], training: bool = True
) -> Callable[[EpochMode], EpochMode]:
    """Register `plan` as epoch mode `name`, with `length` giving ``plan(...).total_batches`` cheaply."""

    def register(plan: EpochMode) -> EpochMode:
        EPOCH_MODES[name] = Mode(plan, length, training)
        return plan

    return register


def training_modes() -> list[str]:
    """The names a data module's ``epoch=`` option takes."""
    return [name for name, mode in EPOCH_MODES.items() if mode.training]


def mode(name: str) -> Mode:
    """The registered mode `name` (an `OptionError` naming the known ones)."""
    if name not in EPOCH_MODES:
        raise OptionError(f"epoch must be one of {', '.join(training_modes())}, got {name!r}")
    return EPOCH_MODES[name]


def rank_plan(name: str, spec: EpochSpec, epoch: int, consumed: Sequence[Consumed] = ()) -> RankPlan:
    """This rank's batches of `epoch` in mode `name`, from the resume position `consumed`."""
    return mode(name).plan(spec, epoch, consumed)


def epoch_length(name: str, spec: EpochSpec, consumed: Sequence[Consumed] = ()) -> int:
    """Batches of a whole epoch on every rank in mode `name` (consumed ones included), by arithmetic."""
    return mode(name).length(spec, consumed)


@epoch_mode("exact", lambda spec, consumed: train_batches(spec.samples, spec.size, spec.micro, consumed, spec.whole))
def plan_exact(spec: EpochSpec, epoch: int, consumed: Sequence[Consumed]) -> RankPlan:
    """Every sample of the mixed epoch at most once (exactly once when `whole`); every rank the same
    number of batches."""
    order = mixed_order(spec.tables, spec.quotas, spec.seed, epoch, spec.mix, spec.seeds)
    return plan_of_order(order, spec.samples, spec.rank, spec.size, spec.micro, consumed, spec.whole)


def epoch_batches(n_samples: int, global_batch_size: int) -> int:
    """Batches in bionemo's pseudo-epoch: ``ceil(n_samples / global_batch_size)``."""
    if global_batch_size < 1:
        raise OptionError(f"global_batch_size must be at least 1, got {global_batch_size}")
    return -(-n_samples // global_batch_size)


def pseudo_epoch_length(spec: EpochSpec, consumed: Sequence[Consumed]) -> int:
    """Batches of a pseudo-epoch (what the resampled mode was given)."""
    if spec.batches_per_epoch is None:
        raise OptionError('epoch="resampled" needs the pseudo-epoch length (global_batch_size)')
    return spec.batches_per_epoch


@epoch_mode("resampled", pseudo_epoch_length)
def plan_resampled(spec: EpochSpec, epoch: int, consumed: Sequence[Consumed]) -> RankPlan:
    """Pseudo-epoch `epoch` of an endless stream of exact epochs, `batches_per_epoch` batches on
    every rank (a resampled stream resumes only in its own data-parallel layout)."""
    if any((seg.dp_size, seg.micro) != (spec.size, spec.micro) for seg in consumed):
        raise OptionError('resuming with another data-parallel size or micro batch needs epoch="exact"')
    per_epoch = pseudo_epoch_length(spec, consumed)
    spec = replace(spec, whole=False)  # an endless stream of exact epochs: none is completed with filler
    steps = spec.samples // (spec.micro * spec.size)
    if steps == 0:
        raise OptionError(f"{spec.samples} windows cannot fill one global batch of {spec.micro * spec.size}")
    pieces, cached = [], {}
    for step in range(epoch * per_epoch, (epoch + 1) * per_epoch):
        exact, within = divmod(step, steps)
        if exact not in cached:
            cached = {exact: plan_exact(spec, exact, ()).batches}
        pieces.append(cached[exact][within])
    batches = np.stack(pieces) if pieces else np.empty((0, spec.micro), np.int64)
    # a sample draws by its pseudo-epoch: the pass of its virtual id is the pseudo-epoch's number
    windows, _ = split_virtual(batches, spec.windows)
    batches = np.where(batches == FILLER, FILLER, epoch * spec.windows + windows)
    done = sum(seg.batches for seg in consumed)
    return RankPlan(batches[done:], first_batch=done, total_batches=per_epoch)


def eval_length(spec: EpochSpec, consumed: Sequence[Consumed]) -> int:
    """Batches of an evaluation pass on every rank (`cut.eval_plan`'s ``total_batches``)."""
    share = -(-spec.windows // spec.size)  # windows per rank, rounded up
    return -(-share // spec.micro)


@epoch_mode("eval", eval_length, training=False)
def plan_eval(spec: EpochSpec, epoch: int, consumed: Sequence[Consumed]) -> RankPlan:
    """Every window of every source once over all ranks, in stored order (the same every epoch)."""
    return eval_plan(spec.windows, spec.rank, spec.size, spec.micro)


def one_table(
    table: RecordTable, seed: int, dp_rank: int = 0, dp_size: int = 1, micro: int = 1, **kw: Any
) -> EpochSpec:
    """The spec of a single dataset (a mixture of one, read once per epoch)."""
    return EpochSpec((table,), (table.n_windows,), (seed,), seed, dp_rank, dp_size, micro, **kw)


def resampled_plan(
    table: RecordTable,
    seed: int,
    pseudo_epoch: int,
    dp_rank: int,
    dp_size: int,
    micro: int,
    batches_per_epoch: int,
    mix: int = DEFAULT_MIX,
) -> RankPlan:
    """Pseudo-epoch `pseudo_epoch` of one dataset (the ``"resampled"`` mode), as window ids of the table."""
    spec = one_table(table, seed, dp_rank, dp_size, micro, mix=mix, batches_per_epoch=batches_per_epoch)
    plan = plan_resampled(spec, pseudo_epoch, ())
    windows = np.where(plan.batches == FILLER, FILLER, split_virtual(plan.batches, max(table.n_windows, 1))[0])
    return RankPlan(windows, total_batches=plan.total_batches)
