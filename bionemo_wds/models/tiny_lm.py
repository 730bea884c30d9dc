"""A tiny causal DNA language model: enough to show the data path trains, small enough for a CPU.

Byte-level vocabulary (256), learned positions, a few pre-norm transformer blocks with causal
attention, loss averaged over ``loss_mask`` (bases only). Takes the batches `to_model_inputs`
makes: ``tokens``, ``labels``, ``loss_mask``, ``position_ids``.
"""

from __future__ import annotations

import time
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn


class TinyDNALM(L.LightningModule):
    def __init__(
        self,
        d_model: int = 192,
        n_layers: int = 4,
        n_heads: int = 4,
        max_len: int = 8192,
        lr: float = 2e-3,
        warmup_steps: int = 20,
        vocab_size: int = 256,
        dropout: float = 0.0,
    ):
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(
            d_model, n_heads, 4 * d_model, dropout, batch_first=True, norm_first=True, activation="gelu"
        )
        self.blocks = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.embed.weight  # tied
        nn.init.normal_(self.embed.weight, std=0.02)  # default N(0, 1) makes tied logits huge at step 0
        nn.init.normal_(self.pos.weight, std=0.02)

    def forward(self, tokens: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.pos(position_ids)
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        return self.head(self.norm(self.blocks(x, mask=mask, is_causal=True)))

    def _loss(self, batch: dict[str, Any]) -> torch.Tensor:
        logits = self(batch["tokens"], batch["position_ids"])
        per_token = F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten(), reduction="none")
        mask = batch["loss_mask"].flatten()
        return (per_token * mask).sum() / mask.sum().clamp(min=1)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train_loss", loss, prog_bar=True, batch_size=batch["tokens"].shape[0])
        return loss

    def validation_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("val_loss", loss, prog_bar=True, batch_size=batch["tokens"].shape[0])
        return loss

    def test_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("test_loss", loss, batch_size=batch["tokens"].shape[0])
        return loss

    def predict_step(self, batch: dict[str, Any], batch_idx: int) -> dict[str, Any]:
        logits = self(batch["tokens"], batch["position_ids"])
        return {"keys": batch.get("keys"), "next_token": logits.argmax(-1)}

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams["lr"], weight_decay=0.01)
        warm = max(1, self.hparams["warmup_steps"])
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / warm))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class Throughput(L.Callback):
    """Logs training samples/s and tokens/s (wall clock from the end of the first step, so worker
    start-up is excluded); prints a progress line every `print_every_n_steps` (0: only the summary)."""

    def __init__(self, log_every_n_steps: int = 10, print_every_n_steps: int = 0):
        self.every = log_every_n_steps
        self.print_every = print_every_n_steps
        self.samples = self.tokens = 0
        self.start: float | None = None
        self.first_loss: float | None = None
        self.last_loss: float | None = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.start is None:
            self.start = time.perf_counter()  # excludes worker start-up and the first step's warm-up
            return
        self.samples += batch["tokens"].shape[0]
        self.tokens += batch["tokens"].numel()
        loss = float(outputs["loss"]) if isinstance(outputs, dict) else float(outputs)
        self.first_loss = loss if self.first_loss is None else self.first_loss
        self.last_loss = loss
        elapsed = time.perf_counter() - self.start
        if trainer.global_step % self.every == 0:
            pl_module.log_dict({"samples_per_s": self.samples / elapsed, "tokens_per_s": self.tokens / elapsed})
        if self.print_every and trainer.global_step % self.print_every == 0:
            print(
                f"step {trainer.global_step:5d}  train loss {loss:.3f}  {self.samples / elapsed:.1f} samples/s  "
                f"{self.tokens / elapsed:,.0f} tokens/s",
                flush=True,
            )

    def on_train_end(self, trainer, pl_module):
        if not self.start or not self.samples:
            return
        elapsed = time.perf_counter() - self.start
        print(
            f"throughput: {self.samples / elapsed:.1f} samples/s, {self.tokens / elapsed:,.0f} tokens/s "
            f"over {self.samples} samples; train loss {self.first_loss:.3f} -> {self.last_loss:.3f}"
        )
        if trainer.logger is not None and getattr(trainer.logger, "log_dir", None):
            print(f"logs: {trainer.logger.log_dir}")
