"""The index in tasks (`prepare/sources/fasta_index.py`): a plain file cut into byte ranges at header
lines gives the whole file's index (and headers) for any range size; a broken rule anywhere is the
whole file's message, line numbers included; `header_at_or_after` against a brute-force search."""

from __future__ import annotations

import re

import pytest
from conftest import KLEBSIELLA, LAMBDA, read_fasta, write_fasta
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_fai import fasta_files

from bionemo_wds.errors import SourceError
from bionemo_wds.prepare.executors.tasks import TaskPlace
from bionemo_wds.prepare.sources import fasta_index
from bionemo_wds.prepare.sources.fai import build_fai, header_at_or_after, read_fai
from bionemo_wds.prepare.sources.fasta_index import index_files, index_path, index_tasks
from bionemo_wds.prepare.sources.fasta_inputs import fasta_inputs


def rows(table) -> tuple:
    return table.names, table.lengths, table.offsets, table.line_bases, table.line_bytes, table.headers


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200).map(lambda b: b.replace(b"\x00", b">")), st.integers(0, 220), st.integers(1, 9))
def test_header_at_or_after_is_the_first_header_line_from_there(tmp_path_factory, data, offset, block):
    path = tmp_path_factory.mktemp("h") / "x.fa"
    path.write_bytes(data)
    starts = [m.start() for m in re.finditer(rb"(?:^|(?<=\n))>", data)]
    expected = 0 if offset <= 0 else next((s for s in starts if s >= offset), len(data))
    assert header_at_or_after(path, offset, block) == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=fasta_files(), range_bytes=st.integers(1, 400), headers=st.booleans())
def test_byte_ranges_give_the_whole_files_index(tmp_path_factory, monkeypatch, case, range_bytes, headers):
    data, _ = case
    tmp = tmp_path_factory.mktemp("ranges")
    path = tmp / "x.fa"
    path.write_bytes(data)
    (tmp / "cache").mkdir()
    whole = build_fai(path, keep_headers=headers)
    monkeypatch.setattr(fasta_index, "RANGE_BYTES", range_bytes)
    tasks = index_tasks(fasta_inputs([path]), tmp / "cache", headers)
    assert len(tasks) == -(-len(data) // range_bytes)
    ((local, table),) = index_files(fasta_inputs([path]), tmp / "cache", headers, TaskPlace())
    assert local == str(path) and rows(table) == rows(whole)
    if not headers:  # the joined index is cached as the file's .fai
        assert rows(read_fai(index_path(path, 0, tmp / "cache"))) == rows(whole)


@pytest.fixture(scope="module")
def genomes(tmp_path_factory):
    """lambda and the Klebsiella assembly in one plain file, 60 bases per line (~5.7 MB)."""
    seqs = {**read_fasta(LAMBDA), **read_fasta(KLEBSIELLA)}
    return write_fasta(tmp_path_factory.mktemp("genomes") / "both.fa", seqs), seqs


def test_a_real_file_in_ranges_on_a_pool_indexes_as_one(tmp_path, monkeypatch, genomes):
    path, seqs = genomes
    monkeypatch.setattr(fasta_index, "RANGE_BYTES", 300_000)  # ~19 ranges, lambda's and several contigs' ends
    monkeypatch.setattr(fasta_index, "POOL_INDEX_BYTES", 0)
    (tmp_path / "cache").mkdir()
    tasks = index_tasks(fasta_inputs([path]), tmp_path / "cache", False)
    assert len(tasks) >= 15
    ((_, table),) = index_files(fasta_inputs([path]), tmp_path / "cache", False, TaskPlace(workers=2))
    assert rows(table) == rows(build_fai(path))
    assert table.names == list(seqs) and table.lengths == [len(s) for s in seqs.values()]


def broken(text: bytes, what: str) -> bytes:
    """`text` with a broken rule near its end (far from the first range)."""
    lines = text.split(b"\n")
    at = len(lines) - 40
    while lines[at].startswith(b">") or lines[at - 1].startswith(b">") or lines[at + 1].startswith(b">"):
        at -= 1
    if what == "short line, then blank line":  # the width is no error (a rewrap), the blank line is
        lines[10] = lines[10][:-1]
        lines[at] = b""
    elif what == "blank line":
        lines[at] = b""
    elif what == "duplicate name":
        first = lines[0].split()[0]
        head = next(i for i in range(len(lines) - 1, 0, -1) if lines[i].startswith(b">"))
        lines[head] = first + b" again"
    elif what == "no name":
        head = next(i for i in range(len(lines) - 1, 0, -1) if lines[i].startswith(b">"))
        lines[head] = b">"
    return b"\n".join(lines)


@pytest.mark.parametrize("what", ["blank line", "duplicate name", "no name", "short line, then blank line"])
def test_a_broken_rule_in_a_late_range_is_the_whole_files_message(tmp_path, monkeypatch, genomes, what):
    path = tmp_path / "bad.fa"
    path.write_bytes(broken(genomes[0].read_bytes(), what))
    (tmp_path / "cache").mkdir()
    (tmp_path / "whole-cache").mkdir()
    with pytest.raises(SourceError) as whole:
        index_files(fasta_inputs([path]), tmp_path / "whole-cache", False, TaskPlace())
    assert re.search(r"lines? \d+", str(whole.value)) and str(path) in str(whole.value)
    monkeypatch.setattr(fasta_index, "RANGE_BYTES", 250_000)
    with pytest.raises(SourceError) as ranges:
        index_files(fasta_inputs([path]), tmp_path / "cache", False, TaskPlace())
    assert str(ranges.value) == str(whole.value)
    assert not index_path(path, 0, tmp_path / "cache").exists()  # nothing cached for a refused file
