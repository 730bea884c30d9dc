"""A tiny causal DNA language model: enough to show the data path trains, small enough for a CPU.

Byte-level vocabulary (256), learned positions, a few pre-norm transformer blocks with causal
attention, loss averaged over ``loss_mask`` (bases only). Takes the batches `to_model_inputs`
makes: ``tokens``, ``labels``, ``loss_mask``, ``position_ids``; a packed batch (``pack=True``: several
documents per sample, ``seq_lens`` present) is attended document by document. A batch of the ``hf``
format (``batch_format="hf"``) is read as the same (`megatron_view`).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn

from bionemo_wds.errors import OptionError
from bionemo_wds.load.batch.hf import IGNORE_INDEX
from bionemo_wds.load.batch.packed import document_mask


def megatron_view(batch: dict[str, Any]) -> dict[str, Any]:
    """A batch of either format as ``tokens``, shifted ``labels``, ``loss_mask``, ``position_ids``
    (and, packed, its document boundaries: `holds_documents`). An ``hf`` batch's labels are not shifted and
    -100 where nothing is trained: shifted back, the -100 become the mask."""
    if "input_ids" not in batch:
        return batch
    labels = torch.full_like(batch["labels"], IGNORE_INDEX)
    labels[:, :-1] = batch["labels"][:, 1:]
    trained = labels != IGNORE_INDEX
    out = {
        "tokens": batch["input_ids"],
        "labels": labels.clamp(min=0),
        "loss_mask": trained.float(),
        "position_ids": batch["position_ids"],
    }
    if "cu_seq_lens_q" in batch:
        out["cu_seq_lens_q"] = batch["cu_seq_lens_q"]
    return out


def holds_documents(batch: dict[str, Any]) -> bool:
    """Whether a batch of either format holds packed samples (document boundaries present)."""
    return "seq_lens" in batch or "cu_seq_lens_q" in batch


class TinyDNALM(L.LightningModule):
    """A small causal transformer over byte-level DNA tokens (the default model of `bionemo-wds fit`).

    Args:
        d_model: width of the embeddings and of every transformer block.
        n_layers: number of transformer blocks.
        n_heads: attention heads per block; must divide ``d_model``.
        max_len: longest sample the model takes (learned positions 0 .. max_len-1). Under
            `bionemo-wds fit` it follows ``data.seq_length`` (the shards' when that is not given).
        lr: peak learning rate of AdamW (weight decay 0.01).
        warmup_steps: steps of linear learning-rate warm-up from ``lr / warmup_steps`` to ``lr``.
        vocab_size: number of token ids (256: one per byte, as `bionemo_wds.core.tokenizer` makes them).
        dropout: dropout probability inside the transformer blocks (0: none).
    """

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
        if d_model % n_heads:
            raise OptionError(f"d_model ({d_model}) must be a multiple of n_heads ({n_heads})")
        if max_len < 1:
            raise OptionError(f"max_len must be at least 1, got {max_len}")
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

    def forward(self, tokens: torch.Tensor, position_ids: torch.Tensor, packed: bool = False) -> torch.Tensor:
        """Logits of every position. `packed`: the samples hold several documents (``pack=True``), and
        a token attends only to the earlier tokens of its own document: the causal block-diagonal mask
        (`document_mask`) of the position ids, which restart at every document."""
        x = self.embed(tokens) + self.pos(position_ids)
        if packed:  # per sample and head: True where attention is not allowed
            blocked = ~document_mask(position_ids)
            mask = blocked.repeat_interleave(self.hparams["n_heads"], dim=0)
            return self.head(self.norm(self.blocks(x, mask=mask)))
        mask = nn.Transformer.generate_square_subsequent_mask(tokens.shape[1], device=tokens.device)
        return self.head(self.norm(self.blocks(x, mask=mask, is_causal=True)))

    def _loss(self, batch: dict[str, Any]) -> torch.Tensor:
        batch = megatron_view(batch)
        logits = self(batch["tokens"], batch["position_ids"], holds_documents(batch))
        per_token = F.cross_entropy(logits.flatten(0, 1).float(), batch["labels"].flatten(), reduction="none")
        mask = batch["loss_mask"].flatten()
        return (per_token * mask).sum() / mask.sum().clamp(min=1)

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train_loss", loss, prog_bar=True, batch_size=len(batch["labels"]))
        return loss

    # dataloader_idx: a blend of datasets validates each in a loader of its own (Lightning logs
    # val_loss/dataloader_idx_N for each)
    def validation_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("val_loss", loss, prog_bar=True, batch_size=len(batch["labels"]))
        return loss

    def test_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("test_loss", loss, batch_size=len(batch["labels"]))
        return loss

    def predict_step(self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0) -> dict[str, Any]:
        batch = megatron_view(batch)
        logits = self(batch["tokens"], batch["position_ids"], holds_documents(batch))
        return {"keys": batch.get("keys"), "next_token": logits.argmax(-1)}

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams["lr"], weight_decay=0.01)
        warm = max(1, self.hparams["warmup_steps"])
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / warm))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class Throughput(L.Callback):
    """Training samples/s and tokens/s over a sliding window of the last `window` training steps.

    Only training counts: the clock stops while validation runs inside `fit`, and the first step
    (worker start-up, warm-up) only starts the clock. Logs ``samples_per_s`` and ``tokens_per_s``
    every `log_every_n_steps` steps, prints a line with the training loss every
    `print_every_n_steps` steps (0: only the summary at the end) on global rank 0.

    Args:
        log_every_n_steps: log the rates every this many training steps.
        print_every_n_steps: print step, training loss and rates every this many steps (0: never).
        window: number of most recent training steps the rates are measured over.
    """

    def __init__(self, log_every_n_steps: int = 10, print_every_n_steps: int = 0, window: int = 20):
        if window < 1:
            raise OptionError(f"window must be at least 1 step, got {window}")
        self.every = log_every_n_steps
        self.print_every = print_every_n_steps
        self.points: deque[tuple[float, int, int]] = deque(maxlen=window + 1)  # (train clock, samples, tokens)
        self.samples = self.tokens = 0
        self.paused = 0.0  # seconds of validation inside fit, taken off the clock
        self.pause_start: float | None = None
        self.first_loss: float | None = None
        self.last_loss: float | None = None

    def clock(self) -> float:
        """Seconds of training so far (wall clock minus validation)."""
        return time.perf_counter() - self.paused

    def rates(self) -> tuple[float, float] | None:
        """(samples/s, tokens/s) over the window; None before two steps are in it."""
        if len(self.points) < 2:
            return None
        (t0, s0, k0), (t1, s1, k1) = self.points[0], self.points[-1]
        elapsed = max(t1 - t0, 1e-9)
        return (s1 - s0) / elapsed, (k1 - k0) / elapsed

    def on_validation_start(self, trainer, pl_module):
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            self.pause_start = time.perf_counter()

    def on_validation_end(self, trainer, pl_module):
        if self.pause_start is not None:
            self.paused += time.perf_counter() - self.pause_start
            self.pause_start = None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        ids = batch["tokens"] if "tokens" in batch else batch["input_ids"]  # either batch format
        self.samples += ids.shape[0]
        self.tokens += ids.numel()
        self.points.append((self.clock(), self.samples, self.tokens))
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        if loss is not None:
            self.last_loss = float(loss)
            self.first_loss = self.last_loss if self.first_loss is None else self.first_loss
        rates = self.rates()
        if rates is None:
            return
        samples_per_s, tokens_per_s = rates
        if self.every and trainer.global_step % self.every == 0:
            pl_module.log_dict({"samples_per_s": samples_per_s, "tokens_per_s": tokens_per_s})
        if self.print_every and trainer.global_step % self.print_every == 0 and trainer.is_global_zero:
            shown = "n/a" if self.last_loss is None else f"{self.last_loss:.3f}"
            print(
                f"step {trainer.global_step:5d}  train loss {shown}  {samples_per_s:.1f} samples/s  "
                f"{tokens_per_s:,.0f} tokens/s (last {len(self.points) - 1} steps)",
                flush=True,
            )

    def on_train_end(self, trainer, pl_module):
        if len(self.points) < 2 or not trainer.is_global_zero:
            return
        samples_per_s, tokens_per_s = self.rates() or (0.0, 0.0)
        losses = "" if self.first_loss is None else f"; train loss {self.first_loss:.3f} -> {self.last_loss:.3f}"
        print(
            f"throughput: {samples_per_s:.1f} samples/s, {tokens_per_s:,.0f} tokens/s over the last "
            f"{len(self.points) - 1} training steps ({self.samples} samples in all){losses}"
        )
        if trainer.logger is not None and getattr(trainer.logger, "log_dir", None):
            print(f"logs: {trainer.logger.log_dir}")


class PrintValidation(L.Callback):
    """Prints the validation metrics (every logged ``val*`` value) after each validation inside `fit`
    and after `validate`, on global rank 0: with the progress bar off, the one place a run shows them.
    """

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking or not trainer.is_global_zero:
            return
        shown = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("val") and v.numel() == 1}
        if shown:
            values = "  ".join(f"{k.replace('_', ' ')} {v:.3f}" for k, v in sorted(shown.items()))
            print(f"step {trainer.global_step:5d}  {values}", flush=True)
