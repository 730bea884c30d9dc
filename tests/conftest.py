"""Shared fixtures: the bundled real genomes and small prepared datasets built from them."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "bionemo_wds" / "data"
LAMBDA = DATA / "lambda_phage_NC_001416.fa.gz"
KLEBSIELLA = DATA / "klebsiella_fragmented_assembly.fa.gz"


def read_fasta(path: Path) -> dict[str, str]:
    """Name -> sequence of a (gzip) FASTA, read the plain way, as the reference for tests."""
    opener = gzip.open if path.suffix == ".gz" else open
    seqs: dict[str, list[str]] = {}
    name = None
    with opener(path, "rt") as fh:
        for line in fh:
            line = line.rstrip("\r\n")
            if line.startswith(">"):
                name = line[1:].split()[0]
                seqs[name] = []
            elif name is not None:
                seqs[name].append(line)
    return {k: "".join(v) for k, v in seqs.items()}


@pytest.fixture(scope="session")
def klebsiella_seqs() -> dict[str, str]:
    return read_fasta(KLEBSIELLA)


@pytest.fixture(scope="session")
def lambda_seq() -> str:
    (seq,) = read_fasta(LAMBDA).values()
    return seq
