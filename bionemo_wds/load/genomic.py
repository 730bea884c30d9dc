"""`GenomicWebDataModule`: prepared genome shards (or FASTA) to model-ready batches in Lightning.

Reads the manifest (sample counts, window parameters), checks the shards on disk against it, and
assembles the default pipelines through `WebDataModule`:

    train:    untuple -> decode_sample -> shuffle -> reverse_complement -> batch   (in workers)
    val/test: untuple -> decode_sample -> batch

(run as their fused, equivalent form `decode_blocks -> shuffle_batch`, see blockpath.py).

Loaders yield compact uint8 batches (what crosses the worker boundary); `on_after_batch_transfer`
expands them with `to_model_inputs` on the device. Users who iterate a loader themselves call
`model_inputs(batch)`. Given ``fasta=[...]``, `prepare_data` runs the preparer once (under a
file lock, so nodes sharing a filesystem do not race) and reuses a complete output.
"""

from __future__ import annotations

import fcntl
import multiprocessing as mp
import warnings
from pathlib import Path
from typing import Any

import torch
import webdataset as wds

from bionemo_wds.load.blockpath import decode_blocks, shuffle_batch
from bionemo_wds.format import read_manifest
from bionemo_wds.load.partition import EpochLoader, EpochShardOrder, shards_for_rank
from bionemo_wds.load.pipeline import EpochState, group, keep_numpy, to_model_inputs, to_tensors, ungroup, untuple
from bionemo_wds.load.shard_errors import CorruptShardError, ShardErrorPolicy
from bionemo_wds.load.shmring import SharedRing, fork_available, from_ring, to_ring
from bionemo_wds.load.tarstream import read_records
from bionemo_wds.compat.webdatamodule import STAGE_SPLITS, Split, WebDataModule


#: Batches (messages) each loader worker may have in flight; its shared-memory ring has 2 more slots.
PREFETCH = 2


class GenomicWebDataModule(WebDataModule):
    """Lightning data module over `bionemo-wds prepare` output.

    Args:
        shards: dataset root (holds manifest.json and one directory per split).
        micro_batch_size: samples per batch on each rank.
        global_batch_size: samples per optimizer step over all ranks (default micro x world size);
            sets the pseudo-epoch of ``ceil(n_samples / global_batch_size)`` batches.
        seq_length: tokens per model sample; must be what the shards were cut for (default: theirs).
        rc_prob: probability of reverse-complementing a training window (seeded per sample and epoch).
        control_tags: put each window's control tag between BOS and SEP.
        seed: seeds shard order, shuffle buffer and RC flips (with the epoch).
        num_workers: loader worker processes (capped at the shards each rank reads).
        shuffle_buffer: samples held by the training shuffle buffer (per worker).
        handler: "raise" on a damaged shard (naming it and the sample key) or "warn" to skip and count.
        fasta: FASTA inputs to prepare into `shards` when no complete manifest is there.
        prepare_options: further `PrepareOptions` for that (e.g. stride, tail, split, tags).
        pin_memory: pin loader memory (GPU training).
        transfer_bytes: with workers, compact batches are sent to the main process in groups of
            about this many token bytes (one message per group; see `pipeline.group`).
    """

    def __init__(
        self,
        shards: str,
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
    ):
        super().__init__({}, {}, "msgpack", global_batch_size or micro_batch_size)
        if not 0 <= rc_prob <= 1:
            raise ValueError(f"rc_prob must be in [0, 1], got {rc_prob}")
        if fasta and seq_length is None:
            raise ValueError("preparing from fasta needs seq_length")
        self.save_hyperparameters()
        self.root = Path(shards)
        self.micro_batch_size = micro_batch_size
        self.requested_global_batch_size = global_batch_size
        self.seq_length = seq_length
        self.rc_prob = rc_prob
        self.control_tags = control_tags
        self.seed = seed
        self.num_workers = num_workers
        self.shuffle_buffer = shuffle_buffer
        self.handler = handler
        self.fasta = list(fasta or [])
        self.prepare_options = dict(prepare_options or {})
        self.pin_memory = pin_memory
        self.transfer_bytes = transfer_bytes
        self.manifest: dict[str, Any] | None = None
        self.policy = ShardErrorPolicy(handler)  # validated now; rebuilt with the manifest in setup
        self._epochs = {split: EpochState() for split in Split}
        self._rings: dict[Split, SharedRing] = {}
        self._shard_orders: dict[Split, EpochShardOrder] = {}

    # -- preparing --------------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Prepare `fasta` into `shards` unless done; safe when several nodes share the filesystem."""
        if not self.fasta:
            return
        from bionemo_wds.prepare import PrepareOptions, prepare

        opts = PrepareOptions(**{"seed": self.seed, **self.prepare_options, "seq_length": self.seq_length})
        lock_path = Path(f"{self.root}.lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(lock_path, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # the second node waits, then finds the run finished
            result = prepare(self.fasta, self.root, opts)
        if result.status != "unchanged":
            print(f"prepared {self.root}: {result.shards_written} shard(s) in {result.seconds:.1f} s")

    # -- setup ------------------------------------------------------------------------------------

    def _rank_world(self) -> tuple[int, int]:
        trainer = getattr(self, "trainer", None)
        if trainer is not None:
            return trainer.global_rank, trainer.world_size
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return 0, 1

    def _check_files(self, manifest: dict[str, Any]) -> None:
        for info in manifest["splits"].values():
            for shard in info["shards"]:
                path = self.root / shard["path"]
                if not path.exists():
                    raise CorruptShardError(f"shard {path} is listed in {self.root}/manifest.json but missing")
                size = path.stat().st_size
                if size != shard["bytes"]:
                    raise CorruptShardError(f"shard {path} has {size} bytes but the manifest lists {shard['bytes']}: "
                                            "the manifest disagrees with the file (run `bionemo-wds verify`)")

    def _read_manifest(self) -> dict[str, Any]:
        manifest = read_manifest(self.root)
        params = manifest["params"]
        if self.seq_length is not None and self.seq_length != params["seq_length"]:
            raise ValueError(
                f"{self.root} was cut for seq_length {params['seq_length']} (windows of {params['window_length']} "
                f"bases); seq_length={self.seq_length} was asked for. Use seq_length={params['seq_length']} or "
                f"prepare again with --seq-length {self.seq_length}"
            )
        self._check_files(manifest)
        return manifest

    def setup(self, stage: str) -> None:
        if self.manifest is None:  # configure once; later stages reuse the datasets built so far
            self._configure_from_manifest()
        if stage not in STAGE_SPLITS:
            raise NotImplementedError(f"Data setup with stage={stage!r} is not implemented "
                                      f"(use one of {', '.join(STAGE_SPLITS)})")
        # fit needs train; val is optional (a dataset prepared with --split 1,0,0 trains without it)
        needed = {"fit": ("train",), "validate": ("val",), "test": ("test",), "predict": ("test",)}[stage]
        missing = [name for name in needed if name not in self.manifest["splits"]]
        if missing:
            raise ValueError(f"{self.root} has no {', '.join(missing)} split, which stage {stage!r} needs")
        for split in STAGE_SPLITS[stage]:
            if split.name in self.manifest["splits"] and split not in self._dataset:
                self._dataset[split] = self._build_dataset(split)

    def val_dataloader(self):
        """The val loader, or no batches at all when the dataset has no val split."""
        return super().val_dataloader() if "val" in self.manifest["splits"] else []

    def _configure_from_manifest(self) -> None:
        manifest = self._read_manifest()
        params = manifest["params"]
        self.seq_length = params["seq_length"]
        rank, world = self._rank_world()
        splits = {Split[name]: info for name, info in manifest["splits"].items()}
        expected = {str(self.root / sh["path"]): sh["n_samples"] for info in splits.values() for sh in info["shards"]}
        context = mp.get_context()  # loader workers start with it; the skip counter must match
        self.policy = ShardErrorPolicy(self.handler, expected, context)
        window, max_tag = params["window_length"], params["max_tag_bytes"]
        pipelines, prebatch, kwargs_wld = {}, {}, {}
        for split, info in splits.items():
            train = split is Split.train
            # the fused form of decode_sample -> shuffle -> reverse_complement -> batch (blockpath.py)
            stages = [untuple, decode_blocks(self.policy),
                      shuffle_batch(self.micro_batch_size, window, max_tag,
                                    bufsize=self.shuffle_buffer if train else 0,
                                    initial=min(self.shuffle_buffer, 100), seed=self.seed,
                                    epoch=self._epochs[split], rank=rank, rc_prob=self.rc_prob if train else 0.0)]
            workers = self._workers_for(split, len(info["shards"]), rank, world)
            per_message = max(1, self.transfer_bytes // max(1, self.micro_batch_size * window)) if workers else 1
            prebatch[split] = []
            if workers and fork_available():
                # groups of batches through shared memory; only small columns cross the queue
                per_batch = self.micro_batch_size * (window + max_tag + 4 + 4 + 1 + 8) + 6 * 8
                ring = SharedRing(workers, slots=PREFETCH + 2, slot_bytes=per_message * per_batch)
                self._rings[split] = ring
                stages.append(to_ring(ring, per_message))
                prebatch[split].append(from_ring(ring))
            elif per_message > 1:
                stages.append(group(per_message))
                prebatch[split].append(ungroup())
            pipelines[split] = stages
            self._shard_orders[split] = EpochShardOrder(self.seed, self._epochs[split], shuffle=train, rank=rank,
                                                        world_size=world)
            # batches stay numpy until the main process (keep_numpy: no per-tensor shared-memory
            # segments); to_tensors wraps them there, zero-copy
            kwargs_wld[split] = {"num_workers": workers, "collate_fn": keep_numpy,
                                 **({"prefetch_factor": PREFETCH, "multiprocessing_context": context}
                                    if workers else {})}
            prebatch[split].append(to_tensors(pin_memory=self.pin_memory))
        self._configure(
            {split: str(self.root / split.name) for split in splits},
            {split: info["n_samples"] for split, info in splits.items()},
            ["msgpack", "__key__", "__url__"],
            self.requested_global_batch_size or self.micro_batch_size * world,
            params["prefix"], pipelines, prebatch, None, kwargs_wld,
        )
        self.manifest = manifest

    def _build_dataset(self, split: Split):
        """Shard list -> rank's share -> worker's share -> our tar reader -> the split's stages.

        The same stages as `WebDataModule` builds, but tar members are read by `tarstream` instead
        of webdataset's tarfile-based expander (faster; see tarstream.py), and the records reach
        the stages as ``(bytes, key, url)`` so errors can name shard and key.
        """
        urls = self._urls[split] = self.shard_urls(split)
        return wds.DataPipeline(
            wds.SimpleShardList(urls),
            self._shard_orders[split],
            wds.split_by_worker,
            read_records("msgpack", self.policy),
            *self._pipeline_wds[split],
        )

    def _workers_for(self, split: Split, n_shards: int, rank: int, world: int) -> int:
        share = shards_for_rank(n_shards, rank, world)
        if share == 0 and split is Split.train:
            # an empty rank would wait for the others at the first gradient all-reduce, forever
            raise ValueError(f"{self.root}: the train split has {n_shards} shard(s) for {world} ranks, so rank {rank} "
                             f"would get no data; prepare with a smaller --samples-per-shard (at least {world} shards)")
        if self.num_workers > share:
            warnings.warn(f"{split.name}: rank {rank} reads {share} shard(s), so it uses {share} loader worker(s) "
                          f"instead of num_workers={self.num_workers} (each worker reads whole shards)")
            return share
        return self.num_workers

    # -- loaders ----------------------------------------------------------------------------------

    def _epoch_batches(self, split: Split) -> int | None:
        """Training keeps the pseudo-epoch; validation and test read every sample exactly once."""
        return super()._epoch_batches(split) if split is Split.train else None

    def _make_loader(self, dataset, kwargs):
        split = next(s for s, d in self._dataset.items() if d is dataset)
        ring = self._rings.get(split)
        return EpochLoader(dataset, epoch_state=self._epochs[split], epoch_source=self._trainer_epoch,
                           before_pass=ring.new_generation if ring else None, **kwargs)

    def _trainer_epoch(self) -> int | None:
        trainer = getattr(self, "trainer", None)
        return trainer.current_epoch if trainer is not None else None

    def model_inputs(self, compact: dict[str, Any]) -> dict[str, Any]:
        """Compact batch -> tokens, labels, loss_mask, position_ids (for users iterating loaders)."""
        return to_model_inputs(compact, self.seq_length, self.control_tags)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        return self.model_inputs(batch)

    @property
    def skipped(self) -> int:
        """Damaged records or shards skipped so far under ``handler="warn"``."""
        return self.policy.skipped

    def state_dict(self) -> dict[str, Any]:
        return {"seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("seed", self.seed) != self.seed:
            warnings.warn(f"checkpoint was made with seed {state['seed']}; this data module uses {self.seed}")
