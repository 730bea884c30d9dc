"""Mix prepared datasets with exact quotas (an Evo2-style blend).

    bionemo-wds prepare bionemo_wds/data/lambda_phage_NC_001416.fa.gz --out lambda/ \
        --seq-length 512 --split 1,0,0
    python examples/mixing.py data/ lambda/
"""

import sys

from bionemo_wds import GenomicWebDataModule

first, second = sys.argv[1:3] if len(sys.argv) > 2 else ("data/", "lambda/")

dm = GenomicWebDataModule(
    datasets=[{"path": first, "weight": 0.7}, {"path": second, "weight": 0.3}],
    micro_batch_size=8,
    samples_per_epoch=800,  # default: the sum of the datasets' train windows
    seed=42,
)
dm.setup("fit")
rows = {0: 0, 1: 0}
for batch in dm.train_dataloader():
    for source in batch["dataset"].tolist():  # each row's source: 0 or 1
        rows[source] += 1
print("rows per source:", rows)
print("windows per dataset in epoch 0:", dm.source_counts[0])  # exactly 560 and 240
