"""Train a Hugging Face `transformers` causal LM on prepared shards: `model(**batch)`, nothing else.

`batch_format="hf"` makes the batches a `transformers` model takes as they are: `input_ids`,
`attention_mask`, `labels` (not shifted: the model shifts them; -100 where nothing is trained) and
`position_ids`. The model is a small Llama built from a config (no weights downloaded).

    pip install -e '.[hf]'
    bionemo-wds prepare bionemo_wds/data/klebsiella_fragmented_assembly.fa.gz --out data/ --seq-length 512
    python examples/hf_model.py data/
"""

import sys

import lightning as L
import torch
from transformers import AutoModelForCausalLM, LlamaConfig

from bionemo_wds import GenomicWebDataModule
from bionemo_wds.core.tokenizer import BOS_ID, EOS_ID, PAD_ID


class HFCausalLM(L.LightningModule):
    """A Llama over the 256 byte-level ids (a base is its ASCII code; ids 0-4 are EOS PAD BOS SEP UNK)."""

    def __init__(self, hidden: int = 64, layers: int = 2, max_len: int = 512, lr: float = 3e-3):
        super().__init__()
        self.lr = lr
        config = LlamaConfig(
            vocab_size=256,
            hidden_size=hidden,
            intermediate_size=4 * hidden,
            num_hidden_layers=layers,
            num_attention_heads=4,
            max_position_embeddings=max_len,
            pad_token_id=PAD_ID,
            bos_token_id=BOS_ID,
            eos_token_id=EOS_ID,
        )
        self.model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss = self.model(**batch).loss  # the mean over every label that is not -100
        self.log("train_loss", loss, prog_bar=True, batch_size=len(batch["input_ids"]))
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.log("val_loss", self.model(**batch).loss, prog_bar=True, batch_size=len(batch["input_ids"]))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


if __name__ == "__main__":
    dataset = sys.argv[1] if len(sys.argv) > 1 else "data/"
    dm = GenomicWebDataModule(dataset, micro_batch_size=8, seed=42, batch_format="hf")
    trainer = L.Trainer(
        accelerator="cpu",
        max_steps=20,
        val_check_interval=10,
        limit_val_batches=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = HFCausalLM()
    trainer.fit(model, datamodule=dm)
    metrics = trainer.callback_metrics
    print(f"after 20 steps: train_loss {float(metrics['train_loss']):.3f}, val_loss {float(metrics['val_loss']):.3f}")
