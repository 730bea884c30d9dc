"""`GenomicMapDataset`: sample i of the epoch plan, for samplers that hand out indices.

Megatron's pre-training samplers (`MegatronPretrainingSampler`, resumed by a count of consumed
samples) and torch's `DistributedSampler` drive a map-style dataset: ``len(ds)`` and ``ds[i]``. Here
index i is sample ``i mod n`` of epoch ``i // n`` (n: the samples of one epoch), the epoch folded
into the index as Megatron's GPT datasets fold their passes into one long shuffled index, so
``num_samples`` may ask for several epochs. Sample i is the one `GenomicDataset` (one data-parallel
rank, no workers) yields at that place of that epoch, with the same reverse complement and tag
dropout (drawn by seed, epoch and the sample's key), laid out by the same batch builder; the sampler,
not the dataset, divides indices among data-parallel ranks, so every rank opens the whole plan.

The epoch's order is the plan's (one int64 per sample of the epoch, computed when an epoch is first
asked for; the last two are kept), and decoded records stay in a cache as they do for the iterable
path, so indices asked for in order read each record about once.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from torch.utils.data import Dataset

from bionemo_wds.errors import OptionError
from bionemo_wds.load.dataset import GenomicDataset
from bionemo_wds.load.plan.progress import EpochState
from bionemo_wds.load.plan.types import RankPlan
from bionemo_wds.load.reader import RecordCache
from bionemo_wds.load.splits import Split
from bionemo_wds.load.world import Worker

#: Options a map-style dataset sets itself (one sample per index, the sampler divides the indices).
OWN_OPTIONS = ("micro_batch_size", "model_inputs", "global_batch_size", "dp_rank", "dp_size")
#: Epoch plans kept at once.
PLANS_KEPT = 2


class GenomicMapDataset(Dataset):
    """Samples of one split by index (module docstring): ``ds[i]`` is a dict of ``tokens``, ``labels``,
    ``loss_mask``, ``position_ids`` (one sample each, ``seq_length`` long) and the sample's ``keys``,
    ``seq_id``, ``start``, ``rc``, as one row of `GenomicDataset`'s batches.

    Args:
        root, split: as `GenomicDataset`.
        num_samples: indices the dataset has (default: one epoch); more than an epoch's continue into
            the next epochs, each in its own order.
        **options: any other `GenomicDataset` option (seq_length, seed, rc_prob, datasets, stride,
            ...) but the batch and rank options, which a sampler owns here.
    """

    def __init__(
        self, root: str | None = None, split: str | Split = "train", *, num_samples: int | None = None, **options: Any
    ):
        taken = sorted(set(options) & set(OWN_OPTIONS))
        if taken:
            raise OptionError(
                f"GenomicMapDataset gives one sample per index and leaves batches and data-parallel ranks to its "
                f"sampler: drop {', '.join(taken)}"
            )
        if options.get("pack"):
            raise OptionError(
                "GenomicMapDataset serves windows; packed samples hold a varying number of documents, whose "
                "boundaries a per-index sample cannot carry in fixed shapes: use GenomicDataset with pack=True"
            )
        self.dataset = GenomicDataset(
            root, split, micro_batch_size=1, model_inputs=True, dp_rank=0, dp_size=1, **options
        )
        self.per_epoch = self.dataset.epoch_length()
        if num_samples is not None and num_samples < 0:
            raise OptionError(f"num_samples must be non-negative, got {num_samples}")
        self.num_samples = self.per_epoch if num_samples is None else num_samples
        if self.num_samples > 0 and self.per_epoch == 0:
            raise OptionError(f"{self.dataset.sources.describe()} has no {self.dataset.split.name} samples to index")
        self.epochs: OrderedDict[int, tuple[RankPlan, Any, Any]] = OrderedDict()
        self.cache: RecordCache | None = None

    def __len__(self) -> int:
        return self.num_samples

    def epoch_reader(self, epoch: int) -> tuple[RankPlan, Any, Any]:
        """Epoch `epoch`'s plan of one sample per batch, its reader and its batch builder (`GenomicDataset.
        batch_stages`; the last `PLANS_KEPT` epochs kept)."""
        if epoch not in self.epochs:
            plan = self.dataset.plan(epoch, consumed=[])
            reader, build = self.dataset.batch_stages(lambda: plan, EpochState(epoch), unit=1)
            self.epochs[epoch] = (plan, reader, build)
            while len(self.epochs) > PLANS_KEPT:
                self.epochs.popitem(last=False)
        return self.epochs[epoch]

    def provenance(self, batch: dict[str, Any]) -> list[Any]:
        """`GenomicDataset.provenance` of a batch of this dataset's samples (as a DataLoader collates them)."""
        return self.dataset.provenance(batch)

    def __getitem__(self, index: int) -> dict[str, Any]:
        i = int(index) + (self.num_samples if int(index) < 0 else 0)
        if not 0 <= i < self.num_samples:
            raise IndexError(f"index {index} out of range for {self.num_samples} samples")
        epoch, position = divmod(i, self.per_epoch)
        plan, reader, build = self.epoch_reader(epoch)
        if self.cache is None:
            self.cache = RecordCache(reader.cache_windows)
        planned = reader.windows(plan, position, self.cache, Worker.detect())
        (compact,) = build(iter([(position, planned)]))
        return {key: value[0] for key, value in self.dataset.output(compact).items()}
