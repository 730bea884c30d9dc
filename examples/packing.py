"""Any context length from one prepare, and every token real: windows cut at load, and packing.

python examples/packing.py OUT_DIR

Prepares the bundled Klebsiella assembly (119 contigs, many shorter than a window) once with
``--layout sequences``, then reads the same shards as windows of three lengths cut at load and as
packed samples, printing the padding share of each; then trains the tiny model a few steps on
packed batches, its attention kept within each document.
"""

import subprocess
import sys
from pathlib import Path

import lightning as L
import torch
from torch.utils.data import DataLoader

import bionemo_wds
from bionemo_wds import GenomicDataset
from bionemo_wds.core.tokenizer import PAD_ID
from bionemo_wds.load.batch.packed import flat_cu_seqlens
from bionemo_wds.models.tiny_lm import TinyDNALM

out = Path(sys.argv[1] if len(sys.argv) > 1 else "packing_out")
fasta = Path(bionemo_wds.__file__).parent / "data" / "klebsiella_fragmented_assembly.fa.gz"
if not (out / "manifest.json").exists():
    prepare = [sys.executable, "-m", "bionemo_wds.cli", "prepare", str(fasta), "--out", str(out)]
    subprocess.run([*prepare, "--layout", "sequences", "--seq-length", "8192", "--quiet"], check=True)


def padding(ds: GenomicDataset) -> tuple[int, float]:
    """Samples of one pass, and the share of their token slots that are padding."""
    samples = pad = slots = 0
    for batch in DataLoader(ds, batch_size=None):
        samples += len(batch["tokens"])
        pad += int((batch["tokens"] == PAD_ID).sum())
        slots += batch["tokens"].numel()
    return samples, pad / slots


# one set of shards, any context length: windows of seq_length tokens cut when the data is read
for seq_length in (1024, 8192, 65536):
    windows = GenomicDataset(str(out), "train", micro_batch_size=4, seq_length=seq_length, stride=seq_length - 3)
    n, share = padding(windows)
    print(f"windows of {seq_length:>6} tokens: {n:>5} samples, {share:6.1%} padding")

# packing: short contigs and the tails of long ones share samples, each its own document
packed = GenomicDataset(str(out), "train", micro_batch_size=4, seq_length=8192, pack=True)
n, share = padding(packed)
print(f"packed, 8192 tokens:      {n:>5} samples, {share:6.1%} padding")

batch = next(iter(DataLoader(packed, batch_size=None)))
print("documents in the first sample (tokens each):", batch["seq_lens"][0][batch["seq_lens"][0] > 0].tolist())
print("position_ids restart per document:", batch["position_ids"][0][batch["cu_seqlens"][0][1:3] - 1].tolist())
cu_seqlens, longest = flat_cu_seqlens(batch)  # what flash_attn_varlen_func / Transformer Engine's THD take
print(f"flattened cu_seqlens: {len(cu_seqlens) - 1} segments, the longest {longest} tokens")

# a few steps of the tiny model: on packed batches it masks attention to each document
small = GenomicDataset(str(out), "train", micro_batch_size=2, seq_length=512, pack=True)
model = TinyDNALM(d_model=32, n_layers=1, n_heads=2, max_len=512)
trainer = L.Trainer(max_steps=5, logger=False, enable_checkpointing=False, enable_progress_bar=False)
trainer.fit(model, DataLoader(small, batch_size=None))
print(f"trained 5 steps on packed batches: train_loss {float(trainer.callback_metrics['train_loss']):.2f}")
assert torch.isfinite(trainer.callback_metrics["train_loss"])
