#!/usr/bin/env python
"""Shuffle quality of GenomicWebDataModule's epoch plan beside webdataset's default shuffle.

Usage: python tools/shuffle_quality.py DATASET   (a `bionemo-wds prepare` output with a train split)

Prints, for one training epoch (seed 1, batch 8): the mean distance in stored order between
consecutive windows (divided by the number of windows; uniform random order gives about 1/3),
the share of consecutive windows from the same shard, and the distinct shards per batch, for our
plan and for a shard shuffle followed by a 1000-sample buffer (webdataset's usual recipe).
"""

import random
import sys

import numpy as np

from bionemo_wds.format import iter_records, read_manifest
from bionemo_wds.lightning.datamodule import GenomicWebDataModule

if len(sys.argv) != 2:
    sys.exit(__doc__)
root = sys.argv[1]
m = read_manifest(root)
order = []
for sh in m.splits["train"].shards:
    with open(f"{root}/{sh.path}", "rb") as fh:
        for _, b in iter_records(fh):
            order += [f"{s}/{w}" for s, w in zip(b.seq_id, b.window.tolist())]
pos = {k: i for i, k in enumerate(order)}
n = len(order)


def score(keys):
    p = np.array([pos[k] for k in keys])
    return float(np.mean(np.abs(np.diff(p)))) / n


dm = GenomicWebDataModule(root, micro_batch_size=8, seed=1, rc_prob=0.0)
dm.setup("fit")
ours = [k for b in dm.train_dataloader() for k in b["keys"]]
# webdataset's defaults as bionemo users run them: shard shuffle, then a 1000-sample buffer
rng = random.Random(1)
shards = list(range(len(m.splits["train"].shards)))
rng.shuffle(shards)
per = [sh.n_samples for sh in m.splits["train"].shards]
starts = np.concatenate([[0], np.cumsum(per)])
stream = [order[i] for s in shards for i in range(starts[s], starts[s + 1])]
buf, out = [], []
for k in stream:
    buf.append(k)
    if len(buf) >= 1000:
        j = rng.randrange(len(buf))
        buf[j], buf[-1] = buf[-1], buf[j]
        out.append(buf.pop())
rng.shuffle(buf)
out += buf
print(
    f"{n} windows in {len(per)} shards; mean |step| / n: ours {score(ours):.3f}, "
    f"webdataset shard shuffle + 1000 buffer {score(out):.3f}, uniform random ~0.333"
)
shard_of = np.searchsorted(starts, np.arange(n), side="right") - 1


def same_shard(keys):
    s = shard_of[[pos[k] for k in keys]]
    return float(np.mean(s[1:] == s[:-1]))


def batch_shards(keys, m=8):
    s = shard_of[[pos[k] for k in keys]]
    return float(np.mean([len(set(s[i : i + m])) for i in range(0, len(s) - m + 1, m)]))


print(
    f"consecutive windows from the same shard: ours {same_shard(ours):.3f}, webdataset {same_shard(out):.3f} "
    f"(1/{len(per)} = {1 / len(per):.3f} at random); distinct shards per batch of 8: ours {batch_shards(ours):.2f}, "
    f"webdataset {batch_shards(out):.2f}"
)
