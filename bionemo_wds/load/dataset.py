"""`GenomicDataset`: prepared genome shards as model-ready batches, with no framework around them.

The load side in one `torch.utils.data.IterableDataset` (importing it imports no Lightning), over
one or more prepared datasets (a single dataset is a mixture of one):

    sources (`sources.Sources`: opened, checked, quotas) -> this rank's plan of the epoch
      (`plan.rank_plan`) -> this worker's share of it (`reader.PlannedBatches`) -> compact batches
      (`batch.assemble`) -> tensors -> model inputs (`batch.model_inputs`)

It owns what a checkpoint needs (the epoch, the batches consumed in it: `state_dict`), the
counters (damaged records skipped, storage traffic, windows of each dataset) and the plan's
arithmetic (`len`). `GenomicIterableDataset` is this class under its earlier name; the Lightning
data module (`lightning.datamodule.GenomicWebDataModule`) builds one per split and adds loaders,
the Trainer's rank and epoch, and checkpoint wiring.

With a plain ``DataLoader(ds, batch_size=None, num_workers=N)`` each pass deals the plan's batches
to the loader's workers round-robin, batch b to worker ``b % N``, the order a `DataLoader` takes
them in, so the batches come out in plan order, identical for any number of workers. A
`DataLoader` never tells the dataset which batches its user took, so resuming needs the count:
``ds.state_dict(batches=n)`` after `n` batches of the epoch (without workers the dataset counts
them itself), ``ds.load_state_dict(state)`` before the next pass; ``ds.set_epoch(e)`` before each
epoch's pass, as with a `DistributedSampler`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset

from bionemo_wds.errors import OptionError
from bionemo_wds.load.batch.options import SampleOptions
from bionemo_wds.load.batch.packed import PackedSchema
from bionemo_wds.load.batch.schema import BatchSchema
from bionemo_wds.load.batch.to_torch import tensors
from bionemo_wds.load.dataset_options import check_options
from bionemo_wds.load.plan import (
    EpochSpec,
    epoch_batches,
    epoch_length,
    rank_plan,
    remaining_runs,
    remaining_sequence,
)
from bionemo_wds.load.plan.mixing import mixed_sequence, stream_positions
from bionemo_wds.load.plan.progress import EpochState, TrainProgress
from bionemo_wds.load.plan.types import DEFAULT_MIX, Consumed, RankPlan
from bionemo_wds.load.provenance import Provenance, TableCache, batch_provenance
from bionemo_wds.load.reader import PlannedBatches
from bionemo_wds.load.shard_errors import Handler, resolve_handler
from bionemo_wds.load.source_counts import count_sources
from bionemo_wds.load.sources import OpenOptions, Sources, blend_entries
from bionemo_wds.load.span_reader import SpanBatches
from bionemo_wds.load.spans import Cutting, SpanSources
from bionemo_wds.load.splits import Split, as_split
from bionemo_wds.load.world import World, in_loader_worker
from bionemo_wds.storage.request_slots import RequestSlots

#: `GenomicDataset.state_dict` without ``batches=`` in a process that has not iterated the dataset.
COUNT_UNKNOWN = (
    "state_dict() without batches= records the batches this process yielded, and it has yielded none: loader "
    "workers read the dataset in their own processes, so the state says the epoch has not started and a resume "
    "would read it again. Pass batches= (the batches taken from the DataLoader this pass; 0 before the first)."
)


class GenomicDataset(IterableDataset):
    """Batches of one split of one or more prepared datasets, for a plain `DataLoader` (``batch_size=None``).

    Args:
        root: dataset root (holds manifest.json and one directory per split): a local directory or a
            URL (``s3://bucket/run1``, ``https://host/run1``, any fsspec protocol). None with
            ``datasets=`` or ``blend=``.
        split: "train", "val" or "test" (or a `Split`).
        micro_batch_size: samples per batch on each data-parallel rank.
        model_inputs: yield ``tokens``/``labels``/``loss_mask``/``position_ids`` (default); False
            yields the compact uint8 batches (`batch.schema`), which `model_inputs` expands.
        global_batch_size: samples per optimizer step over all ranks (default micro x data-parallel
            size); with ``epoch="resampled"`` it sets the pseudo-epoch of
            ``ceil(n_samples / global_batch_size)`` batches.
        seq_length: tokens per model sample (default: the dataset's): what a windows-layout dataset's
            shards were cut for; a sequence-layout one is cut to any seq_length at load.
        rc_prob: probability of reverse-complementing a training window (seeded per sample and pass).
        control_tags: put each window's control tag between BOS and SEP.
        seed: seeds the epoch plan (record order, window mixing, blend interleaving) and the draws.
        shuffle_buffer: training windows mixed together at once (after the seeded record order).
        handler: on a damaged shard: "raise" (naming it and the sample key), "warn" (skip, count and
            warn), "skip" (skip and count), or a function of the `CorruptShardError`.
        dp_rank, dp_size: this process's data-parallel place (default: torch.distributed's, else 0 of 1).
        epoch: "exact" (every training window at most once per epoch, the same number of batches on
            every rank) or "resampled" (bionemo's pseudo-epochs of an endless seeded stream).
        storage_options: fsspec options for remote datasets (endpoint, credentials, ...).
        cache_dir, cache_limit: a local cache of the remote record ranges read, and its size in bytes.
        retries, retry_backoff: attempts per remote read, and the first wait between them in seconds
            (after a throttling answer, 429 or 503 SlowDown, a jittered wait of at least twice it).
        max_requests: remote requests in flight at once, at most, shared by every loader worker and
            rank that names the same `cache_dir` (without one: per process). None:
            ``$BIONEMO_WDS_MAX_REQUESTS``, else 64.
        fold_case: give the model upper-case ids for soft-masked (lower-case) bases.
        soft_mask_weight: ``loss_mask`` weight of lower-case bases (None: every base weighs 1).
        tag_dropout: probability of dropping a training window's control tag (or each lineage rank).
        datasets: several prepared datasets mixed with exact quotas, ``[{"path": ..., "weight": ...}, ...]``.
        blend: an Evo2-format blend YAML naming prepared datasets.
        samples_per_epoch: samples of a mixed training epoch (default: every train window once).
        stride, tail: a sequence-layout dataset's windows (``prepare --layout sequences``) are cut at
            load: `seq_length` tokens every `stride` bases (default: prepare's, 7992 at 8192), the tail
            rule ``"end"`` (a last window aligned to the sequence's end) or ``"drop"`` (default: the
            dataset's). A windows-layout dataset serves its own windows only.
        pack: fill every sample with whole sequences and sequence tails, each its own document (BOS,
            tag, SEP, bases, EOS), until seq_length is full: every base once per epoch, position ids
            restarting per document, and the boundaries as ``seq_lens`` / ``cu_seqlens``
            (`batch.packed`). Sequence-layout datasets only.
        window_offset: ``"fixed"`` (windows at 0, stride, ...) or ``"random"`` (each sequence's grid
            shifted per epoch by an offset drawn from seed, epoch and sequence, within the room its tail
            leaves: a fresh cut every epoch with the same number of samples).
        mask_degenerate_bases: ``loss_mask`` 0 where the label is not A/C/G/T of either case (N, R, Y,
            ...), as Evo2's recipes train (`batch.labels`).
        uppercase_labels: a soft-masked base's label is its upper-case id (with ``fold_case=False``).
        min_real_fraction: a sample (a packed sample's document) with fewer than this fraction of
            A/C/G/T bases has no label trained; it keeps its place in the batch (0: none left out).
        batch_format: ``"megatron"`` (``tokens``, shifted ``labels``, ``loss_mask``, ``position_ids``)
            or ``"hf"``: ``input_ids``, ``attention_mask``, ``labels`` (not shifted, -100 where not
            trained), ``position_ids`` (packed: the flattened varlen keys), for ``model(**batch)`` of
            a `transformers` causal LM (`batch.hf`).
        objective: ``"clm"`` (next token) or ``"mlm"`` (masked-LM, `batch.mlm`: ``mlm_probability``,
            ``mlm_replace`` "bert" or "mask", ``mlm_span``); mlm needs a `tokenizer` with a mask token.
        tokenizer: the ids samples are made of, seq_length counting its tokens: ``"bytes"`` (default),
            ``"hyenadna"``, ``"caduceus"``, ``"nt"``, ``"dnabert3"`` .. ``"dnabert6"``, or a Hugging Face
            tokenizer (tokenizer.json path or object; BPE), run in the loader workers (`load.tokenize`).
        mlm_draws: where masks are drawn (the same masks): ``"workers"``, ``"device"`` (`model_inputs`,
            on the batch's device: `batch.mlm_device`) or ``"auto"`` (the workers; a data module asks its Trainer).
    """

    def __init__(
        self,
        root: str | None = None,
        split: str | Split = "train",
        micro_batch_size: int = 8,
        model_inputs: bool = True,
        *,
        global_batch_size: int | None = None,
        seq_length: int | None = None,
        rc_prob: float = 0.5,
        control_tags: bool = True,
        seed: int = 42,
        shuffle_buffer: int = 1000,
        handler: str | Handler = "raise",
        dp_rank: int | None = None,
        dp_size: int | None = None,
        epoch: str = "exact",
        storage_options: Mapping[str, Any] | None = None,
        cache_dir: str | None = None,
        cache_limit: int | None = None,
        retries: int = 5,
        retry_backoff: float = 0.5,
        max_requests: int | None = None,
        fold_case: bool = True,
        soft_mask_weight: float | None = None,
        tag_dropout: float = 0.0,
        datasets: Sequence[Mapping[str, Any]] | None = None,
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
        world = World.detect(None, dp_rank, dp_size)
        samples = SampleOptions.pick(locals())
        check_options(micro_batch_size, global_batch_size, epoch, cache_limit, samples_per_epoch, datasets, blend)
        resolve_handler(handler)  # checked now, used when a dataset is opened
        entries = blend_entries(None if root is None else str(root), datasets, blend)
        opening = OpenOptions(
            seq_length, handler, storage_options, retries, retry_backoff, cache_dir, cache_limit, max_requests
        )
        RequestSlots(cache_dir, max_requests)  # checked now (an OptionError naming it), used when a dataset opens
        cutting = Cutting(seq_length, stride, tail, pack, window_offset, control_tags, tag_dropout, samples.vocab)
        sources = Sources(entries, samples_per_epoch, seed, opening, world.rank, samples.unused, cutting)
        self.build(sources, as_split(split), micro_batch_size, world, samples, seed, shuffle_buffer, epoch)
        self.global_batch_size = global_batch_size or micro_batch_size * world.size
        self.emit_model_inputs = model_inputs

    @classmethod
    def of_sources(
        cls,
        sources: Sources,
        split: Split,
        micro_batch_size: int,
        world: World,
        samples: SampleOptions,
        seed: int,
        shuffle_buffer: int,
        epoch: str,
        global_batch_size: int | None = None,
        progress: TrainProgress | None = None,
    ) -> GenomicDataset:
        """A dataset over datasets opened already (a data module's splits share them, and its
        checkpoint `progress`)."""
        self = cls.__new__(cls)
        IterableDataset.__init__(self)
        self.build(sources, split, micro_batch_size, world, samples, seed, shuffle_buffer, epoch, progress)
        self.global_batch_size = global_batch_size or micro_batch_size * world.size
        self.emit_model_inputs = False
        return self

    def build(
        self,
        sources: Sources,
        split: Split,
        micro: int,
        world: World,
        samples: SampleOptions,
        seed: int,
        mix: int,
        epoch_mode: str,
        progress: TrainProgress | None = None,
    ) -> None:
        """Open the split's datasets and set up its plan and batch layout."""
        self.sources, self.split, self.world, self.samples = sources, split, world, samples
        self.micro_batch_size, self.seed, self.shuffle_buffer = micro, seed, mix
        self.epoch_mode = epoch_mode
        self.table_cache = TableCache()  # the datasets' sequence tables, read by `provenance` when first asked
        self.mode = epoch_mode if split is Split.train else "eval"
        if not sources.of(split):
            raise OptionError(f"{sources.describe()} has no {split.name} split")
        self.records = sources.records(split)
        self.params = sources.params(split)
        self.seq_length: int = self.params.seq_length
        samples.check_tags(self.params.max_tag_bytes, sources.describe())
        extra = samples.compact_fields()  # the masked-LM draws with objective="mlm"
        self.schema: BatchSchema | PackedSchema = (
            PackedSchema(micro, self.seq_length, extra=extra)
            if sources.cutting.pack
            else BatchSchema(micro, self.params.window_length, self.params.max_tag_bytes, extra)
        )
        quotas, seeds = sources.train_mix() if split is Split.train else (np.zeros(0, np.int64), [])
        self.quota_list: list[int] = [int(q) for q in quotas]
        self.progress = progress if progress is not None else TrainProgress()
        self.epoch = 0
        # batches of the current pass this process yielded; None: it has not iterated (workers may have)
        self.counted: int | None = None
        self.source_counts: dict[int, dict[str, int]] = {}  # per epoch: windows of each dataset yielded here
        self.tables = self.records.tables
        self.stream_seeds = tuple(seeds)

    # -- the plan -----------------------------------------------------------------------------------

    def spec(self) -> EpochSpec:
        """What this rank's plan depends on (`plan.EpochSpec`)."""
        train = self.split is Split.train
        quotas = tuple(self.quota_list) if train else tuple(t.n_windows for t in self.tables)
        seeds = self.stream_seeds if train else (self.seed,) * len(self.tables)
        pseudo = epoch_batches(sum(quotas), self.global_batch_size) if self.mode == "resampled" else None
        world, micro = self.world, self.micro_batch_size
        whole = self.sources.cutting.pack  # packed: every base once per epoch, the last batch completed
        return EpochSpec(self.tables, quotas, seeds, self.seed, world.rank, world.size, micro, self.mix, pseudo, whole)

    @property
    def mix(self) -> int:
        return self.shuffle_buffer if self.shuffle_buffer is not None else DEFAULT_MIX

    def set_epoch(self, epoch: int) -> None:
        """The epoch of the next pass (seeds its order, reverse complement and tag dropout)."""
        if epoch < 0:
            raise OptionError(f"epoch must be non-negative, got {epoch}")
        self.epoch = epoch

    def consumed(self) -> list[Consumed]:
        """Batches of this epoch consumed before a restore (none without one)."""
        return self.progress.restored_for(self.epoch)

    def plan(self, epoch: int | None = None, consumed: Sequence[Consumed] | None = None) -> RankPlan:
        """This rank's batches of `epoch` (default: the current one) from the `consumed` position
        (default: the restored one; evaluation splits are read whole)."""
        epoch = self.epoch if epoch is None else epoch
        if consumed is None:
            consumed = self.consumed() if epoch == self.epoch else []
        return rank_plan(self.mode, self.spec(), epoch, consumed if self.split is Split.train else ())

    def epoch_length(self, consumed: Sequence[Consumed] | None = None) -> int:
        """Batches of an epoch on every rank, by arithmetic (consumed batches included)."""
        return epoch_length(self.mode, self.spec(), consumed or ())

    def __len__(self) -> int:
        """Batches of the pass (after a restore: the rest of the epoch)."""
        return len(self.plan())

    @property
    def quotas(self) -> np.ndarray:
        """Windows of each train dataset per epoch."""
        return np.asarray(self.sources.train_mix()[0])

    # -- batches ------------------------------------------------------------------------------------

    def batch_stages(self, current: Callable[[], RankPlan], epoch: EpochState, unit: int | None = None) -> list[Any]:
        """The two stages that make this worker's compact batches: `PlannedBatches` (its batches of
        the plan `current()` gives, dealt in units of `unit` batches) and the batch builder (reverse
        complement and tag dropout when training, drawn by `epoch`'s pass). Every loader runs these."""
        reader: Any = SpanBatches if isinstance(self.records, SpanSources) else PlannedBatches
        planned = reader(self.records, self.sources.policy, current, self.mix, self.micro_batch_size, unit)
        train = self.split is Split.train
        return [planned, self.samples.assemble_stage(self.schema, self.seed, epoch, train, self.seq_length)]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        plan = self.plan()
        # unit=1: batch b to worker b % workers, the order a DataLoader takes them in
        planned, build = self.batch_stages(lambda: plan, EpochState(self.epoch), unit=1)
        counting = not in_loader_worker()
        batches = build(iter(planned))
        if counting and self.split is Split.train:
            batches = self.count_sources(batches, lambda: self.epoch, lambda: len(plan))
        if counting:
            self.counted = 0
        for count, batch in enumerate(batches, 1):
            out = self.output(batch)
            if counting:
                self.counted = count
            yield out

    def output(self, batch: dict[str, Any]) -> dict[str, Any]:
        """A built batch as this dataset yields it: the builder's bookkeeping (plan index, filler flags)
        dropped, tensors, and model inputs unless ``model_inputs=False``."""
        del batch["index"], batch["filler"]
        out = tensors(batch)
        return self.model_inputs(out) if self.emit_model_inputs else out

    def model_inputs(self, compact: dict[str, Any]) -> dict[str, Any]:
        """Compact batch -> model inputs in the dataset's `batch_format` (for ``model_inputs=False``)."""
        return self.samples.model_inputs(compact, self.seq_length)

    def provenance(self, batch: dict[str, Any]) -> list[Provenance]:
        """Where each sample of a `batch` this dataset yielded (compact or model inputs) comes from: a
        `provenance.Provenance` per sample, per document of a packed one; filler rows have none."""
        datasets = [(source.store, source.manifest) for source in self.sources.of(self.split)]
        return batch_provenance(batch, datasets, self.table_cache)

    def count_sources(
        self, src: Iterable[dict[str, Any]], epoch: Callable[[], int], batches: Callable[[], int]
    ) -> Iterator[dict[str, Any]]:
        """(main side) `source_counts.count_sources` into this dataset's ``source_counts``."""
        return count_sources(src, self.sources.names, self.source_counts, epoch, batches, self.world.rank)

    # -- counters ----------------------------------------------------------------------------------------

    @property
    def skipped(self) -> int:
        """Damaged records or shards skipped so far (``handler="warn"`` or ``"skip"``), every dataset's."""
        return self.sources.skipped()

    @property
    def storage_stats(self) -> dict[str, int]:
        """What the storage layer did so far, over all loader workers: bytes fetched, requests, cache
        hits and misses, retries, shards skipped (all zero for local datasets)."""
        return self.sources.storage_stats()

    # -- checkpoints ----------------------------------------------------------------------------------

    def state_dict(self, batches: int | None = None) -> dict[str, Any]:
        """The checkpoint state after `batches` batches of this epoch's pass (default: the batches this
        process yielded, right without loader workers). Loads into a `GenomicDataset` or a data module."""
        if batches is None and self.counted is None:
            warnings.warn(COUNT_UNKNOWN, stacklevel=2)
        before = self.consumed()
        progress = TrainProgress()
        progress.epoch, progress.before = self.epoch, before
        progress.batches = sum(seg.batches for seg in before) + ((self.counted or 0) if batches is None else batches)
        return self.checkpoint(progress)

    def checkpoint(self, progress: TrainProgress) -> dict[str, Any]:
        """The checkpoint state of `progress` (the epoch and the batches consumed in it, per
        data-parallel layout), with each train dataset's quota and stream position."""
        total = self.epoch_length(progress.before)
        state = progress.state(self.seed, self.world.size, self.micro_batch_size, total)
        consumed = [Consumed(d, m, b) for d, m, b in state["consumed"]]
        state["blend"] = self.positions(int(state["epoch"]), consumed)
        return state

    def positions(self, epoch: int, consumed: Sequence[Consumed]) -> list[dict[str, Any]]:
        """Each train dataset's quota and stream position (``epoch x quota + windows consumed``)
        after `consumed` of `epoch`, so a restore can check it continues the same blend."""
        quotas, whole = self.quotas, self.sources.cutting.pack
        if len(quotas) == 1:  # one dataset: every sample consumed is its own
            taken = [int(quotas[0]) - int(remaining_runs(int(quotas[0]), consumed, whole)[1].sum())]
        elif consumed:
            spec = self.spec()
            sequence = mixed_sequence(spec.tables, spec.quotas, self.seed, epoch, spec.mix, spec.seeds)
            left = self.records.resolve(remaining_sequence(sequence, consumed, whole))[1]
            taken = (quotas - np.bincount(np.asarray(left, dtype=np.int64), minlength=len(quotas))).tolist()
        else:
            taken = [0] * len(quotas)
        sizes = [table.n_windows for table in self.tables]
        positions = stream_positions(sizes, quotas, epoch, taken)
        entries = self.sources.entries[Split.train]
        return [
            {"name": n, "path": e.path, "quota": int(q), "position": int(p)}
            for n, e, q, p in zip(self.sources.names, entries, quotas.tolist(), positions)
        ]

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from a checkpoint state (this dataset's or a data module's): the next pass is its
        epoch, from the batch after the last one consumed."""
        if state.get("seed", self.seed) != self.seed:
            warnings.warn(f"checkpoint was made with seed {state['seed']}; this dataset uses {self.seed}", stacklevel=2)
        self.sources.check_state(state)
        self.progress.restore(dict(state))
        self.epoch = int(state.get("epoch", 0))
