"""`bionemo-wds fit|validate|test|predict`: LightningCLI over `GenomicWebDataModule` and `TinyDNALM`.

Every option of the trainer, the model and the data module can be set in YAML (``--config
configs/fit_demo.yaml``) or on the command line (``--data.micro_batch_size 16``); ``bionemo-wds fit
--help`` lists them. For your own model, use `lightning.pytorch.cli.LightningCLI` with
`GenomicWebDataModule` the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")


def run(argv: Sequence[str]) -> int:
    from lightning.pytorch.cli import LightningCLI

    from bionemo_wds.load.genomic import GenomicWebDataModule
    from bionemo_wds.models.tiny_lm import TinyDNALM

    LightningCLI(
        TinyDNALM,
        GenomicWebDataModule,
        args=list(argv),
        save_config_kwargs={"overwrite": True},
        parser_kwargs={"description": "Train or evaluate TinyDNALM on bionemo-wds shards."},
    )
    return 0
