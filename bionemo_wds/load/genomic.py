"""`GenomicWebDataModule`: prepared genome shards (or FASTA) to model-ready batches in Lightning.

A `LightningDataModule` composed from the public building blocks in `loaders`, `plan`, `planned`,
`samples`, `transfer` and `memory_cache`; `passes.PassLoaders` runs its loaders, and several
datasets mixed by weight are a `mixed.Mixture` it delegates to. Per split it builds one dataset:

    manifest's record index -> SplitRecords -> PlannedBatches (this rank's and worker's batches of
      the epoch plan) -> assemble (reverse complement and tag dropout when training) -> compact batch
      [-> transfer.to_main: with loader workers, batches cross in shared memory]

and loaders yield compact uint8 batches; `on_after_batch_transfer` expands them with
`to_model_inputs` on the device. Users who iterate a loader themselves call `model_inputs(batch)`.
Given ``fasta=[...]``, `prepare_data` runs the preparer once (under the output's file lock, which
`prepare` takes, so nodes sharing a filesystem do not race) and reuses a complete output.
"""

from __future__ import annotations

import multiprocessing as mp
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import lightning as L
import numpy as np
import webdataset as wds

from bionemo_wds.format import Manifest
from bionemo_wds.load.checked import open_dataset
from bionemo_wds.load.epochs import EpochState
from bionemo_wds.load.loaders import Split, as_split, check_arguments, check_stage, epoch_batches
from bionemo_wds.load.memory_cache import MemoryCachedLoader, check_cache_memory
from bionemo_wds.load.mixed import Mixture
from bionemo_wds.load.model_inputs import keep_numpy
from bionemo_wds.load.passes import PassLoaders
from bionemo_wds.load.plan import Consumed, RankPlan, split_batches, split_plan
from bionemo_wds.load.planned import PlannedBatches
from bionemo_wds.load.resume import TrainProgress, position
from bionemo_wds.load.samples import SampleOptions
from bionemo_wds.load.shard_errors import ShardErrorPolicy
from bionemo_wds.load.split_records import SplitRecords
from bionemo_wds.load.transfer import BatchTransfer
from bionemo_wds.load.world import World
from bionemo_wds.storage.cache import RangeCache
from bionemo_wds.storage.retry import RetryPolicy
from bionemo_wds.storage.stats import StorageStats
from bionemo_wds.storage.store import Store

#: Batch messages each loader worker may have in flight; its transfer ring has 2 more slots.
PREFETCH = 2
#: The splits a stage needs to exist (fit trains without val: a dataset prepared with --split 1,0,0).
REQUIRED_SPLITS = {"fit": ("train",), "validate": ("val",), "test": ("test",), "predict": ("test",)}


class GenomicWebDataModule(PassLoaders, L.LightningDataModule):
    """Lightning data module over `bionemo-wds prepare` output.

    Args:
        shards: dataset root (holds manifest.json and one directory per split): a local directory or
            a URL (``s3://bucket/run1``, ``https://host/run1``, any fsspec protocol).
        micro_batch_size: samples per batch on each rank.
        global_batch_size: samples per optimizer step over all ranks (default micro x data-parallel
            size); with ``epoch="resampled"`` it sets the pseudo-epoch of
            ``ceil(n_samples / global_batch_size)`` batches.
        seq_length: tokens per model sample; must be what the shards were cut for (default: theirs).
        rc_prob: probability of reverse-complementing a training window (seeded per sample and epoch).
        control_tags: put each window's control tag between BOS and SEP.
        seed: seeds the epoch plan (record order, window mixing) and RC flips (with the epoch).
        num_workers: loader worker processes; a rank's batches are the same for any number.
        shuffle_buffer: training windows mixed together at once (after the seeded record order).
        handler: "raise" on a damaged shard (naming it and the sample key) or "warn" to skip and count.
        fasta: FASTA inputs to prepare into `shards` when no complete manifest is there.
        prepare_options: further `PrepareOptions` for that (e.g. stride, tail, split, tags).
        pin_memory: pin loader memory (GPU training).
        transfer_bytes: with workers, compact batches cross to the main process in groups of about
            this many token bytes (one message per group; see `transfer`).
        transfer_timeout: seconds a loader worker waits for the main process to take a batch before
            it stops with an error.
        dp_rank, dp_size: this process's data-parallel rank and the data-parallel size, for model
            parallelism (ranks of one tensor- or context-parallel group pass the same `dp_rank` and
            read identical batches). Default: the Trainer strategy's data-parallel rank and size
            (``trainer.distributed_sampler_kwargs``), else global rank and world size.
        epoch: "exact" (default): every training window at most once per epoch, the same number of
            batches on every rank (``n_windows // (micro x dp_size)``), fewer than one global batch
            left out; "resampled": an endless seeded stream of exact epochs cut into bionemo's
            pseudo-epoch of ``ceil(n_samples / global_batch_size)`` batches.
        storage_options: fsspec options for a remote `shards` (endpoint, credentials, ...); the
            standard AWS variables (``AWS_ENDPOINT_URL``, ...) apply without them.
        cache_dir: a local directory caching the remote record ranges read (shared safely by every
            worker and rank of a node); a range is fetched once and reused in later epochs.
        cache_limit: bytes the cache may hold (least recently used ranges are evicted); None: no limit.
        retries: attempts per remote read (connection refused or reset, timeouts, 5xx) before an
            error naming the URL; waits start at `retry_backoff` seconds and double.
        retry_backoff: seconds to wait after the first failed attempt.
        fold_case: give the model upper-case ids for soft-masked (lower-case) bases.
        soft_mask_weight: None (default): every base weighs 1 in ``loss_mask``; a number w in [0, 1]:
            ``loss_mask`` is w where the label is a lower-case base (Evo2 and GPN use 0.1), 1 for other
            bases, 0 for specials, tags and padding. Needs a dataset prepared with ``--case keep``.
        tag_dropout: probability of dropping a training window's control tag (for a lineage tag,
            of replacing each rank by ``None``, as Evo2's ``random_lineage_dropout``), seeded by
            (seed, epoch, window key) so a resumed epoch drops the same ones.
        cache_in_memory: splits (val, test) whose batches this rank keeps in memory after the first
            pass, so later passes read no shard bytes; `cache_memory`: "plain", "pinned" or "shared".
        datasets: several prepared datasets to train on, mixed with exact quotas instead of `shards`:
            ``[{"path": ..., "weight": ...}, ...]`` (paths may be URLs; see `load.mixed`).
        blend: an Evo2-format blend YAML (``dataset_prefix``, ``dataset_split``, ``dataset_weight``)
            naming prepared datasets, instead of `shards` or `datasets`.
        samples_per_epoch: windows in a mixed epoch (default: the sum of the datasets' train splits).
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
        handler: str = "raise",
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
        fold_case: bool = True,
        soft_mask_weight: float | None = None,
        tag_dropout: float = 0.0,
        cache_in_memory: Sequence[str] = (),
        cache_memory: str = "plain",
        datasets: list[dict[str, Any]] | None = None,
        blend: str | None = None,
        samples_per_epoch: int | None = None,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.mixture: Mixture | None = None
        if datasets is not None or blend is not None:
            if shards is not None:
                raise ValueError("give one dataset (shards) or several (datasets= or blend=), not both")
            self.mixture = Mixture.from_arguments(self, datasets, blend, samples_per_epoch, dict(self.hparams))
            shards = self.mixture.first_path
        elif shards is None or samples_per_epoch is not None:
            raise ValueError("give one dataset (shards) or several (datasets= or blend=, with samples_per_epoch)")
        self.samples = SampleOptions(rc_prob, control_tags, tag_dropout, fold_case, soft_mask_weight)
        check_cache_memory(cache_memory)
        self.cached_splits = {as_split(name, "cache_in_memory") for name in cache_in_memory}
        if Split.train in self.cached_splits:
            raise ValueError("cache_in_memory is for val and test: the train order changes every epoch")
        check_arguments(micro_batch_size, global_batch_size, epoch, fasta, seq_length, cache_limit)
        self.store = Store(shards, storage_options, RetryPolicy(retries, retry_backoff), what="shards")
        self.root = self.store.root
        self.cache_dir, self.cache_limit = cache_dir, cache_limit
        self.stats: StorageStats | None = None  # made in setup, from the loader workers' context
        self.cache: RangeCache | None = None
        self.shard_sizes: dict[str, int | None] = {}
        self.pass_start: dict[Split, dict[str, int]] = {}
        self.micro_batch_size = micro_batch_size
        self.requested_global_batch_size = global_batch_size
        self.seq_length, self.seed, self.handler = seq_length, seed, handler
        self.num_workers, self.shuffle_buffer = num_workers, shuffle_buffer
        self.fasta, self.prepare_options = list(fasta or []), dict(prepare_options or {})
        self.pin_memory = pin_memory
        self.transfer_bytes, self.transfer_timeout = transfer_bytes, transfer_timeout
        self.manifest: Manifest | None = None
        self.dp_rank, self.dp_size, self.epoch_mode = dp_rank, dp_size, epoch
        self.world = World.detect(None, dp_rank, dp_size)  # checked now; detected again in setup()
        self.global_batch_size = global_batch_size or micro_batch_size
        self.policy = ShardErrorPolicy(handler)  # validated now; rebuilt with the manifest in setup
        self.epochs = {split: EpochState() for split in Split}
        self.datasets: dict[Split, Any] = {}
        self.transfers: dict[Split, BatchTransfer] = {}
        self.loader_kwargs: dict[Split, dict[str, Any]] = {}
        self.records: dict[Split, SplitRecords] = {}
        self.plans: dict[Split, RankPlan] = {}
        self.progress = TrainProgress()
        self.cache_memory = cache_memory
        self.memory_cached: dict[Split, MemoryCachedLoader] = {}
        self.eval_start: dict[Split, int] = {}  # a cached split's next pass starts here (batches before are held)

    # -- preparing --------------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Prepare `fasta` into `shards` unless done; safe when several nodes share the filesystem."""
        if not self.fasta:
            return
        from bionemo_wds.prepare import PrepareOptions, prepare

        opts = PrepareOptions(**{"seed": self.seed, **self.prepare_options, "seq_length": self.seq_length})
        # prepare holds the output's lock (`prepare.run.lock_path`, a filelock): a second process or
        # node waits, then finds the run finished, as does a `bionemo-wds prepare` into the same place
        result = prepare(self.fasta, self.root, opts, self.store.storage_options)
        if result.status != "unchanged":
            print(f"prepared {self.root}: {result.shards_written} shard(s) in {result.seconds:.1f} s")

    # -- setup ------------------------------------------------------------------------------------

    def setup(self, stage: str) -> None:
        """Read the manifest once, then build the datasets of the splits `stage` reads."""
        splits = check_stage(stage)
        if self.manifest is None:  # once; later stages reuse the datasets built so far
            self.world = World.detect(getattr(self, "trainer", None), self.dp_rank, self.dp_size)
            self.manifest = self.open_data(stage)
            self.seq_length = self.manifest.params.seq_length
            self.global_batch_size = self.requested_global_batch_size or self.micro_batch_size * self.world.size
        missing = [name for name in REQUIRED_SPLITS[stage] if name not in self.manifest.splits]
        if missing and self.mixture is None:  # a mixture's val and test are its datasets' own
            raise ValueError(f"{self.root} has no {', '.join(missing)} split, which stage {stage!r} needs")
        for split in splits:
            if split.name in self.manifest.splits and split not in self.datasets:
                self.datasets[split] = self.build_dataset(split)
        if self.mixture is not None:
            self.mixture.setup_eval(splits, stage)

    def open_data(self, stage: str) -> Manifest:
        """Read and check the dataset (once): its manifest, with the policy, counters and cache set
        (a mixture's: its datasets', and a manifest of the mix)."""
        if self.mixture is not None:
            manifest = self.mixture.open()
            self.policy = self.mixture.policy()
            return manifest
        # under handler="warn" a shard of the wrong size is reported when its split is read
        opened = open_dataset(
            self.store, self.seq_length, self.handler, self.world.rank == 0, self.cache_dir, self.cache_limit
        )
        self.shard_sizes, self.policy, self.stats, self.cache = (
            opened.shard_sizes,
            opened.policy,
            opened.stats,
            opened.cache,
        )
        for problem in self.samples.unused(opened.manifest):
            warnings.warn(f"{problem} ({self.root})", stacklevel=3)
        return opened.manifest

    def split_records(self, split: Split) -> SplitRecords:
        """Every record of `split`, from the manifest's record index (a mixture: every train dataset's)."""
        assert self.manifest is not None
        if self.mixture is not None:
            return self.mixture.train_records()  # type: ignore[return-value]
        return SplitRecords.from_manifest(
            self.store, self.manifest, split.name, self.policy, self.shard_sizes, self.cache
        )

    def build_dataset(self, split: Split) -> wds.DataPipeline:
        """The split's dataset: the batches the epoch plan deals this rank's loader workers, assembled
        from records read by their index (`planned`), reverse-complemented when training."""
        assert self.manifest is not None
        params = self.manifest.params
        self.records[split] = self.split_records(split)
        workers = self.num_workers
        window, max_tag = params.window_length, params.max_tag_bytes
        stages: list[Any] = self.batch_stages(split, partial(self.current_plan, split), self.epochs[split])
        kwargs: dict[str, Any] = {"batch_size": None, "num_workers": workers, "collate_fn": keep_numpy}
        if workers:
            per_message = max(1, self.transfer_bytes // max(1, self.micro_batch_size * window))
            per_batch = self.micro_batch_size * (window + max_tag + 4 + 4 + 1 + 8 + 1) + 7 * 8
            context = mp.get_context()
            transfer = BatchTransfer(workers, PREFETCH + 2, per_message * per_batch, context, self.transfer_timeout)
            self.transfers[split] = transfer
            stages.append(transfer.to_main(per_message))
            kwargs.update(prefetch_factor=PREFETCH, multiprocessing_context=context)
        self.loader_kwargs[split] = kwargs
        return wds.DataPipeline(*stages)

    def batch_stages(
        self, split: Split, current: Callable[[], RankPlan], epoch: EpochState, unit: int | None = None
    ) -> list[Any]:
        """The two stages that make the split's compact batches: `PlannedBatches` (this worker's
        batches of the plan `current()` gives, dealt in units of `unit` batches) and the assembly
        (reverse complement and tag dropout when training, of `epoch`). Every loader runs these."""
        assert self.manifest is not None
        records, micro, mix = self.records[split], self.micro_batch_size, self.shuffle_buffer
        planned = PlannedBatches(records, self.policy, current, mix, micro, unit)
        return [planned, self.samples.assemble_stage(self.manifest.params, self.seed, epoch, split is Split.train)]

    # -- the epoch plan -------------------------------------------------------------------------------

    def plan_for(self, split: Split, epoch: int, consumed: list[Consumed] | None = None) -> RankPlan:
        """This rank's batches of `split` in `epoch` (training: from the `consumed` position)."""
        if self.mixture is not None and split is Split.train:
            return self.mixture.plan(epoch, consumed)
        world, table = self.world, self.records[split].table
        train, pseudo = split is Split.train, self.pseudo_epoch_batches()
        micro, mix = self.micro_batch_size, self.shuffle_buffer
        return split_plan(table, train, pseudo, self.seed, epoch, world.rank, world.size, micro, consumed or [], mix)

    def epoch_length(self, split: Split, consumed: list[Consumed] | None = None) -> int:
        """Batches of an epoch of `split` on every rank, by arithmetic (what ``len(loader)`` reports)."""
        if self.mixture is not None and split is Split.train:
            return self.mixture.epoch_length(consumed)
        world, n_windows = self.world, self.records[split].table.n_windows
        train, pseudo = split is Split.train, self.pseudo_epoch_batches()
        return split_batches(n_windows, train, pseudo, world.rank, world.size, self.micro_batch_size, consumed or [])

    def pseudo_epoch_batches(self) -> int | None:
        """Batches of bionemo's pseudo-epoch with ``epoch="resampled"``, else None."""
        assert self.manifest is not None
        if self.epoch_mode != "resampled":
            return None
        return epoch_batches(self.manifest.splits["train"].n_samples, self.global_batch_size)

    def train_dataloader(self) -> wds.WebLoader:
        return self.loader(Split.train)

    def val_dataloader(self) -> Any:
        """The val loader, or no batches at all when the dataset has no val split (a mixture: one
        loader per dataset, Lightning's multiple dataloaders)."""
        assert self.manifest is not None, "setup() first"
        if self.mixture is not None:
            return self.mixture.eval_loaders(Split.val)
        return self.loader(Split.val) if "val" in self.manifest.splits else []

    def test_dataloader(self) -> Any:
        return self.mixture.eval_loaders(Split.test) if self.mixture is not None else self.loader(Split.test)

    def predict_dataloader(self) -> Any:
        return self.test_dataloader()

    def set_epoch(self, epoch: int) -> None:
        """Make the next pass of every loader (outside a Trainer) epoch `epoch`; later passes count on
        from it, each pass that runs to its end moving on by one (one stopped early, such as a peek
        with ``next(iter(loader))``, is not counted: the next pass is that epoch again)."""
        if epoch < 0:
            raise ValueError(f"epoch must be non-negative, got {epoch}")
        for state in self.epochs.values():
            state.next_epoch = epoch

    def trainer_epoch(self) -> int | None:
        """The trainer's current epoch (None without a trainer: passes are then counted)."""
        trainer = getattr(self, "trainer", None)
        return trainer.current_epoch if trainer is not None else None

    def model_inputs(self, compact: dict[str, Any]) -> dict[str, Any]:
        """Compact batch -> tokens, labels, loss_mask, position_ids (for users iterating loaders)."""
        assert self.seq_length is not None, "setup() first"
        return self.samples.model_inputs(compact, self.seq_length)

    @property
    def quotas(self) -> np.ndarray | None:
        """A mixture's windows of each train dataset per epoch (None for one dataset)."""
        return self.mixture.quotas if self.mixture is not None else None

    @property
    def source_counts(self) -> dict[int, dict[str, int]]:
        """A mixture's windows of each train dataset yielded on this rank, per epoch (empty for one dataset)."""
        return self.mixture.source_counts if self.mixture is not None else {}

    @property
    def skipped(self) -> int:
        """Damaged records or shards skipped so far under ``handler="warn"``."""
        return self.mixture.skipped() if self.mixture is not None else self.policy.skipped

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        if self.trainer is not None and self.trainer.training:
            self.progress.batches += 1  # consumed by a training step (the Trainer fetches ahead)
        return self.model_inputs(batch)

    def state_dict(self) -> dict[str, Any]:
        """Seed, epoch, the batches consumed in it (per data-parallel layout) and the layout: what a
        restore needs to continue the epoch exactly, with any number of workers or ranks."""
        epoch_total = self.epoch_length(Split.train, self.progress.before) if Split.train in self.records else None
        state = self.progress.state(self.seed, self.world.size, self.micro_batch_size, epoch_total)
        return self.mixture.add_state(state) if self.mixture is not None else state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("seed", self.seed) != self.seed:
            warnings.warn(
                f"checkpoint was made with seed {state['seed']}; this data module uses {self.seed}", stacklevel=2
            )
        if self.mixture is not None:
            self.mixture.check_state(state)
        self.progress.restore(state)
        self.epochs[Split.train].next_epoch = int(state.get("epoch", 0))  # the next pass, without a Trainer

    def restore_from_loader(self, state: dict[str, Any]) -> None:
        """The train loader's ``load_state_dict``: Lightning restores the loader's state (this module's)
        after the module's own, so a position already waiting to be applied is not restored twice."""
        if self.progress.restored is None or self.progress.restored != position(state):
            self.load_state_dict(state)
