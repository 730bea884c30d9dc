"""Honest evaluation: a near-identical sequence on both sides of a split, found, then kept on one side.

python examples/honest_split.py OUT_DIR

Two inputs: the bundled Klebsiella assembly (119 contigs), and a second "isolate" holding the lambda
phage genome and a plasmid-like sequence: a copy of most (the middle 80%) of one Klebsiella contig
with 1% of its bases substituted (seeded). A split by sequence (the default) puts the copy and its original on different
sides for about a third of the seeds (`SEED` is one); `leakage` reports it and `contains` names where each lies.
``--group-by similarity:0.95`` keeps them together, whatever the seed, and the planted pair leaks no more.
"""

import gzip
import subprocess
import sys
from pathlib import Path

import numpy as np

import bionemo_wds
from bionemo_wds.homology.leakage import leakage
from bionemo_wds.homology.membership import contains

out = Path(sys.argv[1] if len(sys.argv) > 1 else "honest_split_out")
out.mkdir(parents=True, exist_ok=True)
data = Path(bionemo_wds.__file__).parent / "data"
klebsiella = data / "klebsiella_fragmented_assembly.fa.gz"
#: The split's seed: one whose split by sequence puts the planted copy and its original apart.
SEED = "30"


def read_fasta(path: Path) -> dict[str, str]:
    seqs: dict[str, list[str]] = {}
    with gzip.open(path, "rt") as f:
        for line in f:
            if line.startswith(">"):
                name = line[1:].split()[0]
                seqs[name] = []
            else:
                seqs[name].append(line.strip())
    return {name: "".join(parts) for name, parts in seqs.items()}


# the second isolate: lambda, and a 1%-substituted copy of the middle of the 6th longest Klebsiella contig
contigs = read_fasta(klebsiella)
original = sorted(contigs, key=lambda n: -len(contigs[n]))[5]
middle = contigs[original][len(contigs[original]) // 10 : -(len(contigs[original]) // 10)]
bases = np.frombuffer(middle.encode(), dtype=np.uint8).copy()
rng = np.random.default_rng(7)
where = rng.choice(len(bases), len(bases) // 100, replace=False)
acgt = np.frombuffer(b"ACGT", dtype=np.uint8)
bases[where] = acgt[(np.searchsorted(acgt, bases[where]) + rng.integers(1, 4, len(where))) % 4]
isolate = out / "isolate_b.fa"
plasmid = out / "plasmid.fa"
plasmid.write_text(f">plasmid_b\n{bases.tobytes().decode()}\n")
(lam,) = read_fasta(data / "lambda_phage_NC_001416.fa.gz").values()
isolate.write_text(f">lambda_b\n{lam}\n>plasmid_b\n{bases.tobytes().decode()}\n")


def prepare(name: str, *options: str) -> Path:
    target = out / name
    argv = [sys.executable, "-m", "bionemo_wds.cli", "prepare", str(klebsiella), str(isolate), "--out", str(target)]
    argv += ["--seq-length", "1024", "--seed", SEED, "--quiet", *options]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return target


def planted_pair(dataset: Path) -> None:
    """Where the copy and its original are, and whether the pair leaks."""
    (answer,) = contains(str(dataset), [str(plasmid)])
    for split in answer.splits:
        names = ", ".join(f"{h.seq_id} ({h.identity:.3f})" for h in split.hits) or "-"
        print(f"  {split.split:5}: {names}")
    report = leakage(str(dataset))
    for leak in report.leaks:
        pair = [e for e in leak.examples if "plasmid_b" in (e[0], e[1])]
        if pair:
            print(f"  leak {leak.source} -> {leak.target}: {pair[0][0]} ~ {pair[0][1]} at {pair[0][2]:.3f}")
    total = sum(leak.leaked_sequences for leak in report.leaks)
    print(f"  all leaks at >= {report.min_identity}: {total} sequence(s) over {len(report.leaks)} split pairs")


print(f"planted: plasmid_b = the middle {len(bases):,} bases of {original}, 1% substituted")
print("split by sequence:")
planted_pair(prepare("by_sequence"))
print("split by similarity (--group-by similarity:0.95):")
planted_pair(prepare("by_similarity", "--group-by", "similarity:0.95"))
