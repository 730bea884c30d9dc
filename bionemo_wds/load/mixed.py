"""Several prepared datasets mixed by weight with exact, resumable quotas (Evo2's blended training).

`GenomicWebDataModule(datasets=[{"path": ..., "weight": ...}, ...])` or ``blend="blend.yaml"``
(Evo2's format, `load.blend`) gives the data module a `Mixture`. Each dataset is opened by a data
module of its own (its store, manifest, damaged-shard policy, storage counters and cache); training
reads their train splits as one table (`MixedRecords`) in the mixed epoch plan of `load.mixing`:
exact quotas per epoch, spread evenly, every rank the same number of batches, resumable (also on
another data-parallel size) since the plan is one window sequence like any training epoch's.
Validation and test run one loader per dataset (Lightning's multiple dataloaders), so each
source's loss is visible; batches carry ``dataset``, the index of each window's source.
"""

from __future__ import annotations

import dataclasses
import logging
import warnings
from types import SimpleNamespace
from typing import Any

import numpy as np

from bionemo_wds.format import Manifest, Params, SplitInfo
from bionemo_wds.load.blend import BlendEntry, entries_for, parse_datasets, read_blend
from bionemo_wds.load.loaders import Split
from bionemo_wds.load.mixing import (
    describe_shares,
    mixed_plan,
    mixed_sequence,
    quotas,
    repeat_warnings,
    source_seed,
    split_virtual,
    stream_positions,
)
from bionemo_wds.load.plan import Consumed, RankPlan, RecordTable, remaining_sequence, train_batches
from bionemo_wds.load.shard_errors import ShardErrorPolicy
from bionemo_wds.load.split_records import SplitRecords
from bionemo_wds.storage.stats import FIELDS as STORAGE_FIELDS

log = logging.getLogger(__name__)

#: The data module arguments that make a blend (every other one goes to each dataset's own module).
MIXING_ARGUMENTS = ("shards", "micro_batch_size", "datasets", "blend", "samples_per_epoch")
#: What every dataset of a blend must agree on (the tokenizer's stored case may differ: the loader folds it).
AGREE_PARAMS = ("seq_length",)


class MixedRecords:
    """The train records of several datasets as one table: dataset d's window w is window
    ``offset_d + w`` of the mix, and a record is read by its own dataset's records and policy."""

    def __init__(self, parts: list[SplitRecords], policies: list[ShardErrorPolicy], seeds: list[int]):
        self.parts, self.policies, self.seeds = parts, policies, seeds
        tables = [p.table for p in parts]
        shard_offsets = np.cumsum([0] + [len(p.paths) for p in parts])[:-1]
        self.table = RecordTable(
            np.concatenate([t.shard + off for t, off in zip(tables, shard_offsets)] or [np.empty(0, np.int64)]),
            np.concatenate([t.windows for t in tables] or [np.empty(0, np.int64)]),
        )
        self.record_offsets = np.cumsum([0] + [len(t) for t in tables]).astype(np.int64)
        self.window_offsets = np.cumsum([0] + [t.n_windows for t in tables]).astype(np.int64)
        self.total = int(self.window_offsets[-1])
        # what the planned reader asks of the shards: whether to work out and prefetch what comes next
        self.shards = SimpleNamespace(reads_ahead=any(p.shards.reads_ahead for p in parts))

    def part(self, record: int) -> tuple[int, int]:
        """(dataset, record within it) of a record of the mix."""
        d = int(np.searchsorted(self.record_offsets, record, side="right")) - 1
        return d, record - int(self.record_offsets[d])

    def resolve(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
        """Virtual plan ids -> (window ids of the mix, dataset of each, (seed, pass) of each window's draws)."""
        windows, passes = split_virtual(ids, self.total)
        sources = np.searchsorted(self.window_offsets, windows, side="right") - 1
        draws = [(self.seeds[d], p) for d, p in zip(sources.tolist(), passes.tolist())]
        return windows, sources, draws

    def read(self, record: int, policy: ShardErrorPolicy, report: bool = True) -> Any:
        """The record, read and checked by its dataset (whose policy reports damage)."""
        d, local = self.part(record)
        return self.parts[d].read(local, self.policies[d], report)

    def prefetch(self, records: list[int]) -> None:
        by_part: dict[int, list[int]] = {}
        for record in records:
            d, local = self.part(record)
            by_part.setdefault(d, []).append(local)
        for d, wanted in by_part.items():
            self.parts[d].prefetch(wanted)

    def close(self) -> None:
        for part in self.parts:
            part.close()


class Mixture:
    """The several datasets of one `GenomicWebDataModule` (made by its ``datasets=`` or ``blend=``):
    each opened by a data module of its own, their train splits read as one mixed epoch plan.

    Args:
        module: the data module mixing them (its seed, world, micro batch, mix block and options).
        entries: the blend (`blend.parse_datasets` / `blend.read_blend`).
        samples_per_epoch: windows in a mixed epoch (None: the sum of the train datasets' windows).
        options: the data module arguments every dataset's own module gets.
    """

    def __init__(self, module: Any, entries: list[BlendEntry], samples_per_epoch: int | None, options: dict[str, Any]):
        self.module, self.options = module, options
        self.entries = {split: entries_for(entries, split) for split in ("train", "val", "test")}
        if not self.entries["train"]:
            raise ValueError("a blend needs at least one train dataset")
        if samples_per_epoch is not None and samples_per_epoch < 1:
            raise ValueError(f"samples_per_epoch must be at least 1, got {samples_per_epoch}")
        # without val/test entries, each train dataset's own val/test split (where it has one) is read
        self.implicit = {split: not self.entries[split] for split in ("val", "test")}
        for split in ("val", "test"):
            self.entries[split] = self.entries[split] or self.entries["train"]
        self.samples_per_epoch = samples_per_epoch
        self.names = unique_names([e.name for e in self.entries["train"]])
        self.sources: dict[str, Any] = {}  # one data module per dataset path
        self.quotas = np.zeros(0, dtype=np.int64)
        self.seeds: list[int] = []
        self.records: MixedRecords | None = None
        self.source_counts: dict[int, dict[str, int]] = {}  # per epoch: windows of each dataset this rank yielded

    @classmethod
    def from_arguments(
        cls, module: Any, datasets: list[dict[str, Any]] | None, blend: str | None, samples: int | None, options: Any
    ) -> Mixture:
        """From the data module's ``datasets=`` or ``blend=`` (one of them) and its other arguments."""
        if datasets is not None and blend is not None:
            raise ValueError("give datasets=[{'path': ..., 'weight': ...}, ...] or blend='blend.yaml', not both")
        if options.get("fasta"):
            raise ValueError("fasta= prepares one dataset; prepare each dataset of a blend first")
        if options.get("epoch", "exact") != "exact":
            raise ValueError('a mixed epoch has exact quotas: use epoch="exact" with samples_per_epoch')
        entries = parse_datasets(datasets) if datasets is not None else read_blend(str(blend))
        # the rest go to every dataset's own module (not LightningCLI's "_instantiator" and such)
        own = {k: v for k, v in options.items() if k not in MIXING_ARGUMENTS and not k.startswith("_")}
        return cls(module, entries, samples, own)

    @property
    def first_path(self) -> str:
        return self.entries["train"][0].path

    # -- opening every dataset ------------------------------------------------------------------------

    def source(self, path: str) -> Any:
        """The data module of one dataset of the blend (made once, on this rank's data-parallel place)."""
        if path not in self.sources:
            module, world = self.module, self.module.world
            options = {**self.options, "dp_rank": world.rank, "dp_size": world.size}
            self.sources[path] = type(module)(path, module.micro_batch_size, **options)
        return self.sources[path]

    def open(self) -> Manifest:
        """Open the train datasets (and check they agree), set the quotas, log the shares; the
        manifest returned describes the mix (its seq_length, widest window and tag room)."""
        train, manifests = self.entries["train"], []
        for entry in train:
            source = self.source(entry.path)
            source.setup("fit")
            manifests.append(source.manifest)
        self.check_agreement(train, manifests)
        window_length = max(m.params.window_length for m in manifests)
        params = dataclasses.replace(
            manifests[0].params,
            window_length=window_length,
            max_tag_bytes=max(m.params.max_tag_bytes for m in manifests),
        )
        sizes = [table.n_windows for table in self.tables()]
        length = self.samples_per_epoch or sum(sizes)
        self.quotas = quotas([e.weight for e in train], length)
        self.seeds = [source_seed(self.module.seed, d) for d in range(len(train))]
        if self.module.world.rank == 0:  # once per data module (setup opens the datasets once), not per epoch
            weights = [e.weight for e in train]
            log.warning("%s", describe_shares(self.names, weights, self.quotas, sizes))
            for line in repeat_warnings(self.names, [e.path for e in train], weights, self.quotas, sizes):
                warnings.warn(line, stacklevel=2)
        train_split = SplitInfo(n_samples=int(length), shards=())
        return Manifest(format_version=manifests[0].format_version, params=params, splits={"train": train_split})

    def check_agreement(self, entries: list[BlendEntry], manifests: list[Manifest]) -> None:
        """Datasets of one blend must agree on seq_length and tokenizer: a clear error naming both."""
        first, base = entries[0], manifests[0].params
        for entry, manifest in zip(entries[1:], manifests[1:]):
            params = manifest.params
            for key in AGREE_PARAMS:
                if getattr(params, key) != getattr(base, key):
                    raise ValueError(
                        f"datasets of a blend must agree on {key}: {first.path} has {getattr(base, key)}, "
                        f"{entry.path} has {getattr(params, key)}"
                    )
            mine, theirs = tokenizer_of(base), tokenizer_of(params)
            if mine != theirs:
                raise ValueError(
                    f"datasets of a blend must share a tokenizer: {first.path} has {mine}, {entry.path} has {theirs}"
                )

    def setup_eval(self, splits: tuple[Split, ...], stage: str) -> None:
        """Build each val/test dataset's own dataset (one loader per dataset)."""
        for split in splits:
            if split is Split.train:
                continue
            if self.implicit[split.name]:  # the train datasets that have the split
                self.entries[split.name] = [e for e in self.entries[split.name] if self.has_split(e, split)]
            if split is Split.test and not self.entries["test"]:
                raise ValueError(f"no dataset of the blend has a test split, which stage {stage!r} needs")
            for entry in self.entries[split.name]:
                self.source(entry.path).setup("validate" if split is Split.val else "test")

    def has_split(self, entry: BlendEntry, split: Split) -> bool:
        """Whether the (opened) dataset of `entry` has `split`."""
        manifest = self.source(entry.path).manifest
        return manifest is not None and split.name in manifest.splits

    def train_records(self) -> MixedRecords:
        """Every train dataset's records as one `MixedRecords`."""
        train = self.entries["train"]
        parts = [self.source(e.path).records[Split.train] for e in train]
        policies = [self.source(e.path).policy for e in train]
        self.records = MixedRecords(parts, policies, self.seeds)
        return self.records

    def policy(self) -> ShardErrorPolicy:
        """The first train dataset's damaged-shard policy (the mode is every dataset's)."""
        return self.source(self.first_path).policy

    # -- the mixed epoch plan ---------------------------------------------------------------------------

    def tables(self) -> list[RecordTable]:
        return [self.source(e.path).records[Split.train].table for e in self.entries["train"]]

    def plan(self, epoch: int, consumed: list[Consumed] | None = None) -> RankPlan:
        """This rank's batches of the mixed training epoch (from the `consumed` position)."""
        m = self.module
        world, micro, mix, tables = m.world, m.micro_batch_size, m.shuffle_buffer, self.tables()
        return mixed_plan(tables, self.quotas, m.seed, epoch, world.rank, world.size, micro, consumed or [], mix)

    def epoch_length(self, consumed: list[Consumed] | None = None) -> int:
        return train_batches(
            int(self.quotas.sum()), self.module.world.size, self.module.micro_batch_size, consumed or []
        )

    def consumed_per_dataset(self, epoch: int, consumed: list[Consumed]) -> list[int]:
        """Windows of each dataset consumed so far in `epoch` (over all ranks)."""
        sequence = mixed_sequence(self.tables(), self.quotas, self.module.seed, epoch, self.module.shuffle_buffer)
        left = remaining_sequence(sequence, consumed)
        assert self.records is not None
        sources = self.records.resolve(left)[1]
        return (self.quotas - np.bincount(sources, minlength=len(self.quotas))).tolist()

    def count(self, src: Any, epoch_of: Any, batches: Any) -> Any:
        """(main side) Each dataset's windows of the pass into ``source_counts[epoch]`` as batches are
        yielded (Lightning stops at the epoch's length without exhausting the loader), logged when the
        pass's last planned batch (`batches()` of them) is out."""
        counts = np.zeros(len(self.quotas), dtype=np.int64)
        for n, batch in enumerate(src, 1):
            sources = np.asarray(batch["dataset"])
            counts += np.bincount(sources[sources >= 0], minlength=len(counts))
            epoch = epoch_of()
            self.source_counts[epoch] = dict(zip(self.names, counts.tolist()))
            if n == batches():
                rank, counted = self.module.world.rank, self.source_counts[epoch]
                log.info("train epoch %d, rank %d, windows per dataset: %s", epoch, rank, counted)
            yield batch

    # -- loaders, counters and state --------------------------------------------------------------------

    def eval_loaders(self, split: Split) -> list[Any]:
        """One loader per dataset of `split` (Lightning's multiple dataloaders; dataloader_idx is the
        dataset's place in `eval_names`)."""
        return [self.source(e.path).loader(split) for e in self.entries[split.name]]

    def eval_names(self, split: Split) -> list[str]:
        """The names of `split`'s datasets, in the order of their loaders."""
        return unique_names([e.name for e in self.entries[split.name]])

    def storage_stats(self) -> dict[str, int]:
        """The storage counters of every dataset, added up."""
        total = dict.fromkeys(STORAGE_FIELDS, 0)
        for source in self.sources.values():
            for key, value in source.storage_stats.items():
                total[key] += value
        return total

    def skipped(self) -> int:
        return sum(source.skipped for source in self.sources.values())

    def add_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """`state` (the data module's) plus each train dataset's quota and stream position (``epoch x
        quota + windows consumed``), so a restore can check it continues the same blend."""
        if self.records is not None:
            consumed = [Consumed(d, m, b) for d, m, b in state["consumed"]]
            taken = self.consumed_per_dataset(state["epoch"], consumed)
            sizes = [table.n_windows for table in self.tables()]
            positions = stream_positions(sizes, self.quotas, state["epoch"], taken)
            state["blend"] = [
                {"name": n, "path": e.path, "quota": int(q), "position": int(p)}
                for n, e, q, p in zip(self.names, self.entries["train"], self.quotas.tolist(), positions)
            ]
        return state

    def check_state(self, state: dict[str, Any]) -> None:
        """Warn when a checkpoint was made with another blend (its rest follows this blend's plan)."""
        mine = [(e.path, int(q)) for e, q in zip(self.entries["train"], self.quotas.tolist())]
        theirs = [(d["path"], d["quota"]) for d in state.get("blend", [])]
        if theirs and mine and theirs != mine:
            warnings.warn(
                f"checkpoint was made with another blend ({theirs}); this one is {mine}: the rest of the epoch "
                "follows this blend's plan",
                stacklevel=3,
            )


def tokenizer_of(params: Params) -> dict[str, Any]:
    """A dataset's tokenizer, without the stored case (the loader folds case, so it may differ)."""
    return {k: v for k, v in (params.tokenizer or {}).items() if k != "case"}


def unique_names(names: list[str]) -> list[str]:
    """Names for logs and counts, made unique by the entry's number where two collide."""
    return [f"{n}#{i}" if names.count(n) > 1 else n for i, n in enumerate(names)]
