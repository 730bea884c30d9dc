"""`GenomicWebDataModule`: prepared genome shards (or FASTA) to model-ready batches in Lightning.

A thin `LightningDataModule` over `load.dataset.GenomicDataset`: per split it builds the dataset
(one per evaluated dataset for val and test: a blend's per-dataset loss as Lightning's multiple
dataloaders), hands each to `split_loaders.SplitLoaders`, and adds what only Lightning knows: the
Trainer's rank and size (`World.detect`), its epoch, the batches a training step consumed
(``on_after_batch_transfer``, which also expands the compact uint8 batches into model inputs on the
device; users iterating a loader call `model_inputs(batch)`), and the checkpoint state. Given
``fasta=[...]``, `prepare_data` runs the preparer once (under the output's lock) and reuses it.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import lightning as L
import numpy as np

from bionemo_wds.errors import OptionError
from bionemo_wds.lightning.fasta_prep import prepare_fasta
from bionemo_wds.lightning.loaders import check_stage
from bionemo_wds.lightning.memory_cache import check_cache_memory
from bionemo_wds.lightning.split_loaders import SplitLoaders
from bionemo_wds.load.batch.options import SampleOptions
from bionemo_wds.load.dataset import GenomicDataset
from bionemo_wds.load.dataset_options import cached_splits, check_module_options, check_options
from bionemo_wds.load.plan import RankPlan
from bionemo_wds.load.plan.progress import EpochState, TrainProgress, position
from bionemo_wds.load.records import SplitRecords
from bionemo_wds.load.shard_errors import Handler, resolve_handler
from bionemo_wds.load.sources import OpenOptions, Sources, blend_entries
from bionemo_wds.load.spans import Cutting, split_records
from bionemo_wds.load.splits import Split, as_split
from bionemo_wds.load.world import World
from bionemo_wds.storage.stats import FIELDS as STORAGE_FIELDS

#: The splits a stage needs to exist (fit trains without val: a dataset prepared with --split 1,0,0).
REQUIRED_SPLITS = {"fit": (Split.train,), "validate": (Split.val,), "test": (Split.test,), "predict": (Split.test,)}


class GenomicWebDataModule(L.LightningDataModule):
    """Lightning data module over `bionemo-wds prepare` output.

    Args:
        shards: dataset root (holds manifest.json and one directory per split): a local directory or
            a URL (``s3://bucket/run1``, ``https://host/run1``, any fsspec protocol).
        micro_batch_size: samples per batch on each rank.
        global_batch_size: samples per optimizer step over all ranks (default micro x data-parallel
            size); with ``epoch="resampled"`` it sets the pseudo-epoch of
            ``ceil(n_samples / global_batch_size)`` batches.
        seq_length: tokens per model sample (default: the dataset's). A windows-layout dataset (the
            default ``prepare``) serves only the seq_length its shards were cut for; a sequence-layout
            one (``prepare --layout sequences``) is cut into samples of any seq_length at load.
        rc_prob: probability of reverse-complementing a training window (seeded per sample and epoch).
        control_tags: put each window's control tag between BOS and SEP.
        seed: seeds the epoch plan (record order, window mixing) and RC flips (with the epoch).
        num_workers: loader worker processes; a rank's batches are the same for any number.
        shuffle_buffer: training windows mixed together at once (after the seeded record order).
        handler: on a damaged shard: "raise" (naming it and the sample key), "warn" (skip, count and
            warn), "skip" (skip and count), or a function of the `CorruptShardError`.
        fasta: FASTA inputs to prepare into `shards` when no complete manifest is there.
        prepare_options: further `PrepareOptions` for that (e.g. stride, tail, split, tags).
        pin_memory: pin loader memory (GPU training).
        transfer_bytes: with workers, compact batches cross to the main process in groups of about
            this many token bytes (one message per group; see `transfer`).
        transfer_timeout: seconds a loader worker waits for the main process to take a batch before
            it stops with an error.
        dp_rank: this process's data-parallel rank, for model parallelism (ranks of one tensor- or
            context-parallel group pass the same `dp_rank` and read identical batches). Default: the
            Trainer strategy's data-parallel rank (``trainer.distributed_sampler_kwargs``), else the
            global rank.
        dp_size: the data-parallel size (the number of different batch streams), given with
            `dp_rank`. Default: the Trainer strategy's, else the world size.
        epoch: "exact" (default): every training window at most once per epoch, the same number of
            batches on every rank (``n_windows // (micro x dp_size)``), fewer than one global batch
            left out; "resampled": an endless seeded stream of exact epochs cut into bionemo's
            pseudo-epoch of ``ceil(n_samples / global_batch_size)`` batches.
        storage_options: fsspec options for a remote `shards` (endpoint, credentials, ...); the
            standard AWS variables (``AWS_ENDPOINT_URL``, ...) apply without them.
        cache_dir: a local directory caching the remote record ranges read (shared safely by every
            worker and rank of a node); a range is fetched once and reused in later epochs.
        cache_limit: bytes the cache may hold (least recently used ranges are evicted); None: no limit.
        retries: attempts per remote read (refused or reset connections, timeouts, 5xx, 429) before an
            error naming the URL; waits start at `retry_backoff` s and double (jittered after a 429/503).
        retry_backoff: seconds to wait after the first failed attempt.
        max_requests: remote requests in flight per node, shared by its workers and ranks through
            `cache_dir` (per process without one); None: ``$BIONEMO_WDS_MAX_REQUESTS``, else 64.
        fold_case: give the model upper-case ids for soft-masked (lower-case) bases.
        soft_mask_weight: None (default): every base weighs 1 in ``loss_mask``; a number w in [0, 1]:
            ``loss_mask`` is w where the label is a lower-case base (Evo2 and GPN use 0.1), 1 for other
            bases, 0 for specials, tags and padding. Needs a dataset prepared with ``--case keep``.
        tag_dropout: probability of dropping a training window's control tag (for a lineage tag,
            of replacing each rank by ``None``, as Evo2's ``random_lineage_dropout``), seeded by
            (seed, epoch, window key) so a resumed epoch drops the same ones.
        cache_in_memory: splits (val, test) whose batches this rank keeps in memory after the first
            pass, so later passes read no shard bytes.
        cache_memory: where `cache_in_memory` keeps them: "plain" (ordinary memory), "pinned"
            (page-locked, for fast copies to an accelerator; needs one) or "shared" (shared memory).
        datasets: several prepared datasets to train on, mixed with exact quotas instead of `shards`:
            ``[{"path": ..., "weight": ...}, ...]`` (paths may be URLs; see `load.sources`).
        blend: an Evo2-format blend YAML (``dataset_prefix``, ``dataset_split``, ``dataset_weight``)
            naming prepared datasets, instead of `shards` or `datasets`.
        samples_per_epoch: windows in a mixed epoch (default: the sum of the datasets' train splits).
        stride: bases between the starts of the windows a sequence-layout dataset (``prepare --layout
            sequences``) is cut into at load (default: prepare's rule, 7992 at seq_length 8192; at
            most the window). A windows-layout dataset serves its own windows only.
        tail: the rule for a sequence's last bases in a sequence-layout dataset: "end" (a last window
            aligned to the sequence's end) or "drop" (default: the dataset's).
        pack: fill every sample of a sequence-layout dataset with whole short sequences and the tails
            of long ones, each its own document, so every base is read once per epoch (no `stride`).
        window_offset: "fixed" (a sequence's windows at 0, stride, 2 x stride, ...) or "random" (the
            grid shifted each epoch by an offset drawn from seed, epoch and sequence); sequence layout.
        mask_degenerate_bases: keep labels that are not A/C/G/T (either case: N, R, Y, ...) out of the
            loss (``loss_mask`` 0; -100 in ``hf`` labels), as Evo2's recipes do (default True).
        uppercase_labels: a soft-masked base's label is its upper-case id (for ``fold_case=False``).
        min_real_fraction: a sample (packed: a document) less than this fraction A/C/G/T trains
            nothing but keeps its place, so every rank keeps its batch count (0: none left out).
        batch_format: "megatron" (default: ``tokens``, ``labels`` shifted by one, ``loss_mask``,
            ``position_ids``) or "hf": ``input_ids``, ``attention_mask``, ``labels`` (not shifted; -100
            where nothing is trained), ``position_ids`` and, packed, ``cu_seq_lens_q/k`` and
            ``max_length_q/k``: what ``model(**batch)`` of a `transformers` causal LM takes.
        tokenizer: the ids samples are made of, seq_length counting its tokens: "bytes" (default: one
            byte per base), "hyenadna", "caduceus" (characters), "nt" (Nucleotide Transformer 6-mers),
            "dnabert3" .. "dnabert6" (overlapping k-mers) or a tokenizer.json path (BPE: DNABERT-2,
            GENA-LM, GROVER), run in loader workers; in Python also a tokenizer object (`load.tokenize`).
        objective: "clm" (default: next token) or "mlm": masked-LM batches, labels the original ids
            where chosen (-100 elsewhere); needs a tokenizer with a mask token (bytes has none).
        mlm_probability: the share of tokens masked-LM chooses (default 0.15).
        mlm_replace: what a chosen token becomes: "bert" (80% mask, 10% random, 10% kept) or "mask".
        mlm_span: DNABERT's span masking for overlapping k-mers (None: on for those tokenizers).
        mlm_draws: where masks are drawn, the same masks anywhere: "workers", "device" (the expansion,
            on the batch's device) or "auto" (default: the device if the Trainer's is an accelerator).
    """

    def __init__(
        self,
        shards: str | None = None,
        micro_batch_size: int = 8,
        global_batch_size: int | None = None,
        seq_length: int | None = None,
        rc_prob: float = 0.5,
        control_tags: bool = True,
        seed: int = 42,
        num_workers: int = 0,
        shuffle_buffer: int = 1000,
        handler: str | Handler = "raise",
        fasta: list[str] | None = None,
        prepare_options: dict[str, Any] | None = None,
        pin_memory: bool = False,
        transfer_bytes: int = 512 << 10,
        transfer_timeout: float = 600.0,
        dp_rank: int | None = None,
        dp_size: int | None = None,
        epoch: str = "exact",
        storage_options: dict[str, Any] | None = None,
        cache_dir: str | None = None,
        cache_limit: int | None = None,
        retries: int = 5,
        retry_backoff: float = 0.5,
        max_requests: int | None = None,
        fold_case: bool = True,
        soft_mask_weight: float | None = None,
        tag_dropout: float = 0.0,
        cache_in_memory: Sequence[str] = (),
        cache_memory: str = "plain",
        datasets: list[dict[str, Any]] | None = None,
        blend: str | None = None,
        samples_per_epoch: int | None = None,
        stride: int | None = None,
        tail: str | None = None,
        pack: bool = False,
        window_offset: str = "fixed",
        mask_degenerate_bases: bool = True,
        uppercase_labels: bool = False,
        min_real_fraction: float = 0.0,
        batch_format: str = "megatron",
        objective: str = "clm",
        mlm_probability: float = 0.15,
        mlm_replace: str = "bert",
        mlm_span: bool | None = None,
        tokenizer: Any = "bytes",
        mlm_draws: str = "auto",
    ):
        super().__init__()
        self.save_hyperparameters()
        check_options(micro_batch_size, global_batch_size, epoch, cache_limit, samples_per_epoch, datasets, blend)
        check_module_options(fasta, seq_length, datasets, blend)
        resolve_handler(handler)  # checked now, used when a dataset is opened
        self.entries = blend_entries(shards, datasets, blend)
        self.samples = SampleOptions.pick(self.hparams)
        check_cache_memory(cache_memory)
        self.cached_splits = cached_splits(cache_in_memory)
        self.opening = OpenOptions(
            seq_length, handler, storage_options, retries, retry_backoff, cache_dir, cache_limit, max_requests
        )
        self.store = self.opening.store(self.entries[0].path)  # the first dataset's
        self.root = self.store.root
        self.cutting = Cutting(
            seq_length, stride, tail, pack, window_offset, control_tags, tag_dropout, self.samples.vocab
        )
        self.micro_batch_size, self.requested_global_batch_size = micro_batch_size, global_batch_size
        self.global_batch_size = global_batch_size or micro_batch_size
        self.seq_length, self.seed, self.handler = seq_length, seed, handler
        self.num_workers, self.shuffle_buffer, self.epoch_mode = num_workers, shuffle_buffer, epoch
        self.fasta, self.prepare_options = list(fasta or []), dict(prepare_options or {})
        self.pin_memory, self.transfer_bytes, self.transfer_timeout = pin_memory, transfer_bytes, transfer_timeout
        self.cache_memory, self.samples_per_epoch = cache_memory, samples_per_epoch
        self.dp_rank, self.dp_size = dp_rank, dp_size
        self.world = World.detect(None, dp_rank, dp_size)  # checked now; detected again in setup()
        self.sources: Sources | None = None
        self.datasets: dict[Split, list[GenomicDataset]] = {}
        self.split_loaders: dict[Split, list[SplitLoaders]] = {}
        self.epochs = {split: EpochState() for split in Split}
        self.progress = TrainProgress()

    def prepare_data(self) -> None:
        """Prepare `fasta` into `shards` unless done; safe when several nodes share the filesystem."""
        if self.fasta:
            options = {"seed": self.seed, **self.prepare_options, "seq_length": self.seq_length}
            prepare_fasta(self.fasta, self.root, options, self.store.storage_options)

    # -- preparing and setup ----------------------------------------------------------------------

    def setup(self, stage: str) -> None:
        """Open the datasets once, then build the datasets of the splits `stage` reads."""
        splits = check_stage(stage)
        if self.sources is None:  # once; later stages reuse what was built so far
            self.world = World.detect(getattr(self, "trainer", None), self.dp_rank, self.dp_size)
            self.samples = self.samples.placed(getattr(self, "trainer", None))  # where masks are drawn
            opened = (self.opening, self.world.rank, self.samples.unused, self.cutting)
            self.sources = Sources(self.entries, self.samples_per_epoch, self.seed, *opened)
            self.global_batch_size = self.requested_global_batch_size or self.micro_batch_size * self.world.size
        for split in REQUIRED_SPLITS[stage]:
            lacking = self.sources.lacking(split)
            if lacking:
                raise OptionError(f"{lacking} has no {split.name} split, which stage {stage!r} needs")
        for split in splits:
            if split not in self.datasets:
                self.build(split)

    def build(self, split: Split) -> None:
        """The split's datasets (train: one over every train dataset; val/test: one per dataset that
        has the split) and their loaders."""
        assert self.sources is not None
        if split is Split.train:
            groups = [self.sources]
        else:
            groups = [self.sources.alone(source) for source in self.sources.of(split)]
        train = split is Split.train
        progress = self.progress if train else None
        batching = (self.micro_batch_size, self.world, self.samples, self.seed, self.shuffle_buffer, self.epoch_mode)
        datasets = [
            GenomicDataset.of_sources(group, split, *batching, self.requested_global_batch_size, progress)
            for group in groups
        ]
        if datasets:
            self.seq_length = datasets[0].seq_length
        self.datasets[split] = datasets
        checkpoints = (self.state_dict, self.restore_from_loader) if train else None
        passes = (self.epochs[split], self.trainer_epoch, progress, checkpoints)
        transfer = (self.num_workers, self.pin_memory, self.transfer_bytes, self.transfer_timeout)
        cache = self.cache_memory if split in self.cached_splits else None
        self.split_loaders[split] = [
            SplitLoaders(dataset, *passes, *transfer, cache, self.without_trainer) for dataset in datasets
        ]

    @property
    def manifest(self) -> Any:
        """The (first) train dataset's manifest; None before `setup`."""
        if self.sources is None:
            return None
        return self.sources.source(self.sources.entries[Split.train][0]).manifest

    @property
    def records(self) -> dict[Split, SplitRecords]:
        """Every record of each split set up so far, by its record index (a split of several
        datasets: the first dataset's; ``datasets[split][i].records`` has them all)."""
        return {
            split: split_records(datasets[0].records.parts[0]) for split, datasets in self.datasets.items() if datasets
        }

    @property
    def plans(self) -> dict[Split, RankPlan]:
        """The plan of each split's pass under way (a split of several datasets: the first's)."""
        return {split: loaders[0].plan for split, loaders in self.split_loaders.items() if loaders and loaders[0].plan}

    # -- the epoch plan ---------------------------------------------------------------------------

    def train_dataset(self) -> GenomicDataset:
        if Split.train not in self.datasets:
            raise OptionError("the train dataloader was asked for before setup() built the train dataset")
        return self.datasets[Split.train][0]

    def plan_for(self, split: Split, epoch: int, consumed: Any = None) -> RankPlan:
        """This rank's batches of `split` in `epoch` (training: from the `consumed` position)."""
        return self.datasets[split][0].plan(epoch, consumed or [])

    def epoch_length(self, split: Split, consumed: Any = None) -> int:
        """Batches of an epoch of `split` on every rank, by arithmetic (what ``len(loader)`` reports)."""
        return self.datasets[split][0].epoch_length(consumed)

    # -- loaders ----------------------------------------------------------------------------------

    def loaders(self, split: Split) -> list[Any]:
        """One loader per dataset of `split` (empty when no dataset has the split)."""
        if split not in self.split_loaders:
            if self.sources is not None and split is not Split.train and not self.sources.of(split):
                return []
            raise OptionError(
                f"the {split.name} dataloader was asked for before setup() built the {split.name} dataset"
            )
        return [loaders.loader() for loaders in self.split_loaders[split]]

    def train_dataloader(self) -> Any:
        self.train_dataset()
        return self.loaders(Split.train)[0]

    def val_dataloader(self) -> Any:
        """The val loader (several datasets: one loader each, Lightning's multiple dataloaders; no
        val split: no batches at all)."""
        return self.eval_loaders(Split.val)

    def test_dataloader(self) -> Any:
        return self.eval_loaders(Split.test)

    def predict_dataloader(self) -> Any:
        return self.test_dataloader()

    def eval_loaders(self, split: Split) -> Any:
        """`split`'s loaders: one loader alone, several as a list (Lightning's multiple dataloaders)."""
        assert self.sources is not None, "setup() first"
        loaders = self.loaders(split)
        return loaders[0] if len(loaders) == 1 else loaders

    def eval_names(self, split: Split) -> list[str]:
        """The names of `split`'s datasets, in the order of their loaders."""
        assert self.sources is not None, "setup() first"
        return self.sources.eval_names(split)

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass of every loader (outside a Trainer) epoch `epoch`; later passes count on
        from it, each pass that runs to its end moving on by one (one stopped early, such as a peek
        with ``next(iter(loader))``, is not counted: the next pass is that epoch again)."""
        if epoch < 0:
            raise OptionError(f"epoch must be non-negative, got {epoch}")
        for state in self.epochs.values():
            state.next_epoch = epoch

    def without_trainer(self) -> bool:
        """Whether no Trainer consumes the batches (the loaders then count them as they yield them)."""
        return getattr(self, "trainer", None) is None

    def trainer_epoch(self) -> int | None:
        """The trainer's current epoch (None without a trainer: passes are then counted)."""
        trainer = getattr(self, "trainer", None)
        return trainer.current_epoch if trainer is not None else None

    def model_inputs(self, compact: dict[str, Any]) -> dict[str, Any]:
        """Compact batch -> model inputs in the module's `batch_format` (for users iterating loaders)."""
        assert self.seq_length is not None, "setup() first"
        return self.samples.model_inputs(compact, self.seq_length)

    def provenance(self, batch: dict[str, Any], split: str = "train", loader: int = 0) -> list[Any]:
        """`GenomicDataset.provenance` of a `batch` of `split` (val/test: of its `loader`-th dataset)."""
        return self.datasets[as_split(split)][loader].provenance(batch)

    @property
    def quotas(self) -> np.ndarray | None:
        """Windows of each train dataset per epoch (None before the train split is set up)."""
        return self.datasets[Split.train][0].quotas if Split.train in self.datasets else None

    @property
    def source_counts(self) -> dict[int, dict[str, int]]:
        """Windows of each train dataset yielded on this rank, per epoch."""
        return self.datasets[Split.train][0].source_counts if Split.train in self.datasets else {}

    @property
    def skipped(self) -> int:
        """Damaged records or shards skipped so far under ``handler="warn"`` or ``"skip"``."""
        return self.sources.skipped() if self.sources is not None else 0

    @property
    def storage_stats(self) -> dict[str, int]:
        """Storage counters so far, over all loader workers (bytes, requests, cache, retries, skips)."""
        if self.sources is None:
            return dict.fromkeys(STORAGE_FIELDS, 0)
        return self.sources.storage_stats()

    # -- checkpoints ------------------------------------------------------------------------------

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if self.trainer is not None and self.trainer.training:
            self.progress.batches += 1  # consumed by a training step (the Trainer fetches ahead)
        return self.model_inputs(batch)

    def state_dict(self) -> dict[str, Any]:
        """Seed, epoch, the batches consumed in it (per data-parallel layout), the layout and each
        train dataset's quota and position: what a restore needs to continue the epoch exactly, with
        any number of workers or ranks."""
        if Split.train not in self.datasets:  # nothing trained yet: the position as it stands
            return self.progress.state(self.seed, self.world.size, self.micro_batch_size, None)
        return self.train_dataset().checkpoint(self.progress)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("seed", self.seed) != self.seed:
            warnings.warn(
                f"checkpoint was made with seed {state['seed']}; this data module uses {self.seed}", stacklevel=2
            )
        if self.sources is not None:
            self.sources.check_state(state)
        self.progress.restore(state)
        self.epochs[Split.train].next_epoch = int(state.get("epoch", 0))  # the next pass, without a Trainer

    def restore_from_loader(self, state: dict[str, Any]) -> None:
        """The train loader's ``load_state_dict``: Lightning restores the loader's state (this module's)
        after the module's own, so a position already waiting to be applied is not restored twice."""
        if self.progress.restored is None or self.progress.restored != position(state):
            self.load_state_dict(state)
