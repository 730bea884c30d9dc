"""Train a model of your own on prepared shards: a few steps of `Trainer.fit` on the CPU.

Prepare first (from the repository root; `examples/getting_started.sh` does both):

    bionemo-wds prepare bionemo_wds/data/klebsiella_fragmented_assembly.fa.gz --out data/ --seq-length 512
    python examples/own_model.py data/
"""

import sys

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from bionemo_wds import GenomicWebDataModule

VOCAB_SIZE = 256  # byte-level tokens: a base is its ASCII code ("A" = 65); ids 0-4 are EOS PAD BOS SEP UNK


class MyDNAModel(L.LightningModule):
    """Any LightningModule works; this one embeds tokens, runs a GRU and predicts the next token."""

    def __init__(self, dim: int = 64, lr: float = 3e-3):
        super().__init__()
        self.lr = lr
        self.embed = nn.Embedding(VOCAB_SIZE, dim)
        self.rnn = nn.GRU(dim, dim, batch_first=True)
        self.head = nn.Linear(dim, VOCAB_SIZE)

    def loss(self, batch: dict) -> torch.Tensor:
        # batch["tokens"], batch["labels"]: int64 [micro_batch_size, seq_length] (labels = tokens shifted left)
        # batch["loss_mask"]: float32 [micro_batch_size, seq_length], 1 where the label is a base, else 0
        hidden, _ = self.rnn(self.embed(batch["tokens"]))
        logits = self.head(hidden)
        per_token = F.cross_entropy(logits.transpose(1, 2), batch["labels"], reduction="none")
        mask = batch["loss_mask"]
        return (per_token * mask).sum() / mask.sum().clamp(min=1)

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = self.loss(batch)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.log("val_loss", self.loss(batch), prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


if __name__ == "__main__":
    dataset = sys.argv[1] if len(sys.argv) > 1 else "data/"
    dm = GenomicWebDataModule(dataset, micro_batch_size=8, rc_prob=0.5, seed=42)
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=20,
        val_check_interval=10,
        limit_val_batches=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
    )
    trainer.fit(MyDNAModel(), datamodule=dm)
    print(
        f"after {trainer.global_step} steps: train_loss {float(trainer.callback_metrics['train_loss']):.3f}, "
        f"val_loss {float(trainer.callback_metrics['val_loss']):.3f}"
    )
