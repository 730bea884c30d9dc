"""Stop mid-epoch, save the loader's state, and resume exactly where it stopped.

python examples/resume.py data/
"""

import sys

from bionemo_wds import GenomicWebDataModule

dataset = sys.argv[1] if len(sys.argv) > 1 else "data/"


def keys_of(dm: GenomicWebDataModule, n: int) -> list[list[str]]:
    """The window keys of the next `n` training batches."""
    out = []
    for batch in dm.train_dataloader():
        out.append(list(batch["keys"]))
        if len(out) == n:
            break
    return out


# The uninterrupted run: the first 10 batches of epoch 0.
full = GenomicWebDataModule(dataset, micro_batch_size=8, seed=7)
full.setup("fit")
expected = keys_of(full, 10)

# A run that stops after 4 batches; its state_dict is what Lightning stores in every checkpoint.
first = GenomicWebDataModule(dataset, micro_batch_size=8, seed=7)
first.setup("fit")
keys_of(first, 4)
state = first.state_dict()
print("state:", state)  # seed, epoch, consumed: [[dp_size, micro_batch_size, batches]], ...


# A new process (here: a new module, with loader workers this time) continues with batch 5.
resumed = GenomicWebDataModule(dataset, micro_batch_size=8, seed=7, num_workers=2)
resumed.setup("fit")
resumed.load_state_dict(state)
assert keys_of(resumed, 6) == expected[4:], "resume gives exactly the batches the full run had next"
print("resumed exactly: batches 5-10 equal the uninterrupted run's")
