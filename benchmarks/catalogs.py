"""The benchmark's inputs by name: the synthetic genome and the metagenome-like catalog.

- ``genome``: `synthetic.write_genome`, a draft assembly's contig-length mix (32 Mbp by default);
  most of its bases are in contigs far longer than a window.
- ``metagenome``: `metagenome.write_metagenome`, log-normal contigs of median 3 kb (64 Mbp by
  default); most of them are shorter than an 8 kb window, so padding decides what a batch holds.

Each is written once into the work directory (seeded; reused when already there).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from benchmarks.metagenome import DEFAULT_MBP, write_metagenome
from benchmarks.synthetic import write_genome

#: Catalog name -> (writer(path, size_mbp, seed), default size in Mbp).
CATALOGS: dict[str, tuple[Callable[[Path, float, int], Path], float]] = {
    "genome": (write_genome, 32.0),
    "metagenome": (write_metagenome, DEFAULT_MBP),
}
CHOICES = (*CATALOGS, "both")


def catalog_names(choice: str) -> list[str]:
    """The catalogs a ``--catalog`` value stands for (``both``: every one, genome first)."""
    return list(CATALOGS) if choice == "both" else [choice]


def catalog_fasta(name: str, workdir: Path, size_mbp: float | None, seed: int) -> tuple[Path, int]:
    """Catalog `name` as a FASTA in `workdir` (written unless there already) and its number of
    bases; `size_mbp` None: the catalog's default size."""
    write, default = CATALOGS[name]
    size = default if size_mbp is None else size_mbp
    path = workdir / f"{name}_{size:g}mbp_seed{seed}.fa"
    if not path.exists():
        write(path, size, seed)
    return path, int(size * 1_000_000)
