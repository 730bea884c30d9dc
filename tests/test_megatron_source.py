"""`prepare --source megatron`: Megatron indexed datasets (as preprocess_evo2 writes them) as input.

The inputs are written here with megatron-core's own `IndexedDatasetBuilder` from the bundled genomes,
the way bionemo's preprocess_evo2 writes them (uint8 byte-level ids, one document per record, EOD 0
after each; optionally an Evo2 lineage tag at the start and every `prompt_spacer_length` tokens,
and each record's reverse complement as the next document), then prepared and read back from the
shards: windows equal the FASTA, embedded tags become control tags, reverse-complement copies are
left out and counted. Bad input is one line and exit 2.
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import KLEBSIELLA, LAMBDA, LINEAGES, main_here, read_fasta, refused, shard_windows

from bionemo_wds.core.tokenizer import COMPLEMENT
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import read_manifest
from bionemo_wds.prepare import PrepareOptions, prepare

with warnings.catch_warnings():  # megatron-core warns on import when Transformer Engine is absent
    warnings.simplefilter("ignore")
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

ROOT = Path(__file__).resolve().parents[1]
SPACER = 2000  # prompt_spacer_length, small so that tags repeat inside the lambda genome


def write_indexed(prefix: Path, docs: list[bytes], dtype=np.uint8) -> Path:
    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for doc in docs:
        ids = np.frombuffer(doc, dtype=np.uint8).astype(dtype)
        builder.add_document(np.concatenate([ids, np.zeros(1, dtype=dtype)]), [len(ids) + 1])  # EOD 0
    builder.finalize(f"{prefix}.idx")
    return prefix


def with_tag(seq: str, tag: str) -> bytes:
    """preprocess_evo2's layout: the tag before every chunk of `SPACER - len(tag)` bases."""
    step = SPACER - len(tag)
    return "".join(tag + seq[i : i + step] for i in range(0, len(seq), step)).encode()


def reverse_complement(seq: str) -> str:
    return COMPLEMENT[np.frombuffer(seq.encode(), dtype=np.uint8)[::-1]].tobytes().decode()


def cli(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "bionemo_wds.cli", "prepare", *map(str, args)]
    return subprocess.run(cmd, env=env, capture_output=True, text=True)


def opts(**kw) -> PrepareOptions:
    return PrepareOptions(source="megatron", seq_length=1024, split=(1, 0, 0), workers=1, progress=False, **kw)


def test_documents_prepare_into_windows_equal_to_the_fasta(tmp_path):
    kleb = read_fasta(KLEBSIELLA)
    names = list(kleb)
    prefix = write_indexed(tmp_path / "kleb_train", [kleb[n].encode() for n in names])
    out = tmp_path / "data"
    prepare([str(prefix)], str(out), opts(stride=1000))
    windows = shard_windows(out)["train"]
    covered = {}
    for seq_id, start, _, bases, tag in windows:
        stem, doc = seq_id.split("/")
        assert stem == "kleb_train" and tag == ""
        source = kleb[names[int(doc)]]
        assert bases.decode() == source[start : start + len(bases)], seq_id
        covered[seq_id] = max(covered.get(seq_id, 0), start + len(bases))
    assert len(covered) == len(names) and all(covered[f"kleb_train/{i}"] == len(kleb[n]) for i, n in enumerate(names))
    notes = read_manifest(out).params.source
    assert notes["documents"] == len(names) and notes["tagged"] == notes["reverse_complement_copies"] == 0


def test_embedded_tags_and_reverse_complement_copies_are_taken_out(tmp_path):
    lam = read_fasta(LAMBDA)
    seq = next(iter(lam.values()))
    parts = [seq[:20000], seq[20000:]]
    docs = []
    for part, tag in zip(parts, LINEAGES):  # as embed_reverse_complement: forward, then its RC
        docs += [with_tag(part, tag), with_tag(reverse_complement(part), tag)]
    prefix = write_indexed(tmp_path / "lambda_rc", docs)
    out = tmp_path / "data"
    prepare([str(prefix) + ".bin"], str(out), opts())
    manifest = read_manifest(out)
    assert manifest.params.source["tagged"] == 2 and manifest.params.source["reverse_complement_copies"] == 2
    assert sorted(s["seq_id"] for s in manifest.skipped) == ["lambda_rc/1", "lambda_rc/3"]
    assert all("reverse complement of document" in s["reason"] for s in manifest.skipped)
    by_doc: dict[str, list] = {}
    for seq_id, start, _, bases, tag in shard_windows(out)["train"]:
        by_doc.setdefault(seq_id, []).append((start, bases, tag))
    assert sorted(by_doc) == ["lambda_rc/0", "lambda_rc/2"]
    for doc, part, tag in (("lambda_rc/0", parts[0], LINEAGES[0]), ("lambda_rc/2", parts[1], LINEAGES[1])):
        for start, bases, window_tag in by_doc[doc]:
            assert window_tag == tag and b"|" not in bases
            assert bases.decode() == part[start : start + len(bases)]


def test_bad_input_is_one_line(tmp_path, capsys):
    """The first case through the console script in a process of its own, the others in this one
    (`main_here`: the same `main`, without importing torch and megatron-core again for each)."""
    lam = next(iter(read_fasta(LAMBDA).values()))
    prefix = write_indexed(tmp_path / "pair", [lam.encode()])
    Path(f"{prefix}.idx").unlink()
    refused(cli("--source", "megatron", prefix, "--out", tmp_path / "o1", "-q"), "pair.bin has no pair.idx beside it")
    wide = write_indexed(tmp_path / "wide", [lam.encode()], dtype=np.int32)
    refused(
        main_here(capsys, "prepare", "--source", "megatron", wide, "--out", tmp_path / "o2", "-q"),
        "wide.idx stores tokens as int32",
    )
    ids = np.frombuffer(lam[:500].encode(), dtype=np.uint8).astype(np.uint16)
    ids[77] = 300
    builder = IndexedDatasetBuilder(str(tmp_path / "big.bin"), dtype=np.uint16)
    builder.add_document(ids, [len(ids)])
    builder.finalize(str(tmp_path / "big.idx"))
    result = main_here(capsys, "prepare", "--source", "megatron", tmp_path / "big", "--out", tmp_path / "o3", "-q")
    refused(result, "document 0 of", "id 300 at position 77")
    long, short = write_indexed(tmp_path / "long", [lam.encode()]), write_indexed(tmp_path / "short", [b"ACGT"])
    Path(tmp_path / "mixed.bin").write_bytes(Path(f"{short}.bin").read_bytes())
    Path(tmp_path / "mixed.idx").write_bytes(Path(f"{long}.idx").read_bytes())
    result = main_here(capsys, "prepare", "--source", "megatron", tmp_path / "mixed", "--out", tmp_path / "o4", "-q")
    refused(result, "mixed.bin holds 5 bytes but", "not one")
    for out in ("o1", "o2", "o3", "o4"):
        assert not (tmp_path / out / "manifest.json").exists()


def test_without_megatron_core_the_error_says_what_to_install(tmp_path, monkeypatch):
    """megatron-core is installed here; its absence is simulated by making its import fail."""
    lam = next(iter(read_fasta(LAMBDA).values()))
    prefix = write_indexed(tmp_path / "lam", [lam.encode()])
    monkeypatch.setitem(sys.modules, "megatron.core.datasets.indexed_dataset", None)
    with pytest.raises(BadInputError, match=r"megatron-core.*pip install --no-deps"):
        prepare([str(prefix)], str(tmp_path / "o"), opts())
