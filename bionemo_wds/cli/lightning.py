"""`bionemo-wds fit|validate|test|predict`: LightningCLI over `GenomicWebDataModule` and any `LightningModule`.

Every option of the trainer, the model and the data module can be set in YAML (``--config
configs/fit_demo.yaml``) or on the command line (``--data.micro_batch_size 16``); ``bionemo-wds fit
--help`` lists them. The model is `TinyDNALM` unless another `LightningModule` is named (subclass
mode: ``--model my_pkg.MyLM`` or ``model: {class_path: my_pkg.MyLM, init_args: {...}}``; ``bionemo-wds
fit --model my_pkg.MyLM --model.help my_pkg.MyLM`` lists its options). A model that takes ``max_len``
gets ``data.seq_length`` (the shards' when not given), so the two cannot disagree.

A model named on the command line or in a config file starts from its own defaults, not from the
init_args of the class named before it (`fit_args.separate_model_switches`). A user error (an
unknown or abbreviated option, a model that cannot be imported, bad input, a missing file or
manifest, an unreadable remote, a damaged shard, an option the data module or the model refuses)
prints one line naming it and exits 2, as in the other subcommands (`exit_codes.EXIT_CODES`: by the
error's type, found in the chain Lightning and jsonargparse wrap around it); the command line's own
mistakes, a config file's included (invalid YAML, a misspelt key), are found before Lightning is
imported (`fit_args.check_options`, `fit_config.check_config_files`), and the data options right
after parsing, before the Trainer is built (`fit_checks.check_data`). A trainer option Lightning
refuses (an integer ``val_check_interval`` longer than the epoch) is one line too
(`fit_checks.trainer_refusal`). Anything else (a bug) keeps its traceback.

``--trainer.limit_val_batches 1`` (or ``limit_val_batches: 1`` in YAML) is one batch and ``1.0`` every
batch, as for Lightning's ``Trainer`` (`fit_trainer.Trainer`).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Sequence
from typing import Any

from bionemo_wds.cli.exit_codes import report_error
from bionemo_wds.cli.fit_args import DEFAULT_MODEL, FitArgError, check_options, one_line, separate_model_switches
from bionemo_wds.cli.fit_config import check_config_files

LIGHTNING_COMMANDS = ("fit", "validate", "test", "predict")
DESCRIPTION = (
    "Train or evaluate a LightningModule on bionemo-wds shards. The model is TinyDNALM unless --model "
    "names another (--model my_pkg.MyLM); `--model.help TinyDNALM` (or `--model.help my_pkg.MyLM`) lists "
    "its options. data.seq_length (the dataset's when not given) sets the model's max_len when it has one. "
    "Exit codes: 0 ok, 2 bad input."
)


def run(argv: Sequence[str]) -> int:
    """LightningCLI `argv` (``fit ...``); returns the exit code (0 ok, 2 a user error, named in one line)."""
    argv = list(argv)
    try:
        check_options(argv[1:])
        check_config_files(argv[1:])
    except FitArgError as exc:
        print(f"bionemo-wds {argv[0]}: error: {exc}", file=sys.stderr)
        return 2
    args = [argv[0], *separate_model_switches(argv[1:])]

    import lightning as L
    from jsonargparse import ArgumentError
    from lightning.pytorch.cli import LightningCLI
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    from bionemo_wds.cli.fit_checks import check_data, trainer_error, trainer_refusal
    from bionemo_wds.cli.fit_trainer import Trainer
    from bionemo_wds.lightning.datamodule import GenomicWebDataModule

    class GenomicCLI(LightningCLI):
        def add_arguments_to_parser(self, parser: Any) -> None:
            parser.set_defaults({"model": {"class_path": DEFAULT_MODEL}})

        def parse_arguments(self, parser: Any, args: Any) -> None:
            super().parse_arguments(parser, args)
            subcommand = self.config.get("subcommand")
            if subcommand:  # before the seed, the model and the Trainer: a data mistake is the only line
                check_data(self.config[subcommand]["data"].as_dict(), subcommand)

        def before_instantiate_classes(self) -> None:
            config = self.config[self.subcommand] if self.subcommand else self.config
            follow_seq_length(config)
            follow_vocab_size(config)

        def instantiate_trainer(self, **kwargs: Any) -> Any:
            try:
                return super().instantiate_trainer(**kwargs)
            except MisconfigurationException as exc:  # an option of its own the Trainer refused
                raise trainer_error(exc) from exc

    # every parser: errors raised (one line below), not a usage dump; no abbreviated options
    strict = {"exit_on_error": False, "allow_abbrev": False}
    try:
        # LightningCLI warns when given args= while sys.argv holds arguments too: it suspects two
        # command lines. Here they are one: `args` is sys.argv[1:] (from the console) with the
        # `--model null` separators added, or the caller's list (`main([...])`).
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
            GenomicCLI(
                L.LightningModule,
                GenomicWebDataModule,
                subclass_mode_model=True,
                trainer_class=Trainer,  # --trainer.limit_val_batches 1: one batch, not 1.0 (all)
                args=args,
                save_config_kwargs={"overwrite": True},
                parser_kwargs={
                    "prog": "bionemo-wds",
                    "description": DESCRIPTION,
                    **strict,
                    **{c: {"description": DESCRIPTION, **strict} for c in LIGHTNING_COMMANDS},
                },
            )
    except ArgumentError as exc:
        print(f"bionemo-wds {argv[0]}: error: {one_line(str(exc))}", file=sys.stderr)
        return 2
    except Exception as exc:
        code = report_error(argv[0], exc)  # by type, through the chain Lightning and jsonargparse wrap
        if code is not None:
            return code
        refusal = trainer_refusal(exc)  # a trainer option that cannot work with these batches
        if refusal is None:
            raise
        print(f"bionemo-wds {argv[0]}: error: {refusal}", file=sys.stderr)
        return 2
    return 0


def follow_seq_length(config: Any) -> None:
    """Give the model `data.seq_length` as ``max_len`` when its ``__init__`` takes one (in place, on the
    parsed config of one subcommand). Without ``data.seq_length``, the shards' (from their manifest)
    unless the data module prepares them from FASTA (which needs ``seq_length`` and says so)."""
    init_args = config.get("model.init_args")
    if init_args is None or "max_len" not in init_args:
        return
    seq_length = config.get("data.seq_length")
    if seq_length is None:
        if config.get("data.fasta"):
            return
        from bionemo_wds.format import read_manifest

        root = first_dataset(config)
        if root is None:
            return  # no dataset named: the data module says what it needs
        seq_length = read_manifest(root, config.get("data.storage_options")).params.seq_length
    init_args["max_len"] = seq_length


def follow_vocab_size(config: Any) -> None:
    """Give the model the vocabulary size of `data.tokenizer` as ``vocab_size`` when its ``__init__``
    takes one and the tokenizer is not bytes (whose 256 ids are the models' default)."""
    init_args = config.get("model.init_args")
    tokenizer = config.get("data.tokenizer")
    if init_args is None or "vocab_size" not in init_args or tokenizer in (None, "bytes"):
        return
    from bionemo_wds.load.tokenize import resolve_tokenizer

    vocab = resolve_tokenizer(tokenizer)
    if vocab is not None:
        init_args["vocab_size"] = vocab.vocab_size


def first_dataset(config: Any) -> str | None:
    """The root of the data module's dataset: `data.shards`, or the first train dataset of a blend
    (`data.datasets` or `data.blend`; every dataset of a blend has the same seq_length)."""
    if config.get("data.shards") is not None or not (config.get("data.datasets") or config.get("data.blend")):
        return config.get("data.shards")
    from bionemo_wds.load.blend_file import entries_for, parse_datasets, read_blend

    datasets = config.get("data.datasets")
    entries = parse_datasets(datasets) if datasets else read_blend(config.get("data.blend"))
    return entries_for(entries, "train")[0].path
