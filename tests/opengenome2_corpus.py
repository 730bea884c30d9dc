"""Corpora shaped as OpenGenome2's ``json/`` tree and Evo 1's Parquet files, made from the bundled genomes.

`write_json_tree` writes ``data_metagenomics_<split>_chunk<N>.jsonl[.gz|.zst]`` files below a
directory: the Klebsiella contigs (each cut to `KLEB_BASES`) and the lambda genome in ~130 pieces
whose middle thirds are soft-masked (lower case), one record per line with the sequence in ``text``.
Files differ in schema (some records carry a ``record`` field, some a nested ``meta``, some neither),
most texts start with an Evo2 lineage tag, some repeat it inside (as ``preprocess_evo2`` does every
``prompt_spacer_length`` tokens), and one file holds a blank line. `write_parquet_files` writes the
same records as Parquet files with a ``text`` and an ``id`` column, in row groups of `ROW_GROUP` rows.

Both return what a prepared dataset must hold (`check_windows` checks it): per record id
(``<path below the root>:<line>``, ``<file name>:<row>`` for Parquet), its bases (tags taken out),
its control tag and its split.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from conftest import KLEBSIELLA, LAMBDA, LINEAGES, lambda_pieces, read_fasta, shard_windows

#: Bases kept of each Klebsiella contig (the corpus stays about 1 Mbp: fast tests).
KLEB_BASES = 12_000
#: Parquet rows per row group (several row groups, so several catalog tasks, per file).
ROW_GROUP = 40
#: Where a text repeats its tag (a few records only).
SPACER = 1500


@dataclass(frozen=True)
class Expected:
    """What the dataset must hold of one record."""

    bases: str
    tag: str
    split: str


def records() -> list[tuple[str, str, str, str, dict]]:
    """(split, file stem, bases, lineage tag or "") of every record, with its extra fields, in file order."""
    kleb = read_fasta(KLEBSIELLA)
    lam = next(iter(read_fasta(LAMBDA).values()))
    pieces, tags = lambda_pieces(lam)
    out = []
    for i, (name, seq) in enumerate(kleb.items()):
        split = "train" if i < 80 else "valid" if i < 100 else "test"
        tag = "" if i % 10 == 3 else LINEAGES[1]
        extra = {"record": name} if i < 100 else {"meta": {"contig": name, "n": i}}
        out.append((split, f"data_metagenomics_{split}_chunk1", seq[:KLEB_BASES], tag, extra))
    for name, seq in pieces.items():
        out.append(("train", "data_metagenomics_train_chunk2", seq, tags[name], {}))
    return out


def text_of(bases: str, tag: str, index: int) -> str:
    """The record's text: its tag first, and every fifth record the tag again every `SPACER` bases."""
    if not tag or index % 5:
        return tag + bases
    step = SPACER - len(tag)
    return "".join(tag + bases[i : i + step] for i in range(0, len(bases), step))


#: How each JSON lines file is written (by its stem): its suffix.
PACKING = {
    "data_metagenomics_train_chunk1": ".jsonl.gz",
    "data_metagenomics_train_chunk2": ".jsonl",
    "data_metagenomics_valid_chunk1": ".jsonl.zst",
    "data_metagenomics_test_chunk1": ".jsonl.gz",
}
#: The subdirectory each file lies in, below the root.
SUBDIR = "pretraining_or_both_phases/metagenomes"


def write_json_tree(root: Path) -> dict[str, Expected]:
    """The JSON lines files below `root` (module docstring); returns what each record must become."""
    import zstandard

    lines: dict[str, list[str]] = {}
    expected: dict[str, Expected] = {}
    for index, (split, stem, bases, tag, extra) in enumerate(records()):
        file_lines = lines.setdefault(stem, [])
        if stem.endswith("train_chunk2") and len(file_lines) == 7:
            file_lines.append("")  # a blank line keeps its number
        file_lines.append(json.dumps({**extra, "text": text_of(bases, tag, index)}))
        name = f"{SUBDIR}/{stem}{PACKING[stem]}:{len(file_lines)}"
        expected[name] = Expected(bases, tag, "val" if split == "valid" else split)
    folder = root / SUBDIR
    folder.mkdir(parents=True, exist_ok=True)
    for stem, file_lines in lines.items():
        data = ("\n".join(file_lines) + "\n").encode()
        path = folder / f"{stem}{PACKING[stem]}"
        if path.suffix == ".gz":
            path.write_bytes(gzip.compress(data))
        elif path.suffix == ".zst":  # two frames, as pzstd writes them
            half = len(data) // 2
            packer = zstandard.ZstdCompressor()
            path.write_bytes(packer.compress(data[:half]) + packer.compress(data[half:]))
        else:
            path.write_bytes(data)
    return expected


def write_parquet_files(root: Path) -> dict[str, Expected]:
    """The records as ``data_opengenome_<split>.parquet`` files in `root` (columns ``text`` and ``id``;
    the test file also has a ``source`` column); returns what each must become, by ``<file>:<row>``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows: dict[str, list[tuple[str, str]]] = {}
    expected: dict[str, Expected] = {}
    for index, (split, _, bases, tag, extra) in enumerate(records()):
        file = f"data_opengenome_{split}.parquet"
        found = rows.setdefault(file, [])
        record_id = extra.get("record") or extra.get("meta", {}).get("contig") or f"lambda-{index}"
        expected[f"{file}:{len(found)}"] = Expected(bases, tag, "val" if split == "valid" else split)
        found.append((text_of(bases, tag, index), record_id))
    root.mkdir(parents=True, exist_ok=True)
    for file, found in rows.items():
        columns = {"id": [r for _, r in found], "text": [t for t, _ in found]}
        if "test" in file:
            columns["source"] = ["metagenomics"] * len(found)
        pq.write_table(pa.table(columns), root / file, row_group_size=ROW_GROUP)
    return expected


def check_windows(out: Path, expected: dict[str, Expected]) -> None:
    """Every window is its record's bases at its start, with its tag, in its file's split; every
    base of every record is stored."""
    reach: dict[str, int] = {}
    for split, windows in shard_windows(out).items():
        for seq_id, start, _, bases, tag in windows:
            want = expected[seq_id]
            assert (split, tag) == (want.split, want.tag), seq_id
            assert bases.decode() == want.bases[start : start + len(bases)], (seq_id, start)
            reach[seq_id] = max(reach.get(seq_id, 0), start + len(bases))
    assert reach == {name: len(e.bases) for name, e in expected.items()}
