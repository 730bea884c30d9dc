"""The numpy `.fai` builder against pyfaidx's index (the oracle) on generated and real FASTA."""

from __future__ import annotations

import gzip
from pathlib import Path

import pyfaidx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bionemo_wds.prepare.sources.fai import FastaFormatError, build_fai, read_fai, write_fai

DATA = Path(__file__).resolve().parents[1] / "bionemo_wds" / "data"


def pyfaidx_rows(path: Path) -> list[tuple]:
    index = pyfaidx.Faidx(str(path), indexname=str(path) + ".pyfaidx.fai").index
    return [(name, r.rlen, r.offset, r.lenc, r.lenb) for name, r in index.items()]


def our_rows(path: Path, block: int = 1 << 26) -> list[tuple]:
    t = build_fai(path, block_bytes=block)
    return list(zip(t.names, t.lengths, t.offsets, t.line_bases, t.line_bytes))


record = st.tuples(
    st.integers(0, 300),  # bases
    st.integers(1, 70),  # bases per line
    st.sampled_from(["", " some description", "\tx=1"]),
    st.integers(0, 1),  # a blank line after the record
)


@st.composite
def fasta_files(draw) -> tuple[bytes, int]:
    records = draw(st.lists(record, min_size=1, max_size=12))
    eol = draw(st.sampled_from([b"\n", b"\r\n"]))
    final_newline = draw(st.booleans())
    parts = []
    for i, (n, width, desc, blank) in enumerate(records):
        bases = (b"ACGTN" * (n // 5 + 1))[:n]
        lines = [bases[j : j + width] for j in range(0, n, width)]
        text = b">seq" + str(i).encode() + desc.encode() + eol + b"".join(line + eol for line in lines)
        if blank and i < len(records) - 1:
            text += eol
        parts.append(text)
    data = b"".join(parts)
    if not final_newline and data.endswith(eol) and not data.endswith(eol + eol):
        data = data[: -len(eol)]
    return data, draw(st.integers(1, 200))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=fasta_files())
def test_valid_fasta_indexes_like_pyfaidx_for_any_block_size(tmp_path_factory, case):
    data, block = case
    path = tmp_path_factory.mktemp("fa") / "x.fa"
    path.write_bytes(data)
    try:
        expected = pyfaidx_rows(path)
    except pyfaidx.FastaIndexingError:  # pyfaidx refuses a blank line between CRLF records; we index it
        assert data.count(b"\r\n\r\n>")
        expected = our_rows(path)
    assert our_rows(path, block) == expected
    assert our_rows(path) == expected


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=fasta_files(), where=st.integers(0, 10_000), how=st.sampled_from(["shorter", "longer", "blank"]))
def test_a_broken_line_is_refused_naming_its_line(tmp_path_factory, case, where, how):
    data, block = case
    lines = data.split(b"\n")

    def base_line(j: int) -> bool:
        return bool(lines[j].strip()) and not lines[j].startswith(b">")

    # full lines between two base lines of one record (not the first: that one sets the line length)
    inner = [i for i in range(1, len(lines) - 1) if base_line(i - 1) and base_line(i) and base_line(i + 1)]
    if not inner:
        return
    i = inner[where % len(inner)]
    cr = lines[i].endswith(b"\r")
    body = lines[i].rstrip(b"\r")
    lines[i] = {"shorter": body[:-1], "longer": body + b"A", "blank": b""}[how] + (b"\r" if cr else b"")
    path = tmp_path_factory.mktemp("fa") / "bad.fa"
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(FastaFormatError, match=f"line {i + 1}"):
        build_fai(path, block_bytes=block)
    # (pyfaidx is no oracle here: it accepts a short line before a last line without a newline)


@pytest.mark.parametrize("name", ["lambda_phage_NC_001416.fa.gz", "klebsiella_fragmented_assembly.fa.gz"])
def test_real_genomes_give_pyfaidx_index_and_round_trip(tmp_path, name):
    plain = tmp_path / name.removesuffix(".gz")
    plain.write_bytes(gzip.decompress((DATA / name).read_bytes()))
    assert our_rows(plain, block=1 << 16) == pyfaidx_rows(plain)
    table = build_fai(plain)
    write_fai(table, tmp_path / "ours.fai")
    assert (tmp_path / "ours.fai").read_bytes() == Path(str(plain) + ".pyfaidx.fai").read_bytes()
    back = read_fai(tmp_path / "ours.fai")
    assert (back.names, back.lengths, back.offsets) == (table.names, table.lengths, table.offsets)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"ACGT\n>a\nAC\n", "line 1 holds bases before any '>' header"),
        (b">a\nAC\n>\nACGT\n", "the header on line 3 has no sequence name"),
        (b">a\nAC\n>b\nA\n>a x\nAC\n", "sequence name 'a' is used twice (lines 1 and 5); names must be unique"),
        (b">a\nACGT\nACGTA\n", "line 3 of sequence 'a' holds 5 bases"),  # pyfaidx accepts this, then misreads base 8
        (b">a\n\nACGT\n", "blank line 2 inside sequence 'a'"),
        (b">a\x00\nACGT\n", "binary content"),
    ],
)
def test_each_rule_names_the_line(tmp_path, data, message):
    path = tmp_path / "x.fa"
    path.write_bytes(data)
    for block in (1 << 20, 3):
        with pytest.raises(FastaFormatError, match=message.replace("(", r"\(").replace(")", r"\)")):
            build_fai(path, block_bytes=block)


def test_headers_are_kept_when_asked(tmp_path):
    path = tmp_path / "x.fa"
    path.write_bytes(b">a first one\nAC\n> b\tsecond\r\nA\r\n>c\nG")
    table = build_fai(path, keep_headers=True, block_bytes=5)
    assert table.names == ["a", "b", "c"]
    assert table.headers == ["a first one", "b\tsecond", "c"]
