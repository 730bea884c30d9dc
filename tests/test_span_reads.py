"""Samples cut at load read each stored record about once per pass, as stored windows do.

A sequence-layout split stores each sequence's pieces consecutively; the reader keeps the records of
about two mixing blocks decoded, so what a pass decodes is, per mixing block of the epoch order,
the records its samples' bases lie in. The epoch order deals units of consecutive sample ids sized to
about two records' worth (`plan.samples.unit_size`), so whatever the context length (1 k windows:
hundreds per record; 131 k: several records per window) and with packing on a metagenome-like
catalog (short documents lie among the pieces of long contigs), each record is needed by at most
about three mixing blocks (a unit shares the records at its edges with two others). Units of a fixed
16 ids (what a table without a record count gets) are measured beside them: with short samples a
record is then needed by many blocks (read again each time; 28 with 256-token windows here).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from conftest import KLEBSIELLA, metagenome_contigs, write_fasta

from bionemo_wds import GenomicDataset
from bionemo_wds.load.plan.order import epoch_order
from bionemo_wds.load.plan.samples import UNIT, PackedSamples, WindowSamples, unit_size
from bionemo_wds.prepare import PrepareOptions, prepare

SEED = 5
MIX = 256


def prepared(tmp: Path, fasta: Path) -> Path:
    root = tmp / "data"
    opts = PrepareOptions(seq_length=1024, seed=SEED, layout="sequences", split=(1, 0, 0), workers=1, progress=False)
    prepare([str(fasta)], str(root), opts)
    return root


@pytest.fixture(scope="module")
def genome(tmp_path_factory) -> Path:
    return prepared(tmp_path_factory.mktemp("genome"), KLEBSIELLA)


@pytest.fixture(scope="module")
def metagenome(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("metagenome")
    return prepared(tmp, write_fasta(tmp / "contigs.fa", metagenome_contigs(SEED)))


def blocks_per_record(ds: GenomicDataset, table: WindowSamples | PackedSamples) -> float:
    """Over one epoch's order of `table`: the (mixing block, record) pairs its samples read, per record."""
    part = ds.records.parts[0]
    records = len(part.records.table)
    ids = epoch_order(table, SEED, 0, MIX).range(0, table.n_windows)
    docs = table.documents(ids, np.zeros(len(ids), dtype=np.int64))
    pieces = part.pieces(docs.seq, docs.start, docs.length)
    block = docs.sample[pieces.span] // MIX
    assert np.unique(pieces.record).tolist() == list(range(records))  # every record is read
    return len(np.unique(block * records + pieces.record)) / records


def measured(root: Path, **cut) -> tuple[float, float]:
    """(blocks per record with the table's units, with units of a fixed `UNIT` ids)."""
    ds = GenomicDataset(str(root), "train", micro_batch_size=8, seed=SEED, **cut)
    table = ds.records.tables[0]
    assert table.seqs.records == len(ds.records.parts[0].records.table)
    fixed = dataclasses.replace(table, seqs=dataclasses.replace(table.seqs, records=0))
    return blocks_per_record(ds, table), blocks_per_record(ds, fixed)


@pytest.mark.parametrize("seq_length", [256, 1024, 16384])
def test_windows_need_each_record_in_about_one_mixing_block(genome, seq_length):
    sized, fixed = measured(genome, seq_length=seq_length)
    assert sized <= 3.1 and (sized <= fixed / 2 or fixed < 1.5), (sized, fixed)


@pytest.mark.parametrize("pack", [False, True], ids=["windows", "packed"])
def test_a_metagenome_needs_each_record_in_about_one_mixing_block(metagenome, pack):
    sized, fixed = measured(metagenome, seq_length=1024, pack=pack)
    assert sized <= 3.1 and sized <= fixed / 2, (sized, fixed)


def test_unit_size():
    assert unit_size(1000, 0, 1024) == UNIT  # records not known
    assert unit_size(16112, 503, 1024) == 64  # about two records' worth of 8 k windows
    assert unit_size(16112 * 8, 503, 1024) == 512
    assert unit_size(16112 * 64, 503, 1024) == 1024  # never past the mixing block
    assert unit_size(100, 503, 1024) == UNIT
    assert unit_size(16112, 503, 1) == UNIT  # no mixing
