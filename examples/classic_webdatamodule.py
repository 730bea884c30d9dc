"""The classic bionemo-webdatamodule API (`WebDataModule`) over shards written by `bionemo-wds prepare`.

Code written for bionemo's ``WebDataModule`` runs on bionemo-wds shards: give each split's shard
directory, the number of windows per split (the pseudo-epoch), the tar member suffix ("msgpack")
and your own webdataset pipelines. This script

1. prepares the bundled Klebsiella assembly (119 contigs) into a temporary directory,
2. builds a `WebDataModule` whose pipelines decode the records into windows, shuffle them, flip
   half to the reverse strand, batch them and expand each batch into model inputs,
3. reads the validation split's pseudo-epoch with two loader workers, and
4. trains a tiny next-token model for a few steps with `Trainer.fit`.

Run it with ``python examples/classic_webdatamodule.py`` (about 15 s on 2 CPU cores).
"""

from __future__ import annotations

import math
import subprocess
import sys
import tempfile
from functools import partial
from importlib.resources import files
from pathlib import Path

import lightning as L
import torch
import webdataset as wds

from bionemo_wds import (
    Split,
    WebDataModule,
    batch,
    decode_sample,
    reverse_complement,
    shuffle,
    to_model_inputs,
    untuple,
)
from bionemo_wds.format import Manifest, read_manifest

SEQ_LENGTH = 1024  # tokens per sample: BOS + bases + EOS, padded
BATCH = 8
WORKERS = 2
SEED = 42


def prepare(out: Path) -> Manifest:
    """`bionemo-wds prepare` the bundled genome into `out`; returns its manifest."""
    genome = files("bionemo_wds") / "data" / "klebsiella_fragmented_assembly.fa.gz"
    # the same as: bionemo-wds prepare GENOME --out OUT --seq-length 1024 --stride 1000 --samples-per-shard 250
    command = [
        *(sys.executable, "-m", "bionemo_wds.cli", "prepare", str(genome), "--out", str(out)),
        *("--seq-length", str(SEQ_LENGTH), "--stride", "1000"),
        # webdataset gives each loader worker whole shards: at least WORKERS shards per split
        *("--samples-per-shard", "250", "--quiet"),
    ]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    return read_manifest(out)


def data_module(root: Path, manifest: Manifest) -> WebDataModule:
    """bionemo's first-release `WebDataModule` signature; the pipelines are lists of stages."""
    splits = (Split.train, Split.val)
    windows = {split: manifest.splits[split.name].n_samples for split in splits}
    # compact uint8 batches cross from the loader workers; the main process expands them into the
    # model's int64 tokens, labels and loss_mask (8x larger: they never cross a process boundary)
    expand = wds.map(partial(to_model_inputs, seq_length=SEQ_LENGTH))
    return WebDataModule(
        dirs_tars_wds={split: str(root / split.name) for split in splits},
        n_samples=windows,  # the pseudo-epoch: ceil(n_samples / global_batch_size) batches
        suffix_keys_wds="msgpack",  # each tar member is a record of windows
        global_batch_size=BATCH,
        pipeline_wds={
            # In the loader workers. A stage takes the iterator of samples and returns the next
            # ones: plain functions such as `untuple` go in uncalled, webdataset-style filters are
            # called with their arguments (`shuffle(bufsize=500)`, `wds.shuffle(500)`;
            # `partial(shuffle, bufsize=500)` means the same here).
            Split.train: [
                untuple,  # (record,) -> record
                decode_sample(),  # a record -> its windows
                shuffle(bufsize=500, seed=SEED),
                reverse_complement(p=0.5, seed=SEED),  # half the windows on the other strand
                batch(BATCH),  # windows -> a compact batch (uint8 bases, lengths, keys, ...)
            ],
            Split.val: [untuple, decode_sample(), batch(BATCH)],  # in stored order, as stored
        },
        pipeline_prebatch_wld={split: [expand] for split in splits},  # on the loader, in the main process
        kwargs_wld={split: {"num_workers": WORKERS} for split in splits},
    )


class BigramLM(L.LightningModule):
    """The smallest model that learns something: the next token from the current one."""

    def __init__(self, vocab_size: int = 256, width: int = 32):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab_size, width)
        self.out = torch.nn.Linear(width, vocab_size)

    def loss(self, batch: dict) -> torch.Tensor:
        logits = self.out(self.embed(batch["tokens"]))
        losses = torch.nn.functional.cross_entropy(logits.transpose(1, 2), batch["labels"], reduction="none")
        mask = batch["loss_mask"]  # 1 where the label is a base, 0 for BOS/EOS/padding
        return (losses * mask).sum() / mask.sum()

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("train_loss", loss, batch_size=BATCH)
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.log("val_loss", self.loss(batch), batch_size=BATCH)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.02)


def main() -> None:
    L.seed_everything(SEED, verbose=False)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "klebsiella"
        manifest = prepare(root)
        dm = data_module(root, manifest)

        # 1. one pass over the validation pseudo-epoch, read by two loader workers
        dm.setup("validate")
        batches = list(dm.val_dataloader())
        tokens, n_val = batches[0]["tokens"], manifest.splits["val"].n_samples
        inputs = sorted(k for k in batches[0] if not k.startswith("__"))
        shape = tuple(tokens.shape)
        print(f"val: {len(batches)} batches of {n_val} windows, tokens {shape} {tokens.dtype}, keys {inputs}")

        # 2. a short fit: 30 training batches, then the validation loss on 8 batches
        model = BigramLM()
        trainer = L.Trainer(
            max_epochs=1,
            limit_train_batches=30,
            limit_val_batches=8,
            accelerator="cpu",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(model, datamodule=dm)
        val_loss = float(trainer.callback_metrics["val_loss"])
        print(f"fit: {trainer.global_step} steps, val_loss {val_loss:.3f} (uniform guess: {math.log(256):.3f})")


if __name__ == "__main__":
    main()
