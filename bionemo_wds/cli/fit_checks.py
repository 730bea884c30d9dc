"""`fit|validate|test|predict`: the data options checked before anything is built, and the Trainer's
refusals of its options as one line.

* `check_data`: right after the command line is parsed (before the seed is set, the model and the
  Trainer are built, and Lightning prints its first line), the data options are tried: a
  `GenomicWebDataModule` of them is made (its own checks), and unless it prepares its shards from
  FASTA, the datasets are opened as ``setup()`` opens them: every manifest read and checked against
  ``seq_length``, the splits the stage needs, a blend's agreement, and the training split's cut
  (a sequence-layout dataset's windows or packing; the options a windows-layout dataset cannot
  serve). A mistake is one line and exit 2 within a second of parsing, not after the Trainer's
  start-up. The module and datasets made for the check are dropped; the run makes its own (a
  remote dataset's manifest and shard listing are read twice).
* `TrainerOptionError` and `trainer_refusal`: Lightning refuses some trainer options with a
  `MisconfigurationException` while building the Trainer, and an integer ``val_check_interval``
  longer than the epoch with a ``ValueError`` when training starts (a 40-line traceback, exit 1).
  Both become one line naming the option (and the epoch's batches), exit 2.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from bionemo_wds.errors import OptionError, exception_chain
from bionemo_wds.lightning.datamodule import REQUIRED_SPLITS, GenomicWebDataModule
from bionemo_wds.load.sources import Sources
from bionemo_wds.load.splits import Split

#: The rank the check opens the datasets as: not rank 0, which warns about files a manifest does not
#: list (the run's own rank 0 does that once, in ``setup()``).
QUIET_RANK = 1
#: Lightning's refusal of an integer ``val_check_interval`` longer than an epoch (`fit_loop.setup_data`).
VAL_CHECK = re.compile(
    r"`val_check_interval` \((\d+)\) must be less than or equal to the number of the training batches \((\d+)\)"
)


class TrainerOptionError(OptionError):
    """A trainer option Lightning refused while building the Trainer (its message, in one line)."""


def check_data(data: Mapping[str, Any], stage: str) -> None:
    """Try the data module's options `data` for `stage` (see the module docstring); raises the
    library's own error (`OptionError`, `ManifestError`, ...) for the first mistake."""
    module = GenomicWebDataModule(**data)
    if module.fasta:
        return  # prepared in prepare_data(): what is there now may be replaced
    sources = Sources(
        module.entries, module.samples_per_epoch, module.seed, module.opening, QUIET_RANK, None, module.cutting
    )
    for split in REQUIRED_SPLITS[stage]:
        lacking = sources.lacking(split)
        if lacking:
            raise OptionError(f"{lacking} has no {split.name} split, which stage {stage!r} needs")
    for source in sources.of(Split.train):
        module.samples.check_tags(source.manifest.params.max_tag_bytes, source.root)
    if stage == "fit":
        for source in sources.of(Split.train):
            source.sample_table(Split.train, module.cutting, module.seed)


def trainer_error(exc: BaseException) -> TrainerOptionError:
    """A `MisconfigurationException` of the Trainer's construction as a user error of one line."""
    return TrainerOptionError(f"trainer: {' '.join(str(exc).split())}")


def trainer_refusal(exc: BaseException) -> str | None:
    """One line for Lightning's refusal of ``val_check_interval`` (in `exc` or its chain), or None."""
    for error in exception_chain(exc):
        found = VAL_CHECK.search(str(error)) if isinstance(error, ValueError) else None
        if found:
            interval, batches = found.groups()
            return (
                f"--trainer.val_check_interval {interval} is more than the {batches} training batches of an "
                f"epoch: give at most {batches}, a fraction of the epoch (0.5: twice an epoch), or "
                f"--trainer.check_val_every_n_epoch null to validate every {interval} batches across epochs"
            )
    return None
