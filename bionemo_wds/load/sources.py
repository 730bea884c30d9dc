"""The prepared datasets a `GenomicDataset` reads: one, or several mixed by weight. Opened here, once.

A single dataset is a blend of one (weight 1). `Sources` resolves ``root`` / ``datasets=`` /
``blend=`` into blend entries (`blend_file`), opens each dataset the first time a split needs it
(`Source`: its store, checked manifest, damaged-shard policy, storage counters and cache), checks
that a blend's datasets agree (seq_length, tokenizer), and says what a training epoch holds: each
dataset's quota (`plan.mixing.quotas`) and stream seed. Validation and test read each dataset's own
split: a blend without val/test entries reads the train datasets that have one.
"""

from __future__ import annotations

import logging
import warnings
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from bionemo_wds import format as stored
from bionemo_wds.errors import BlendError, OptionError
from bionemo_wds.format import Manifest, Params
from bionemo_wds.load.blend_file import BlendEntry, entries_for, last_component, parse_datasets, read_blend
from bionemo_wds.load.manifest_checks import open_dataset
from bionemo_wds.load.plan.mixing import describe_shares, quotas, repeat_warnings, source_seeds
from bionemo_wds.load.plan.samples import SequenceTable
from bionemo_wds.load.records import SourceRecords, SplitRecords
from bionemo_wds.load.shard_errors import Handler, ShardErrorPolicy
from bionemo_wds.load.spans import Cutting, SequenceRecords, SpanSources, is_sequence_layout
from bionemo_wds.load.splits import Split
from bionemo_wds.storage.cache import RangeCache
from bionemo_wds.storage.request_slots import RequestSlots
from bionemo_wds.storage.retry import RetryPolicy
from bionemo_wds.storage.stats import FIELDS as STORAGE_FIELDS
from bionemo_wds.storage.stats import StorageStats
from bionemo_wds.storage.store import Store

log = logging.getLogger("bionemo_wds.load.dataset")  # the dataset's log, where users look for it

#: What every dataset of a blend must agree on (the tokenizer's stored case may differ: the loader folds it).
AGREE_PARAMS = ("seq_length",)


@dataclass(frozen=True)
class OpenOptions:
    """How a dataset is opened (see `GenomicDataset` for each)."""

    seq_length: int | None = None
    handler: str | Handler = "raise"
    storage_options: Mapping[str, Any] | None = None
    retries: int = 5
    retry_backoff: float = 0.5
    cache_dir: str | None = None
    cache_limit: int | None = None
    max_requests: int | None = None

    def store(self, path: str) -> Store:
        """The store of a dataset at `path`: these retries, and the node's bound on requests in
        flight (`RequestSlots`, shared through the cache directory)."""
        retry = RetryPolicy(self.retries, self.retry_backoff)
        slots = RequestSlots(self.cache_dir, self.max_requests)
        return Store(path, dict(self.storage_options or {}), retry, what="shards", slots=slots)


@dataclass
class Source:
    """One prepared dataset, opened and checked (`manifest_checks.open_dataset`)."""

    entry: BlendEntry
    store: Store
    manifest: Manifest
    shard_sizes: Mapping[str, int | None]
    policy: ShardErrorPolicy
    stats: StorageStats
    cache: RangeCache | None
    records: dict[str, SplitRecords] = field(default_factory=dict)
    tables: dict[tuple[str, int], Any] = field(default_factory=dict)

    @classmethod
    def open(cls, entry: BlendEntry, options: OpenOptions, report: bool) -> Source:
        """Open the dataset of `entry`; `report`: warn about what the manifest does not list (one rank does)."""
        store = options.store(entry.path)
        opened = open_dataset(
            store, options.seq_length, options.handler, report, options.cache_dir, options.cache_limit
        )
        return cls(entry, store, opened.manifest, opened.shard_sizes, opened.policy, opened.stats, opened.cache)

    @property
    def root(self) -> str:
        return self.store.root

    def has_split(self, split: Split) -> bool:
        return split.name in self.manifest.splits

    def sequence_table(self, split: Split) -> SequenceTable:
        """`split`'s sequences in storage order (a sequence-layout dataset's sequence index)."""
        rows = stored.read_sequence_index(self.store, self.manifest, split.name)
        if rows is None:
            raise OptionError(f"{self.root} has no sequence index for its {split.name} split (not a sequence layout)")
        lengths = np.asarray(rows["length"], dtype=np.int64)
        tags = np.asarray(rows["tag_bytes"], dtype=np.int64)
        return SequenceTable(lengths, tags, self.manifest.params.window_length, len(self.split_records(split).table))

    def sample_table(self, split: Split, cutting: Cutting, seed: int) -> Any:
        """What the plan deals from for `split`: the record table of stored windows, or the samples a
        sequence-layout split is cut into at load (made once per split and seed)."""
        key = (split.name, seed)
        if key not in self.tables:
            params = self.manifest.params
            if is_sequence_layout(params):
                seqs = SequenceRecords(self.split_records(split), self.sequence_table(split))
                self.tables[key] = (seqs, cutting.table(self.root, params, seqs.seqs, seed))
            else:
                cutting.check_windows_layout(self.root, params)
                self.tables[key] = (None, self.split_records(split).table)
        return self.tables[key]

    def split_records(self, split: Split) -> SplitRecords:
        """Every record of `split` (read from the record index once)."""
        if split.name not in self.records:
            self.records[split.name] = SplitRecords.from_manifest(
                self.store, self.manifest, split.name, self.policy, self.shard_sizes, self.cache
            )
        return self.records[split.name]


def blend_entries(
    root: str | None, datasets: Sequence[Mapping[str, Any]] | None, blend: str | None
) -> list[BlendEntry]:
    """The entries of ``root`` (one dataset: a blend of one), ``datasets=`` or ``blend=`` (one of them)."""
    given = [name for name, value in (("root", root), ("datasets", datasets), ("blend", blend)) if value is not None]
    if len(given) != 1:
        raise OptionError(
            "give one dataset (root/shards) or several (datasets= or blend=), "
            + (f"not {' and '.join(given)}" if given else "none was given")
        )
    if root is not None:
        return [BlendEntry(str(root), 1.0, "train", last_component(str(root)))]
    return parse_datasets(datasets) if datasets is not None else read_blend(str(blend))


class Sources:
    """The datasets of one `GenomicDataset` (or of a data module's splits): opened when first needed.

    Args:
        entries: the blend (`blend_entries`); val/test entries name the datasets evaluated.
        samples_per_epoch: samples of a training epoch (None: every train dataset's windows once).
        seed: the run's seed (the datasets' stream seeds derive from it).
        options: how each dataset is opened.
        rank: this process's data-parallel rank (rank 0 warns and logs the shares).
        checks: what to warn about a dataset when it is opened (options it cannot use, as lines).
        cutting: how a sequence-layout dataset's samples are cut at load (windows, packing).
    """

    def __init__(
        self,
        entries: Sequence[BlendEntry],
        samples_per_epoch: int | None,
        seed: int,
        options: OpenOptions,
        rank: int = 0,
        checks: Callable[[Any], list[str]] | None = None,
        cutting: Cutting | None = None,
    ):
        self.cutting = cutting or Cutting(options.seq_length)
        self.entries = {split: entries_for(entries, split.name) for split in Split}
        if not self.entries[Split.train]:
            raise BlendError("a blend needs at least one train dataset")
        if samples_per_epoch is not None and samples_per_epoch < 1:
            raise OptionError(f"samples_per_epoch must be at least 1, got {samples_per_epoch}")
        # without val/test entries, each train dataset's own val/test split (where it has one) is read
        self.implicit = {split: not self.entries[split] for split in (Split.val, Split.test)}
        self.samples_per_epoch, self.seed, self.options, self.rank = samples_per_epoch, seed, options, rank
        self.checks = checks
        self.opened: dict[str, Source] = {}
        self.mix: tuple[np.ndarray, list[int]] | None = None  # (quotas, stream seeds) of the train datasets

    def source(self, entry: BlendEntry) -> Source:
        """The opened dataset of `entry` (opened once, whichever split asks first)."""
        if entry.path not in self.opened:
            source = self.opened[entry.path] = Source.open(entry, self.options, report=self.rank == 0)
            for problem in self.checks(source.manifest) if self.checks is not None else ():
                warnings.warn(f"{problem} ({source.root})", stacklevel=4)
        return self.opened[entry.path]

    def lacking(self, split: Split) -> str | None:
        """Which dataset lacks `split` when the split is needed (None when nothing does): a train
        dataset without a train split, or no dataset with the evaluation split."""
        if split is Split.train:
            bare = [source.root for source in self.of(split) if not source.has_split(split)]
            return bare[0] if bare else None
        return None if self.of(split) else self.describe()

    def alone(self, source: Source) -> Sources:
        """The datasets of `source` alone (a dataset evaluated by itself), sharing what it opened."""
        entry = BlendEntry(source.entry.path, 1.0, "train", source.entry.name)
        one = Sources([entry], None, self.seed, self.options, self.rank, self.checks, self.cutting)
        one.opened[entry.path] = source
        return one

    def describe(self) -> str:
        """The datasets, for messages: the root of one, or how many a blend has."""
        train = self.entries[Split.train]
        return train[0].path if len(train) == 1 else f"the blend of {len(train)} datasets"

    def of(self, split: Split) -> list[Source]:
        """The datasets `split` reads, in order: the train datasets (checked to agree, with their
        quotas set), or the evaluated ones (a blend without val/test entries: the train datasets
        that have the split)."""
        if split is Split.train:
            sources = [self.source(entry) for entry in self.entries[Split.train]]
            self.check_agreement(sources)
            return sources
        if self.implicit[split]:
            train = [self.source(entry) for entry in self.entries[Split.train]]
            return [source for source in train if source.has_split(split)]
        return [self.source(entry) for entry in self.entries[split]]

    @property
    def names(self) -> list[str]:
        """The train datasets' names, unique (for logs and counts)."""
        return unique_names([e.name for e in self.entries[Split.train]])

    def eval_names(self, split: Split) -> list[str]:
        """The names of `split`'s datasets, in the order of `of(split)`."""
        return unique_names([source.entry.name for source in self.of(split)])

    def check_agreement(self, sources: Sequence[Source]) -> None:
        """Datasets of one blend must agree on seq_length and tokenizer: a clear error naming both."""
        first, base = sources[0], sources[0].manifest.params
        for other in sources[1:]:
            params = other.manifest.params
            for key in AGREE_PARAMS:
                if self.served(params, key) != self.served(base, key):
                    raise BlendError(
                        f"datasets of a blend must agree on {key}: {first.root} has {getattr(base, key)}, "
                        f"{other.root} has {getattr(params, key)}"
                    )
            mine, theirs = tokenizer_of(base), tokenizer_of(params)
            if mine != theirs:
                raise BlendError(
                    f"datasets of a blend must share a tokenizer: {first.root} has {mine}, {other.root} has {theirs}"
                )

    def served(self, params: Params, key: str) -> Any:
        """A parameter as this loader serves it (a sequence-layout dataset serves the seq_length asked for)."""
        if key == "seq_length" and is_sequence_layout(params) and self.cutting.seq_length is not None:
            return self.cutting.seq_length
        return getattr(params, key)

    def train_mix(self) -> tuple[np.ndarray, list[int]]:
        """(quota, stream seed) of every train dataset; the shares are logged once, by rank 0."""
        if self.mix is None:
            entries, sources = self.entries[Split.train], self.of(Split.train)
            seeds = source_seeds(self.seed, len(entries))
            sizes = [
                source.sample_table(Split.train, self.cutting, seed)[1].n_windows
                for source, seed in zip(sources, seeds)
            ]
            length = self.samples_per_epoch or sum(sizes)
            weights = [e.weight for e in entries]
            self.mix = quotas(weights, length), seeds
            if self.rank == 0 and len(entries) > 1:  # a blend's shares (one dataset has nothing to share)
                log.warning("%s", describe_shares(self.names, weights, self.mix[0], sizes))
            if self.rank == 0:
                for line in repeat_warnings(self.names, [e.path for e in entries], weights, self.mix[0], sizes):
                    warnings.warn(line, stacklevel=3)
        return self.mix

    def records(self, split: Split) -> SourceRecords | SpanSources:
        """`split`'s records over its datasets, as one table (each dataset read by its own policy): stored
        windows, or samples cut at load from sequence-layout datasets (a blend is of one layout)."""
        sources = self.of(split)
        if not sources:
            raise OptionError(f"no dataset has a {split.name} split")
        seeds = self.train_mix()[1] if split is Split.train else [self.seed] * len(sources)
        policies = [source.policy for source in sources]
        layouts = [is_sequence_layout(source.manifest.params) for source in sources]
        if any(layouts) and not all(layouts):
            windows, sequences = sources[layouts.index(False)].root, sources[layouts.index(True)].root
            raise BlendError(
                f"a blend cannot mix {windows} (windows cut at prepare) with {sequences} (sequences, cut at load): "
                "prepare both with the same --layout"
            )
        # evaluation reads every split the same way every time: windows on their fixed grid
        cutting = self.cutting if split is Split.train else replace(self.cutting, window_offset="fixed")
        tables = [source.sample_table(split, cutting, seed) for source, seed in zip(sources, seeds)]
        if all(layouts):
            return SpanSources([t[0] for t in tables], [t[1] for t in tables], policies, seeds)
        return SourceRecords([source.split_records(split) for source in sources], policies, seeds)

    def params(self, split: Split) -> Params:
        """The manifest params `split`'s batches are laid out by: the widest window and tag room of its datasets."""
        first = self.source(self.entries[Split.train][0])
        manifests = [source.manifest for source in self.of(split)] or [first.manifest]
        base = manifests[0].params
        if is_sequence_layout(base):  # cut at load: the window the asked seq_length leaves
            tags = max_tag_bytes(manifests)
            seq_length = self.cutting.seq_length or base.seq_length
            room = replace(base, seq_length=seq_length, max_tag_bytes=tags)
            return replace(room, window_length=self.cutting.window(room))
        window = max(m.params.window_length for m in manifests)
        return replace(base, window_length=window, max_tag_bytes=max_tag_bytes(manifests))

    # -- counters -----------------------------------------------------------------------------------

    @property
    def policy(self) -> ShardErrorPolicy:
        """The first train dataset's damaged-shard policy (the handler is every dataset's)."""
        return self.source(self.entries[Split.train][0]).policy

    @property
    def remote(self) -> bool:
        return any(source.store.remote for source in self.opened.values())

    def storage_stats(self) -> dict[str, int]:
        """What the storage layer did so far for every opened dataset, added up."""
        total = dict.fromkeys(STORAGE_FIELDS, 0)
        for source in self.opened.values():
            for key, value in source.stats.snapshot().items():
                total[key] += value
        return total

    def skipped(self) -> int:
        """Damaged records or shards skipped so far (``handler="warn"``), every dataset's."""
        return sum(source.policy.skipped for source in self.opened.values())

    def check_state(self, state: Mapping[str, Any]) -> None:
        """Warn when a checkpoint was made with another blend (its rest follows this blend's plan)."""
        # by name and quota: a dataset moved to another place (bucket, mount) is the same dataset
        mine = [(n, int(q)) for n, q in zip(self.names, self.train_mix()[0].tolist())]
        theirs = [(d["name"], d["quota"]) for d in state.get("blend", [])]
        if theirs and mine and theirs != mine:
            warnings.warn(
                f"checkpoint was made with another blend ({theirs}); this one is {mine}: the rest of the epoch "
                "follows this blend's plan",
                stacklevel=4,
            )


def tokenizer_of(params: Params) -> dict[str, Any]:
    """A dataset's tokenizer, without the stored case (the loader folds case, so it may differ)."""
    return {k: v for k, v in (params.tokenizer or {}).items() if k != "case"}


def max_tag_bytes(manifests: Sequence[Manifest]) -> int:
    """The widest room for control tags of these datasets."""
    return max(m.params.max_tag_bytes for m in manifests)


def unique_names(names: list[str]) -> list[str]:
    """Names for logs and counts, made unique by the entry's number where two collide."""
    counts = Counter(names)  # (`list.count` per name: a blend of 1,000 datasets is a million steps)
    return [f"{n}#{i}" if counts[n] > 1 else n for i, n in enumerate(names)]
