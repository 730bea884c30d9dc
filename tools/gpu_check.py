"""The GPU side of the loader, measured: host-to-device copies of compact batches (pinned or not) and
a real masked-LM model trained by a Lightning Trainer from our data module, masks drawn on the GPU
or in the loader workers.

Prepares the bundled Klebsiella assembly (5.4 Mbp, 119 contigs) once into a scratch folder, then:

1. transfer: the train loader's compact batches moved to the device, with ``pin_memory`` off and on
   (each copy waited for): compact MB/s and batches/s, against the loader alone;
2. train: a `transformers` ``BertForMaskedLM`` (a config of `--hidden`/`--layers`, no download) in
   ``Trainer.fit`` on Caduceus's character ids, ``objective="mlm"``, ``mlm_draws`` "device" and
   "workers": training tokens/s over the steps after the first `--warmup`, and the loss falling.

CI has no GPU; the suite runs this on the CPU with a tiny model (``--device cpu``) so it keeps working.

    python tools/gpu_check.py                      # on a machine with CUDA
    python tools/gpu_check.py --device cpu --steps 4 --micro-batch-size 2 --seq-length 128
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bionemo_wds import GenomicWebDataModule
from bionemo_wds.prepare import PrepareOptions, prepare

GENOME = Path(__file__).resolve().parents[1] / "bionemo_wds" / "data" / "klebsiella_fragmented_assembly.fa.gz"


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def transfer(root: Path, args: argparse.Namespace) -> None:
    """Compact batches to the device, pinned and not: MB/s of the copies, batches/s with them."""
    for pin in (False, True) if args.device.startswith("cuda") else (False,):  # pinning needs CUDA
        dm = GenomicWebDataModule(
            str(root), micro_batch_size=args.micro_batch_size, num_workers=args.workers, pin_memory=pin, seed=1
        )
        dm.setup("fit")
        loader = dm.train_dataloader()
        n = moved = 0
        copy_s = 0.0
        start = time.perf_counter()
        for compact in loader:
            t = time.perf_counter()
            for value in compact.values():
                if isinstance(value, torch.Tensor):
                    value.to(args.device, non_blocking=True)
                    moved += value.numel() * value.element_size()
            sync(args.device)
            copy_s += time.perf_counter() - t
            n += 1
            if n == args.batches:
                break
        total = time.perf_counter() - start
        print(
            f"transfer pin_memory={pin!s:5} {n} batches: {n / total:8.1f} batches/s with the copies, "
            f"copies {moved / max(copy_s, 1e-9) / 1e6:8.1f} MB/s ({moved / max(n, 1) / 1e3:.0f} kB a batch, "
            f"{copy_s / max(n, 1) * 1e6:.0f} us each)"
        )


class MaskedLM(L.LightningModule):
    """A small ``BertForMaskedLM`` (built from a config) that records its losses and step times."""

    def __init__(self, vocab_size: int, pad_id: int, hidden: int, layers: int, seq_length: int):
        super().__init__()
        from transformers import BertConfig, BertForMaskedLM

        config = BertConfig(
            vocab_size=vocab_size,
            hidden_size=hidden,
            num_hidden_layers=layers,
            num_attention_heads=max(1, hidden // 64),
            intermediate_size=4 * hidden,
            max_position_embeddings=seq_length + 8,
            pad_token_id=pad_id,
        )
        self.model = BertForMaskedLM(config)
        self.losses: list[float] = []
        self.stamps: list[float] = []
        self.tokens = 0

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = self.model(**batch).loss
        self.losses.append(float(loss.detach()))  # waits for the step: the times below are real
        self.stamps.append(time.perf_counter())
        self.tokens = int(batch["input_ids"].numel())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def train(root: Path, args: argparse.Namespace) -> None:
    """``Trainer.fit`` of the masked-LM model with masks drawn on the device and in the workers."""
    accelerator = "gpu" if args.device.startswith("cuda") else "cpu"
    for draws in ("device", "workers"):
        torch.manual_seed(0)
        dm = GenomicWebDataModule(
            str(root),
            micro_batch_size=args.micro_batch_size,
            num_workers=args.workers,
            pin_memory=accelerator == "gpu",
            seed=1,
            batch_format="hf",
            objective="mlm",
            tokenizer="caduceus",
            control_tags=False,
            mlm_draws=draws,
        )
        model = MaskedLM(12, 4, args.hidden, args.layers, args.seq_length)
        trainer = L.Trainer(
            accelerator=accelerator,
            devices=1,
            max_steps=args.steps,
            precision="bf16-mixed" if accelerator == "gpu" else "32-true",
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        )
        trainer.fit(model, dm)
        warm = min(args.warmup, len(model.stamps) - 2)
        span = model.stamps[-1] - model.stamps[warm]
        steps = len(model.stamps) - 1 - warm
        head, tail = model.losses[: max(1, len(model.losses) // 5)], model.losses[-max(1, len(model.losses) // 5) :]
        print(
            f"train mlm_draws={draws:8} {len(model.losses)} steps: {steps / span:7.2f} steps/s, "
            f"{steps * model.tokens / span / 1e6:7.3f} M tokens/s; loss {sum(head) / len(head):.3f} -> "
            f"{sum(tail) / len(tail):.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", help="torch device")
    parser.add_argument("--seq-length", type=int, default=1024, help="tokens per sample (default 1024)")
    parser.add_argument("--micro-batch-size", type=int, default=64, help="samples per batch (default 64)")
    parser.add_argument("--workers", type=int, default=4, help="loader worker processes (default 4)")
    parser.add_argument("--steps", type=int, default=200, help="training steps per run (default 200)")
    parser.add_argument("--batches", type=int, default=300, help="batches of each transfer pass (default 300)")
    parser.add_argument("--warmup", type=int, default=20, help="first steps left out of the rate (default 20)")
    parser.add_argument("--hidden", type=int, default=512, help="the model's hidden size (default 512)")
    parser.add_argument("--layers", type=int, default=4, help="the model's layers (default 4)")
    parser.add_argument("--workdir", help="scratch folder for the prepared genome (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(args.workdir or tmp) / f"klebsiella_{args.seq_length}"
        if not (root / "manifest.json").exists():
            prepare([GENOME], root, PrepareOptions(seq_length=args.seq_length, split=(1, 0, 0), progress=False))
        print(f"device {args.device} ({torch.cuda.get_device_name() if args.device.startswith('cuda') else 'cpu'})")
        transfer(root, args)
        train(root, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
