"""A samtools ``.fai`` index of a plain FASTA file, built with numpy a block at a time.

Written here instead of pyfaidx's `Faidx.build_index` because that is a Python loop per line:
measured on this machine it took 70% of cataloguing a million short contigs (18.5 s of 25 s) and
was the largest share of the per-base gap between 100,000 short contigs and one long sequence.
Here each block of the file (`BLOCK_BYTES`) is split into lines by one `numpy.flatnonzero`, and
every check is a vectorised comparison; Python runs once per record (its name), not per line.

The index and its rules are samtools' (and pyfaidx's): per record the name (header text up to the
first whitespace), the number of bases, the byte offset of the first base, bases per line and
bytes per line (newline included, ``\\r\\n`` counted). Every line of a record but the last must
hold the same number of bases and bytes; the last may be shorter; blank lines may only end a
record. A line before the first header, a header without a name, a name used twice and binary
content are refused, each naming the line. A line whose length is off because it holds a
non-ASCII character (a stray ``é`` is two bytes) is reported as that character
(`FastaCharacterError`), not as a line of the wrong length; a line of another width is a
`FastaLineWidthError`. With ``ragged=True`` line widths are not checked (every other rule is): the
table's names, lengths and headers are then right, but its line layout is the first line's and no
base may be read through it; `fasta_copies.rewrap` writes such a file anew, in lines of one width.
The tests check the result against pyfaidx's index.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bionemo_wds.core.tokenizer import shown_character

#: Bytes read per block (lines are never split: a block ends at its last newline).
BLOCK_BYTES = 64 << 20
_NL, _CR, _GT = ord("\n"), ord("\r"), ord(">")
#: The sequence name in each line of the joined header texts: after any blanks, up to the first
#: whitespace (as samtools and pyfaidx take it).
NAME = re.compile(r"^[ \t\f\v\r]*([^\s]*)", re.MULTILINE)


class FastaFormatError(ValueError):
    """The file breaks a FASTA rule; the message names the line (1-based) and the record."""


class FastaLineWidthError(FastaFormatError):
    """A line of a sequence is not as long as its first (every line but the last must be): a file
    whose lines differ in width, which `build_fai` with ``ragged=True`` reads for a rewrap."""


class FastaCharacterError(FastaFormatError):
    """A sequence line holds a non-ASCII character: `detail` says which, where (line, column,
    position in the sequence); `name` is the sequence's."""

    def __init__(self, name: str, detail: str):
        super().__init__(f"sequence {name!r} {detail}")
        self.name, self.detail = name, detail


@dataclass
class FaiTable:
    """Per record: name, length, offset of the first base, bases and bytes per line; headers when kept."""

    names: list[str] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    line_bases: list[int] = field(default_factory=list)
    line_bytes: list[int] = field(default_factory=list)
    headers: list[str] | None = None  # definition lines without '>' (when asked for)

    def __len__(self) -> int:
        return len(self.names)


@dataclass
class _Open:
    """The record whose lines may continue in the next block."""

    name: str
    line: int  # of its header
    header_end: int  # byte after the header line (the offset of a record without bases)
    offset: int = -1  # of the first base (-1: no base line yet)
    lenc: int = 0
    lenb: int = 0
    rlen: int = 0
    last_bases: int = 0  # the last non-blank line so far: bases and bytes
    last_bytes: int = 0
    last_line: int = 0
    last_start: int = 0  # byte offset of that line
    blank_after: int = 0  # line number of a blank line after it (0: none)


@dataclass
class _Lines:
    """One block's lines: bases (line end excluded), bytes (included), absolute start and end, first line number."""

    body: bytes
    bases: np.ndarray
    nbytes: np.ndarray
    starts: np.ndarray
    ends: np.ndarray
    first_line: int


class _Builder:
    def __init__(self, keep_headers: bool, path: str | os.PathLike, ragged: bool = False) -> None:
        self.path = path  # read again only to say what is wrong with a line
        self.ragged = ragged  # line widths are not checked
        self.table = FaiTable(headers=[] if keep_headers else None)
        self.seen: dict[str, int] = {}
        self.open: _Open | None = None

    def close_open(self) -> None:
        rec = self.open
        if rec is None:
            return
        t = self.table
        t.names.append(rec.name)
        t.lengths.append(rec.rlen)
        t.offsets.append(rec.offset if rec.offset >= 0 else rec.header_end)
        t.line_bases.append(rec.lenc)
        t.line_bytes.append(rec.lenb)
        self.open = None

    def names_of(self, headers: list[bytes], lines: list[int]) -> list[str]:
        """The sequence names of the header lines `headers` (text after '>') on `lines`, checked and
        registered (and the headers kept when the table keeps them). Batched per block: one join,
        one decode, one regex over the headers alone, one dict update (a million contigs have a
        million names; per-name Python cost ~2 s)."""
        try:
            text = b"\n".join(headers).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FastaFormatError(f"a header near line {lines[0]} is not text (binary content)") from exc
        names = NAME.findall(text)
        if self.table.headers is not None:
            self.table.headers.extend(h.strip() for h in text.split("\n"))
        if "" in names:
            raise FastaFormatError(f"the header on line {lines[names.index('')]} has no sequence name")
        if len(set(names)) != len(names) or not self.seen.keys().isdisjoint(names):  # a name used twice
            for name, line in zip(names, lines):
                if name in self.seen:
                    raise FastaFormatError(
                        f"sequence name {name!r} is used twice (lines {self.seen[name]} and {line}); "
                        "names must be unique"
                    )
                self.seen[name] = line
        self.seen.update(zip(names, lines))
        return names

    def header(self, name: str, line: int, end: int) -> None:
        """Start record `name` (checked by `names_of`), which may continue in the next block (`end`: the
        byte after its header line)."""
        self.close_open()
        self.open = _Open(name, line, end)

    def lines(self, bases: np.ndarray, nbytes: np.ndarray, starts: np.ndarray, first_line: int) -> None:
        """Add base lines (bases, bytes and absolute start of each) to the open record, checking its rule."""
        if len(bases) == 0:
            return
        rec = self.open
        nonblank = bases > 0
        if rec is None:
            if nonblank.any():
                line = first_line + int(np.argmax(nonblank))
                raise FastaFormatError(f"line {line} holds bases before any '>' header")
            return
        if not nonblank.any():
            if not rec.blank_after:
                rec.blank_after = first_line
                if rec.offset < 0:  # a record of blank lines only: bytes per line of the first (as pyfaidx)
                    rec.lenb = int(nbytes[0])
            return
        if rec.blank_after:
            raise FastaFormatError(f"blank line {rec.blank_after} inside sequence {rec.name!r}")
        first = int(np.argmax(nonblank))
        if first > 0:
            raise FastaFormatError(f"blank line {first_line} inside sequence {rec.name!r}")
        if rec.offset < 0:  # the record's first base line sets the layout
            rec.offset, rec.lenc, rec.lenb = int(starts[0]), int(bases[0]), int(nbytes[0])
        elif not self.ragged and (rec.last_bases != rec.lenc or rec.last_bytes != rec.lenb):  # not the last line
            self.inconsistent(rec, rec.last_line, rec.last_bases, rec.last_start)
        last = len(bases) - 1 - int(np.argmax(nonblank[::-1]))
        inner = slice(0, last)  # every non-blank line but the last: full lines
        if self.ragged:
            bad = np.flatnonzero(bases[inner] == 0)
        else:
            bad = np.flatnonzero((bases[inner] != rec.lenc) | (nbytes[inner] != rec.lenb))
        if len(bad):
            i = int(bad[0])
            if bases[i] == 0:
                raise FastaFormatError(f"blank line {first_line + i} inside sequence {rec.name!r}")
            self.inconsistent(rec, first_line + i, int(bases[i]), int(starts[i]))
        if bases[last] > rec.lenc and not self.ragged:
            self.inconsistent(rec, first_line + last, int(bases[last]), int(starts[last]))
        rec.rlen += int(bases[: last + 1].sum())
        rec.last_bases, rec.last_bytes, rec.last_line = int(bases[last]), int(nbytes[last]), first_line + last
        rec.last_start = int(starts[last])
        rec.blank_after = first_line + last + 1 if last < len(bases) - 1 else 0

    def records(self, lines: _Lines, heads: np.ndarray, nexts: np.ndarray, names: list[str]) -> None:
        """Add the records `names` whose header is line `heads[k]` and whose lines end before `nexts[k]`
        (all in this block), checked all at once: numpy over the block's lines, no Python per line."""
        if len(heads) == 0:
            return
        count = nexts - heads - 1  # lines of each record after its header
        rid = np.repeat(np.arange(len(heads)), count)
        idx = np.repeat(heads + 1, count) + (np.arange(len(rid)) - np.repeat(np.cumsum(count) - count, count))
        bases, nbytes = lines.bases[idx], lines.nbytes[idx]
        nonblank = bases > 0
        has = count > 0
        lenc = np.where(has, lines.bases[np.minimum(heads + 1, len(lines.bases) - 1)], 0)
        lenb = np.where(has, lines.nbytes[np.minimum(heads + 1, len(lines.bases) - 1)], 0)
        last = np.full(len(heads), -1, dtype=np.int64)  # line index of each record's last non-blank line
        nb_idx = idx[nonblank]
        np.maximum.at(last, rid[nonblank], nb_idx)
        rlen = np.bincount(rid, weights=bases, minlength=len(heads)).astype(np.int64)
        empty = rlen == 0
        blank_inside = ~nonblank & (idx < last[rid])
        inner = nonblank & (idx < last[rid]) & ((bases != lenc[rid]) | (nbytes != lenb[rid]))
        too_long = nonblank & (idx == last[rid]) & (bases > lenc[rid])
        bad = np.flatnonzero(blank_inside if self.ragged else blank_inside | inner | too_long)
        if len(bad):
            i = int(bad[0])
            r = int(rid[i])
            first = int(lines.starts[min(int(heads[r]) + 1, len(lines.starts) - 1)])
            rec = _Open(names[r], 0, 0, offset=first, lenc=int(lenc[r]), lenb=int(lenb[r]))
            line = lines.first_line + int(idx[i])
            if blank_inside[i]:
                raise FastaFormatError(f"blank line {line} inside sequence {rec.name!r}")
            self.inconsistent(rec, line, int(bases[i]), int(lines.starts[idx[i]]))
        header_end = lines.ends[heads]
        offsets = np.where(empty, header_end, lines.starts[np.minimum(heads + 1, len(lines.starts) - 1)])
        t = self.table
        t.names.extend(names)
        t.lengths.extend(rlen.tolist())
        t.offsets.extend(offsets.tolist())
        t.line_bases.extend(lenc.tolist())
        t.line_bytes.extend(lenb.tolist())

    def inconsistent(self, rec: _Open, line: int, bases: int, start: int) -> None:
        """Raise for `line` (its first byte at offset `start`) of `rec`, whose length breaks the rule:
        as the non-ASCII character it holds, when it holds one (`FastaCharacterError`)."""
        with open(self.path, "rb") as fh:
            fh.seek(start)
            text = fh.readline()
        column = next((i for i, byte in enumerate(text) if byte >= 0x80), -1)
        if column >= 0:
            position = (start - rec.offset) // max(rec.lenb, 1) * rec.lenc + column
            raise FastaCharacterError(
                rec.name,
                f"has {shown_character(text, column)} on line {line}, column {column + 1} (position {position}, "
                "0-based), not an IUPAC code: a base is one ASCII letter",
            )
        raise FastaLineWidthError(
            f"line {line} of sequence {rec.name!r} holds {bases} bases (with its line end, a different length "
            f"from the sequence's first line, {rec.lenc} bases): every line but the last must be equally long"
        )


def build_fai(
    path: str | os.PathLike,
    keep_headers: bool = False,
    block_bytes: int = BLOCK_BYTES,
    start: int = 0,
    end: int | None = None,
    ragged: bool = False,
) -> FaiTable:
    """The ``.fai`` records of the plain FASTA file `path` (`FastaFormatError` when it breaks a rule),
    or of its bytes ``[start, end)`` when both are header starts (`header_at_or_after`; or the ends of
    a tar member): the records whose headers lie there, with offsets in the file. The rules are
    checked within the window; line numbers in messages count from its start (a caller wanting the
    file's numbers builds the whole file). `ragged`: lines may differ in width (see the module)."""
    builder = _Builder(keep_headers, path, ragged)
    position, line_no, carry = start, 1, b""
    left = None if end is None else end - start
    with open(path, "rb") as fh:
        fh.seek(start)
        while True:
            chunk = fh.read(block_bytes if left is None else min(block_bytes, left))
            if left is not None:
                left -= len(chunk)
            data = carry + chunk
            if chunk:
                cut = data.rfind(b"\n") + 1
                if cut == 0:  # one line longer than a block: read on
                    carry = data
                    continue
                body, carry = data[:cut], data[cut:]
            else:
                body, carry = data, b""
                if not body:
                    break
            if b"\x00" in body:
                raise FastaFormatError(f"binary content (a NUL byte) after line {line_no}")
            virtual = not body.endswith(b"\n")  # the last line of a file without a final newline
            arr = np.frombuffer(body + b"\n" if virtual else body, dtype=np.uint8)
            ends = np.flatnonzero(arr == _NL)
            starts = np.concatenate(([0], ends[:-1] + 1))
            nbytes = ends - starts + 1
            cr = (ends > starts) & (arr[np.maximum(ends - 1, 0)] == _CR)
            bases = nbytes - 1 - cr
            if virtual:
                nbytes[-1] -= 1
            heads = np.flatnonzero(arr[starts] == _GT)
            lines = _Lines(body, bases, nbytes, position + starts, position + np.minimum(ends + 1, len(body)), line_no)
            first = int(heads[0]) if len(heads) else len(starts)
            builder.lines(bases[:first], nbytes[:first], position + starts[:first], line_no)
            if len(heads):
                at, size = starts[heads].tolist(), bases[heads].tolist()
                names = builder.names_of([body[a + 1 : a + n] for a, n in zip(at, size)], (heads + line_no).tolist())
                builder.close_open()
                builder.records(lines, heads[:-1], heads[1:], names[:-1])  # the records that end in this block
                h = int(heads[-1])
                builder.header(names[-1], line_no + h, position + min(int(ends[h]) + 1, len(body)))
                builder.lines(bases[h + 1 :], nbytes[h + 1 :], position + starts[h + 1 :], line_no + h + 1)
            position += len(body)
            line_no += len(starts)
            if not chunk:
                break
    builder.close_open()
    return builder.table


def header_at_or_after(path: str | os.PathLike, offset: int, block_bytes: int = 1 << 20) -> int:
    """The byte offset of the first header line (a line starting with ``>``) that starts at or after
    `offset` in `path`; the file's size when there is none. Where a byte-range task of the index starts."""
    size = os.path.getsize(path)
    if offset <= 0:
        return 0
    with open(path, "rb") as fh:
        at = offset - 1  # a line starts at `at + 1` when the byte at `at` is a newline
        while at < size:
            fh.seek(at)
            block = fh.read(block_bytes + 1)
            found = block.find(b"\n>")
            if found >= 0:
                return at + found + 1
            if len(block) <= 1:
                break
            at += len(block) - 1
    return size


def write_fai(table: FaiTable, path: str | os.PathLike) -> None:
    """`table` in samtools' five-column ``.fai`` text to `path` (the caller makes the write atomic)."""
    rows = zip(table.names, table.lengths, table.offsets, table.line_bases, table.line_bytes)
    Path(path).write_text("".join(f"{n}\t{ln}\t{o}\t{c}\t{b}\n" for n, ln, o, c, b in rows))


def read_fai(path: str | os.PathLike) -> FaiTable:
    """A ``.fai`` written by `write_fai` (or samtools) back into a `FaiTable` (no headers)."""
    table = FaiTable()
    for line in Path(path).read_text().splitlines():
        name, length, offset, lenc, lenb = line.split("\t")[:5]
        table.names.append(name)
        table.lengths.append(int(length))
        table.offsets.append(int(offset))
        table.line_bases.append(int(lenc))
        table.line_bytes.append(int(lenb))
    return table
