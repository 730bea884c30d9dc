"""Where training stands in its epoch, kept in the main process, and how a checkpoint carries it.

`TrainProgress` counts the training batches consumed in the current epoch and, after a restore,
remembers which were consumed before (with which data-parallel size and micro batch): the epoch
plan (`plan.train_plan`) turns that into exactly the rest of the epoch.
"""

from __future__ import annotations

from typing import Any

from bionemo_wds.load.plan.types import Consumed

#: Version of the data module's checkpoint state (``state_dict``).
STATE_VERSION = 1


class EpochState:
    """The epoch that seeds this pass, and the one the next pass gets when no trainer says otherwise."""

    def __init__(self, epoch: int = 0):
        self.epoch = epoch
        self.next_epoch = epoch


class TrainProgress:
    """Batches consumed in the current training epoch, and the segments a restore brought."""

    def __init__(self) -> None:
        self.epoch = 0
        self.batches = 0  # consumed in this epoch, over all segments
        self.before: list[Consumed] = []  # segments of this epoch consumed before the restore
        self.restored: tuple[int, list[Consumed]] | None = None  # (epoch, segments) to apply next

    def start_pass(self, epoch: int) -> list[Consumed]:
        """A training pass of `epoch` begins: the segments already consumed of it (after a restore).

        A restored position stays until a pass of its epoch runs to its end (`finish_pass`), so a
        pass stopped early (a peek at the first batch) and started again starts from it again."""
        before = self.restored_for(epoch)
        if not before:
            self.restored = None
        self.epoch, self.before = epoch, before
        self.batches = sum(seg.batches for seg in before)
        return before

    def restored_for(self, epoch: int) -> list[Consumed]:
        """The segments of `epoch` a restore says were consumed (none without one, or for another epoch)."""
        if self.restored is not None and self.restored[0] == epoch:
            return self.restored[1]
        return []

    def finish_pass(self) -> None:
        """The training pass ran to its end: a restored position is used up."""
        self.restored = None

    def consumed(self, dp_size: int, micro: int) -> list[Consumed]:
        """The epoch's segments so far, the current one last (with the current layout)."""
        current = self.batches - sum(seg.batches for seg in self.before)
        return [*self.before, Consumed(dp_size, micro, current)] if current else list(self.before)

    def state(self, seed: int, dp_size: int, micro: int, epoch_batches: int | None) -> dict[str, Any]:
        """The checkpoint state: a finished epoch is saved as the start of the next one."""
        if epoch_batches is not None and self.batches >= epoch_batches:
            return {
                "version": STATE_VERSION,
                "seed": seed,
                "epoch": self.epoch + 1,
                "consumed": [],
                "dp_size": dp_size,
                "micro_batch_size": micro,
            }
        segments = [[seg.dp_size, seg.micro, seg.batches] for seg in self.consumed(dp_size, micro)]
        return {
            "version": STATE_VERSION,
            "seed": seed,
            "epoch": self.epoch,
            "consumed": segments,
            "dp_size": dp_size,
            "micro_batch_size": micro,
        }

    def restore(self, state: dict[str, Any]) -> None:
        """Remember a checkpoint's position; the next training pass of its epoch starts there."""
        self.restored = position(state)


def position(state: dict[str, Any]) -> tuple[int, list[Consumed]]:
    """(epoch, segments consumed in it) of a checkpoint state."""
    segments = [Consumed(int(d), int(m), int(b)) for d, m, b in state.get("consumed", [])]
    return int(state.get("epoch", 0)), segments
