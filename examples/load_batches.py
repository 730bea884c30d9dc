"""Read prepared shards without a Trainer: the data module's batches, and plain PyTorch.

python examples/load_batches.py data/
"""

import sys

from torch.utils.data import DataLoader

from bionemo_wds import GenomicDataset, GenomicWebDataModule

dataset = sys.argv[1] if len(sys.argv) > 1 else "data/"

# Lightning data module: loaders yield compact uint8 batches; the Trainer expands them on the device
# (on_after_batch_transfer). Iterating a loader yourself, expand them with dm.model_inputs.
dm = GenomicWebDataModule(dataset, micro_batch_size=4, rc_prob=0.5, seed=42)
dm.setup("fit")
compact = next(iter(dm.train_dataloader()))
batch = dm.model_inputs(compact)
for key, value in batch.items():
    shape = tuple(value.shape) if hasattr(value, "shape") else f"{len(value)} str"
    print(f"{key:12s} {getattr(value, 'dtype', type(value).__name__)!s:14s} {shape}")
print("first key:", batch["keys"][0], "start:", int(batch["start"][0]), "reverse-complemented:", bool(batch["rc"][0]))

# Plain PyTorch: the same epoch plan and batches under a bare DataLoader (batch_size=None: the
# dataset makes the batches), for any num_workers.
ds = GenomicDataset(dataset, "train", micro_batch_size=4, seed=42)
loader = DataLoader(ds, batch_size=None, num_workers=0)
ds.set_epoch(0)
first = next(iter(loader))
assert first["keys"] == batch["keys"], "the dataset and the data module yield the same batches"
print("GenomicDataset batches per epoch:", len(loader))
