"""A stray non-ASCII character in a FASTA sequence line (an ``é`` typed into the bundled lambda genome)
is reported as the character it is, with the file, the sequence, the line and the position, as other
unknown characters are: not as a line of the wrong length (its two bytes make the line one longer).
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from bionemo_wds.cli.main import main
from bionemo_wds.core.tokenizer import shown_character
from bionemo_wds.prepare.sources.fai import FastaCharacterError, FastaFormatError, build_fai

LAMBDA_GZ = Path(__file__).resolve().parents[1] / "bionemo_wds" / "data" / "lambda_phage_NC_001416.fa.gz"
FAST = ["--quiet", "--workers", "1", "--seq-length", "256", "--stride", "200", "--split", "1,0,0"]
NAME = "gi|9626243|ref|NC_001416.1|"


def lambda_lines() -> list[str]:
    """The bundled lambda genome's lines: a header, then lines of 70 bases, the last 62."""
    return gzip.decompress(LAMBDA_GZ.read_bytes()).decode("ascii").split("\n")


def with_char(tmp_path: Path, line: int, column: int, replace: int, gz: bool = True) -> Path:
    """The lambda genome with an ``é`` put in at `column` (0-based) of file line `line` (0-based),
    in place of `replace` bases (0: inserted, the line becomes a byte longer than the others)."""
    lines = lambda_lines()
    lines[line] = lines[line][:column] + "é" + lines[line][column + replace :]
    data = "\n".join(lines).encode("utf-8")
    path = tmp_path / ("lambda_e.fa.gz" if gz else "lambda_e.fa")
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def prepare(capsys: pytest.CaptureFixture[str], fasta: Path, out: Path, *extra: str) -> tuple[int, str]:
    code = main(["prepare", str(fasta), "--out", str(out), *FAST, *extra])
    return code, capsys.readouterr().err.strip()


@pytest.mark.parametrize("on_invalid", ["error", "replace-N"])
def test_a_stray_character_in_a_full_line_is_named_not_a_line_length(tmp_path, capsys, on_invalid):
    """File line 6 (the sequence's 5th line) gets an ``é`` inserted after its 10th base: base 290."""
    fasta = with_char(tmp_path, 5, 10, 0)
    code, err = prepare(capsys, fasta, tmp_path / "out", "--on-invalid", on_invalid)
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and str(fasta) in err and repr(NAME) in err, err
    assert "'é' (U+00E9, bytes 0xc3 0xa9) on line 6, column 11 (position 290, 0-based)" in err, err
    assert "not an IUPAC code" in err and "equally long" not in err and "holds 71 bases" not in err, err
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_a_stray_character_in_the_last_line_is_named_too(tmp_path, capsys):
    """In the sequence's last (shorter) line the line rule holds, so the base check finds it: the
    character is named there as well, and --on-invalid replace-N then proceeds."""
    lines = lambda_lines()
    last = max(i for i, line in enumerate(lines) if line)
    fasta = with_char(tmp_path, last, 3, 2)  # two bases out, two bytes in: the line keeps its length
    code, err = prepare(capsys, fasta, tmp_path / "out")
    assert code == 2, err
    position = 70 * (last - 1) + 3
    assert f"has 'é' (U+00E9, bytes 0xc3 0xa9) at position {position} (0-based), not an IUPAC code" in err, err
    assert str(fasta) in err and repr(NAME) in err, err
    code, err = prepare(capsys, fasta, tmp_path / "replaced", "--on-invalid", "replace-N")
    assert code == 0, err


@pytest.mark.parametrize("block", [1 << 20, 100, 7])
def test_the_index_names_the_character_for_any_block_size(tmp_path, block):
    """The index reads a file in blocks: the record may end in the block of the bad line or after it."""
    fasta = with_char(tmp_path, 5, 10, 0, gz=False)
    with pytest.raises(FastaCharacterError, match=r"'é' .* on line 6, column 11 \(position 290, 0-based\)"):
        build_fai(fasta, block_bytes=block)


def test_a_line_too_long_in_ascii_is_still_a_line_length_problem(tmp_path):
    lines = lambda_lines()
    lines[5] += "A"
    path = tmp_path / "long.fa"
    path.write_text("\n".join(lines))
    with pytest.raises(FastaFormatError, match=r"line 6 of sequence .* holds 71 bases") as caught:
        build_fai(path)
    assert not isinstance(caught.value, FastaCharacterError)


def test_shown_character() -> None:
    assert shown_character("ACé".encode(), 2) == "'é' (U+00E9, bytes 0xc3 0xa9)"
    assert shown_character(b"A!", 1) == "'!'"
    assert shown_character(b"A\xff", 1) == "byte 0xff (not ASCII)"
    assert shown_character(b"A\x01", 1) == "byte 0x01"
