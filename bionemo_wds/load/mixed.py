"""Several prepared datasets mixed by weight with exact, resumable quotas (Evo2's blended training).

`GenomicWebDataModule(datasets=[{"path": ..., "weight": ...}, ...])` or ``blend="blend.yaml"``
(Evo2's format, `load.blend`) makes a `MixedWebDataModule`. Each dataset is opened by a data
module of its own (its store, manifest, damaged-shard policy, storage counters and cache); training
reads their train splits as one table (`MixedRecords`) in the mixed epoch plan of `load.mixing`:
exact quotas per epoch, spread evenly, every rank the same number of batches, resumable (also on
another data-parallel size) since the plan is one window sequence like any training epoch's.
Validation and test run one loader per dataset (Lightning's multiple dataloaders), so each
source's loss is visible; batches carry ``dataset``, the index of each window's source.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import numpy as np

from bionemo_wds.load.blend import BlendEntry, entries_for, parse_datasets, read_blend, shares
from bionemo_wds.load.genomic import GenomicWebDataModule
from bionemo_wds.load.loaders import Split, check_stage
from bionemo_wds.load.mixing import mixed_plan, mixed_sequence, quotas, source_seed, split_virtual, stream_positions
from bionemo_wds.load.plan import Consumed, RankPlan, RecordTable, remaining_sequence, train_batches
from bionemo_wds.load.planned import SplitRecords
from bionemo_wds.load.shard_errors import ShardErrorPolicy
from bionemo_wds.storage.stats import FIELDS as STORAGE_FIELDS

log = logging.getLogger(__name__)

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
        self.shards = parts[0].shards  # read-ahead or not: every part is local, or read the same way

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


class MixedWebDataModule(GenomicWebDataModule):
    """`GenomicWebDataModule` over several datasets (see the module docstring); made by
    ``GenomicWebDataModule(datasets=...)`` or ``GenomicWebDataModule(blend=...)``."""

    def __init__(self, shards: str | None = None, micro_batch_size: int = 8, **options: Any):
        if shards is not None:
            raise ValueError("give either shards (one dataset) or datasets=/blend= (several), not both")
        datasets, blend = options.get("datasets"), options.get("blend")
        if (datasets is None) == (blend is None):
            raise ValueError("give either datasets=[{'path': ..., 'weight': ...}, ...] or blend='blend.yaml'")
        if options.get("fasta"):
            raise ValueError("fasta= prepares one dataset; prepare each dataset of a blend first")
        if options.get("epoch", "exact") != "exact":
            raise ValueError('a mixed epoch has exact quotas: use epoch="exact" with samples_per_epoch')
        entries = parse_datasets(datasets) if datasets is not None else read_blend(str(blend))
        self.entries = {split: entries_for(entries, split) for split in ("train", "val", "test")}
        if not self.entries["train"]:
            raise ValueError("a blend needs at least one train dataset")
        # without val/test entries, each train dataset's own val/test split (where it has one) is read
        self.implicit = {split: not self.entries[split] for split in ("val", "test")}
        for split in ("val", "test"):
            self.entries[split] = self.entries[split] or self.entries["train"]
        samples = options.get("samples_per_epoch")
        if samples is not None and samples < 1:
            raise ValueError(f"samples_per_epoch must be at least 1, got {samples}")
        child = {k: v for k, v in options.items() if k not in ("datasets", "blend", "samples_per_epoch")}
        self.child_options = {**child, "cache_in_memory": child.get("cache_in_memory", ())}
        super().__init__(self.entries["train"][0].path, micro_batch_size, **options)
        self.samples_per_epoch = samples
        self.names = unique_names([e.name for e in self.entries["train"]])
        self.sources: dict[str, GenomicWebDataModule] = {}  # one data module per dataset path
        self.quotas = np.zeros(0, dtype=np.int64)
        self.seeds: list[int] = []
        self.source_counts: dict[int, dict[str, int]] = {}  # per epoch: windows of each dataset this rank yielded

    # -- opening every dataset ------------------------------------------------------------------------

    def source(self, path: str) -> GenomicWebDataModule:
        """The data module of one dataset of the blend (made once, on this rank's data-parallel place)."""
        if path not in self.sources:
            world = self.world
            options = {**self.child_options, "dp_rank": world.rank, "dp_size": world.size}
            self.sources[path] = GenomicWebDataModule(path, self.micro_batch_size, **options)
        return self.sources[path]

    def open_data(self, stage: str) -> dict[str, Any]:
        """Open the train datasets (and check they agree), set the quotas, log the shares; the
        manifest returned describes the mix (its seq_length, widest window and tag room)."""
        train, manifests = self.entries["train"], []
        for entry in train:
            source = self.source(entry.path)
            source.setup("fit")
            assert source.manifest is not None
            manifests.append(source.manifest)
        self.check_agreement(train, manifests)
        params = dict(manifests[0]["params"])
        params["window_length"] = max(m["params"]["window_length"] for m in manifests)
        params["max_tag_bytes"] = max(m["params"]["max_tag_bytes"] for m in manifests)
        sizes = [table.n_windows for table in self.tables()]
        length = self.samples_per_epoch or sum(sizes)
        self.quotas = quotas([e.weight for e in train], length)
        self.seeds = [source_seed(self.seed, d) for d in range(len(train))]
        if self.world.rank == 0:
            for name, entry, share, quota, size in zip(self.names, train, shares(train), self.quotas.tolist(), sizes):
                log.info(
                    "blend: %s (%s) weight %g, share %.4f: %d of %d windows per epoch (it has %d)",
                    *(name, entry.path, entry.weight, share, quota, length, size),
                )
        self.policy = self.source(train[0].path).policy
        return {"params": params, "splits": {"train": {"n_samples": int(length)}}}

    def check_agreement(self, entries: list[BlendEntry], manifests: list[dict[str, Any]]) -> None:
        """Datasets of one blend must agree on seq_length and tokenizer: a clear error naming both."""
        first, base = entries[0], manifests[0]["params"]
        for entry, manifest in zip(entries[1:], manifests[1:]):
            params = manifest["params"]
            for key in AGREE_PARAMS:
                if params[key] != base[key]:
                    raise ValueError(
                        f"datasets of a blend must agree on {key}: {first.path} has {base[key]}, "
                        f"{entry.path} has {params[key]}"
                    )
            mine, theirs = tokenizer_of(base), tokenizer_of(params)
            if mine != theirs:
                raise ValueError(
                    f"datasets of a blend must share a tokenizer: {first.path} has {mine}, {entry.path} has {theirs}"
                )

    def setup(self, stage: str) -> None:
        """Open the blend once, then build the mixed train dataset and each val/test dataset's own."""
        splits = check_stage(stage)
        if self.manifest is None:
            super().setup("fit")  # opens the blend, builds the mixed train dataset
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
        return manifest is not None and split.name in manifest["splits"]

    def split_records(self, split: Split) -> Any:
        """The train split: every train dataset's records as one `MixedRecords`."""
        train = self.entries["train"]
        parts = [self.source(e.path).records[Split.train] for e in train]
        policies = [self.source(e.path).policy for e in train]
        self.mixed_records = MixedRecords(parts, policies, self.seeds)
        return self.mixed_records

    # -- the mixed epoch plan ---------------------------------------------------------------------------

    def tables(self) -> list[RecordTable]:
        return [self.source(e.path).records[Split.train].table for e in self.entries["train"]]

    def plan_for(self, split: Split, epoch: int, consumed: list[Consumed] | None = None) -> RankPlan:
        """This rank's batches of the mixed training epoch (from the `consumed` position)."""
        world, micro, mix = self.world, self.micro_batch_size, self.shuffle_buffer
        return mixed_plan(
            self.tables(), self.quotas, self.seed, epoch, world.rank, world.size, micro, consumed or [], mix
        )

    def epoch_length(self, split: Split, consumed: list[Consumed] | None = None) -> int:
        return train_batches(int(self.quotas.sum()), self.world.size, self.micro_batch_size, consumed or [])

    def consumed_per_dataset(self, epoch: int, consumed: list[Consumed]) -> list[int]:
        """Windows of each dataset consumed so far in `epoch` (over all ranks)."""
        sequence = mixed_sequence(self.tables(), self.quotas, self.seed, epoch, self.shuffle_buffer)
        left = remaining_sequence(sequence, consumed)
        sources = self.mixed_records.resolve(left)[1]
        return (self.quotas - np.bincount(sources, minlength=len(self.quotas))).tolist()

    def count_yielded(self, src: Any) -> Any:
        """(main side) Counts batches as the base does, and each dataset's windows of the pass in
        ``source_counts[epoch]`` (as they are yielded: Lightning stops at the epoch's length without
        exhausting the loader), logged when the pass's last planned batch is out."""
        counts = np.zeros(len(self.quotas), dtype=np.int64)
        for n, batch in enumerate(super().count_yielded(src), 1):
            sources = np.asarray(batch["dataset"])
            counts += np.bincount(sources[sources >= 0], minlength=len(counts))
            epoch = self.epochs[Split.train].epoch
            self.source_counts[epoch] = dict(zip(self.names, counts.tolist()))
            if n == len(self.plans[Split.train]):
                log.info(
                    "train epoch %d, rank %d, windows per dataset: %s",
                    epoch,
                    self.world.rank,
                    self.source_counts[epoch],
                )
            yield batch

    # -- loaders, counters and state --------------------------------------------------------------------

    def eval_loaders(self, split: Split) -> list[Any]:
        """One loader per dataset of `split` (Lightning's multiple dataloaders; dataloader_idx is the
        dataset's place in `eval_names`)."""
        return [self.source(e.path).loader(split) for e in self.entries[split.name]]

    def eval_names(self, split: Split) -> list[str]:
        """The names of `split`'s datasets, in the order of their loaders."""
        return unique_names([e.name for e in self.entries[split.name]])

    def val_dataloader(self) -> Any:
        return self.eval_loaders(Split.val)

    def test_dataloader(self) -> Any:
        return self.eval_loaders(Split.test)

    def predict_dataloader(self) -> Any:
        return self.eval_loaders(Split.test)

    @property
    def storage_stats(self) -> dict[str, int]:
        """The storage counters of every dataset, added up."""
        total = dict.fromkeys(STORAGE_FIELDS, 0)
        for source in self.sources.values():
            for key, value in source.storage_stats.items():
                total[key] += value
        return total

    @property
    def skipped(self) -> int:
        return sum(source.skipped for source in self.sources.values())

    def state_dict(self) -> dict[str, Any]:
        """The base state plus each train dataset's quota and stream position (``epoch x quota +
        windows consumed``), so a restore can check it continues the same blend."""
        state = super().state_dict()
        if Split.train in self.records:
            consumed = [Consumed(d, m, b) for d, m, b in state["consumed"]]
            taken = self.consumed_per_dataset(state["epoch"], consumed)
            positions = stream_positions(self.quotas, state["epoch"], taken)
            state["blend"] = [
                {"name": n, "path": e.path, "quota": int(q), "position": int(p)}
                for n, e, q, p in zip(self.names, self.entries["train"], self.quotas.tolist(), positions)
            ]
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mine = [(e.path, int(q)) for e, q in zip(self.entries["train"], self.quotas.tolist())]
        theirs = [(d["path"], d["quota"]) for d in state.get("blend", [])]
        if theirs and mine and theirs != mine:
            warnings.warn(
                f"checkpoint was made with another blend ({theirs}); this one is {mine}: the rest of the epoch "
                "follows this blend's plan",
                stacklevel=2,
            )
        super().load_state_dict(state)


def tokenizer_of(params: dict[str, Any]) -> dict[str, Any]:
    """A dataset's tokenizer, without the stored case (the loader folds case, so it may differ)."""
    return {k: v for k, v in params.get("tokenizer", {}).items() if k != "case"}


def unique_names(names: list[str]) -> list[str]:
    """Names for logs and counts, made unique by the entry's number where two collide."""
    return [f"{n}#{i}" if names.count(n) > 1 else n for i, n in enumerate(names)]
