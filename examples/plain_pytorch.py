"""Batches without Lightning: GenomicDataset through a plain DataLoader, stopped and resumed exactly.

python examples/plain_pytorch.py data/
"""

import sys

from torch.utils.data import DataLoader

from bionemo_wds import GenomicDataset

dataset = sys.argv[1] if len(sys.argv) > 1 else "data/"


def keys_of(ds: GenomicDataset, workers: int, n: int | None = None) -> list[list[str]]:
    """The window keys of the pass's batches (the first `n` only, when given)."""
    out = []
    for batch in DataLoader(ds, batch_size=None, num_workers=workers):  # batch_size=None: ds makes batches
        out.append(list(batch["keys"]))  # also: tokens, labels, loss_mask, position_ids
        if len(out) == n:
            break
    return out


ds = GenomicDataset(dataset, "train", micro_batch_size=8, seed=7)
ds.set_epoch(1)
whole = keys_of(ds, workers=2)
print(f"epoch 1: {len(whole)} batches (len(ds) = {len(ds)})")

# stop after 5 batches: a DataLoader does not tell the dataset what was taken, so say how many
keys_of(ds, workers=2, n=5)
state = ds.state_dict(batches=5)

# a new process (here: a new dataset) with another number of workers goes on with batch 6
resumed = GenomicDataset(dataset, "train", micro_batch_size=8, seed=7)
resumed.load_state_dict(state)
assert keys_of(resumed, workers=0) == whole[5:], "the rest of the epoch, exactly"
print(f"resumed exactly: the other {len(whole) - 5} batches of epoch 1, with 0 workers instead of 2")
