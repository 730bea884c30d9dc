"""Byte-level DNA tokenizer in the Evo2 style.

A base is its ASCII code (``A`` -> 65); specials sit below any printable byte, so a token id says
by itself whether it is a base, a tag byte or a special. Shards store only bases, in the source's
case by default (soft-masked repeats lower case, ``prepare --case``); the loader gives the model
upper-case ids unless asked not to, and can weigh lower-case labels in the loss. Specials and tags
are added at load time, so one set of shards serves models with and without control tags.
"""

from __future__ import annotations

import numpy as np

from bionemo_wds.core.byte_lookup import pieces_into
from bionemo_wds.errors import SourceError

EOS_ID = 0
PAD_ID = 1
BOS_ID = 2
SEP_ID = 3
UNK_ID = 4
#: Specials around every sample: BOS, SEP (after the tag, which may be empty) and EOS.
N_SPECIALS_PER_SAMPLE = 3

#: IUPAC nucleotide codes (upper case); lower case is accepted and upper-cased.
IUPAC_CODES = b"ACGTURYSWKMBDHVN"

#: `bytes.translate` table: lower case to upper case, everything else unchanged.
UPPERCASE_TABLE = bytes(range(256)).upper()


def _valid_mask() -> np.ndarray:
    mask = np.zeros(256, dtype=bool)
    for code in IUPAC_CODES:
        mask[code] = True
        mask[ord(chr(code).lower())] = True
    return mask


#: ``VALID_BASE[byte]`` is True for an IUPAC code of either case.
VALID_BASE: np.ndarray = _valid_mask()


def replace_invalid_table(keep_case: bool = False) -> bytes:
    """`bytes.translate` table that maps every byte that is no IUPAC code to ``N`` and upper-cases the
    IUPAC codes, or (`keep_case`, for soft-masked data stored as it came) leaves them as they are."""
    table = bytearray(range(256)) if keep_case else bytearray(UPPERCASE_TABLE)
    for byte in range(256):
        if not VALID_BASE[byte]:
            table[byte] = ord("N")
    return bytes(table)


def shown_byte(byte: int) -> str:
    """A base byte as a message shows it: the character in quotes (``'X'``), or ``byte 0x00`` when
    it is not a printable ASCII character (never Python's ``b'X'``)."""
    char = chr(byte)
    return f"'{char}'" if 32 < byte < 127 else f"byte 0x{byte:02x}"


def shown_character(data: bytes, at: int) -> str:
    """The byte at `at` of `data` as a message shows it: `shown_byte`, or for a non-ASCII byte that
    starts a UTF-8 character, the character, its code point and its bytes (``'é' (U+00E9, bytes 0xc3
    0xa9)``): what a stray character in a text editor puts into a FASTA line."""
    byte = data[at]
    if byte < 0x80:
        return shown_byte(byte)
    for size in (2, 3, 4):
        try:
            char = data[at : at + size].decode("utf-8")
        except UnicodeDecodeError:
            continue
        hexes = " ".join(f"0x{b:02x}" for b in data[at : at + size])
        code = f"U+{ord(char):04X}"
        return f"'{char}' ({code}, bytes {hexes})" if char.isprintable() else f"{code} (bytes {hexes})"
    return f"byte 0x{byte:02x} (not ASCII)"


def first_invalid(bases: bytes) -> int:
    """Index of the first byte of `bases` that is not an IUPAC code, or -1 when all are valid."""
    arr = np.frombuffer(bases, dtype=np.uint8)
    bad = ~VALID_BASE[arr]
    if not bad.any():
        return -1
    return int(np.argmax(bad))


def encode_tag(tag: str, seq_id: str) -> bytes:
    """Tag text as token bytes; only printable ASCII, so no tag byte collides with a special."""
    data = tag.encode("utf-8")
    if any(b < 32 or b > 126 for b in data):
        raise SourceError(f"control tag of sequence {seq_id!r} has non-printable or non-ASCII characters: {tag!r}")
    return data


def _complement_table() -> np.ndarray:
    table = np.arange(256, dtype=np.uint8)
    pairs = {
        "A": "T",
        "C": "G",
        "G": "C",
        "T": "A",
        "U": "A",
        "R": "Y",
        "Y": "R",
        "S": "S",
        "W": "W",
        "K": "M",
        "M": "K",
        "B": "V",
        "V": "B",
        "D": "H",
        "H": "D",
        "N": "N",
    }
    for a, b in pairs.items():
        table[ord(a)] = ord(b)
        table[ord(a.lower())] = ord(b.lower())
    return table


#: ``COMPLEMENT[base]``: IUPAC complement (case kept); other bytes map to themselves.
COMPLEMENT: np.ndarray = _complement_table()

#: `COMPLEMENT` as a `bytes.translate` table.
COMPLEMENT_TABLE: bytes = COMPLEMENT.tobytes()


def reverse_complement_bases(bases: np.ndarray) -> np.ndarray:
    """Reverse complement of 1-D uint8 bases, a new array: one C pass (`byte_lookup.pieces_into`), or,
    without the extension, a reversed copy and `bytes.translate` (1.5x a numpy lookup)."""
    out = np.empty(len(bases), dtype=np.uint8)
    if pieces_into(out, (np.ascontiguousarray(bases, dtype=np.uint8),), COMPLEMENT_TABLE, backward=True):
        return out
    return np.frombuffer(bases[::-1].tobytes().translate(COMPLEMENT_TABLE), dtype=np.uint8)
