"""From files shaped as OpenGenome2 ships them to a training step, on the bundled genomes.

python examples/from_the_hub.py OUT_DIR

Writes, below OUT_DIR, the two trees of OpenGenome2 in small: ``json/`` (gzip JSON lines files named
``data_metagenomics_<split>_chunk<N>.jsonl.gz``, the sequence in ``text`` after an Evo2 lineage tag,
some files with a ``record`` field and some without) and ``fasta/`` (a gzip FASTA cut into parts
``.aa``, ``.ab``, ... and a tar of FASTA files). Prepares the ``json/`` tree with the splits its
file names give, and the ``fasta/`` tree as it is (parts and archive read in place); then reads a batch and
trains the tiny model a few steps on the JSON lines dataset.
"""

import gzip
import json
import sys
import tarfile
from pathlib import Path

import lightning as L

import bionemo_wds
from bionemo_wds import GenomicWebDataModule
from bionemo_wds.cli.main import main as bionemo_wds_cli
from bionemo_wds.format import read_manifest
from bionemo_wds.models.tiny_lm import TinyDNALM

out = Path(sys.argv[1] if len(sys.argv) > 1 else "hub_example")
data = Path(bionemo_wds.__file__).parent / "data"
TAG = (  # Evo2's lineage tag, as OpenGenome2's texts start
    "|d__Bacteria;p__Pseudomonadota;c__Gammaproteobacteria;o__Enterobacterales;"
    "f__Enterobacteriaceae;g__Klebsiella;s__Klebsiella pneumoniae|"
)


def read_fasta(path: Path) -> dict[str, str]:
    seqs: dict[str, list[str]] = {}
    for line in gzip.open(path, "rt"):
        if line.startswith(">"):
            seqs[line[1:].split()[0]] = parts = []
        else:
            parts.append(line.strip())
    return {name: "".join(parts) for name, parts in seqs.items()}


# the Klebsiella assembly's 119 contigs, each cut to 10 kb at most: a corpus of about 1 Mbp, seconds to prepare
contigs = [(name, seq[:10_000]) for name, seq in read_fasta(data / "klebsiella_fragmented_assembly.fa.gz").items()]

# --- json/: one record per line, the split in the file name, the lineage tag inside the text ----
json_dir = out / "json" / "pretraining_or_both_phases" / "metagenomes"
json_dir.mkdir(parents=True, exist_ok=True)
for split, chunk, records in [
    ("train", 1, contigs[:50]),
    ("train", 2, contigs[50:90]),
    ("valid", 1, contigs[90:105]),
    ("test", 1, contigs[105:]),
]:
    lines = [
        json.dumps({"record": name, "text": TAG + seq} if chunk == 1 else {"text": TAG + seq}) for name, seq in records
    ]
    with gzip.open(json_dir / f"data_metagenomics_{split}_chunk{chunk}.jsonl.gz", "wt") as fh:
        fh.write("\n".join(lines) + "\n")

# --- fasta/: a gzip FASTA in parts of 64 kB, and a tar of FASTA files -----------------------------
fasta_dir = out / "fasta"
(fasta_dir / "gtdb_v220").mkdir(parents=True, exist_ok=True)
packed = gzip.compress("".join(f">{name}\n{seq}\n" for name, seq in contigs[:60]).encode())
for i in range(0, len(packed), 65536):
    (fasta_dir / f"windows_5kb.fasta.gz.a{chr(ord('a') + i // 65536)}").write_bytes(packed[i : i + 65536])
with tarfile.open(fasta_dir / "gtdb_v220" / "batch1.tar", "w") as tar:
    tar.add(data / "lambda_phage_NC_001416.fa.gz", arcname="lambda.fa.gz")

# --- prepare the json/ tree: bionemo-wds prepare --source jsonl --split-from-names ----------------
dataset = out / "og2-json"
argv = ["prepare", "--source", "jsonl", "--split-from-names", str(out / "json"), "--out", str(dataset)]
assert bionemo_wds_cli([*argv, "--seq-length", "1024", "--quiet"]) == 0

# --- the fasta/ tree as it is: the split gzip parts read as one stream, the tar's members in place --
argv = ["prepare", str(fasta_dir), "--out", str(out / "og2-fasta")]
assert bionemo_wds_cli([*argv, "--seq-length", "1024", "--quiet"]) == 0

# --- what a batch holds, then a few training steps -----------------------------------------------
dm = GenomicWebDataModule(str(dataset), micro_batch_size=4, seed=1)
dm.setup("fit")
batch = dm.model_inputs(next(iter(dm.train_dataloader())))
splits = read_manifest(str(dataset)).splits
print("windows per split:", {name: info.n_samples for name, info in splits.items()})
print("a sample's key:", batch["keys"][0])
print("tokens", tuple(batch["tokens"].shape), "labels", tuple(batch["labels"].shape))

model = TinyDNALM(d_model=32, n_layers=1, n_heads=2, max_len=1024)
trainer = L.Trainer(
    max_steps=5, limit_val_batches=2, logger=False, enable_checkpointing=False, enable_progress_bar=False
)
trainer.fit(model, datamodule=dm)
print(f"trained 5 steps: train_loss {float(trainer.callback_metrics['train_loss']):.2f}")
