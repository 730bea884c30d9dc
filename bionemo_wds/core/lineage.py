"""Evo2's taxonomic lineage tags: ``|d__...;p__...;c__...;o__...;f__...;g__...;s__...|``.

Evo2 puts a lineage string between the control-tag delimiters (bionemo-evo2's preprocessing builds
it rank by rank and writes ``None`` for a rank it drops), and trains with ``random_lineage_dropout``
so the model also sees incomplete lineages. Prepare finds such a string in a FASTA header
(`find_lineage`); the loader drops ranks (`drop_ranks`), seeded per window. Both sides use this one
parser so a tag written by prepare is exactly what the loader takes apart.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: The rank prefixes, in Evo2's order.
RANKS = ("d", "p", "c", "o", "f", "g", "s")
#: What Evo2 writes for a rank it does not know or dropped.
DROPPED = "None"

# a complete |...| lineage: the text between two pipes that starts with d__ (species may hold spaces)
_PIPED = re.compile(r"\|(d__[^|]*)\|")
# a bare GTDB-style lineage (d__Bacteria;p__...), up to whitespace or a pipe
_BARE = re.compile(r"(?<![^\s|;,=])d__[^|\s]+")
# a bare lineage that ends in a named species (;s__Genus)...
_ENDS_IN_SPECIES = re.compile(r"(?:^|;)s__[^;]+$")
# ... and the species epithet after it: GTDB species are two words (s__Escherichia coli)
_EPITHET = re.compile(r" [^\s|;=]+(?=\s|\||$)")


def parse_lineage(tag: str) -> list[tuple[str, str]] | None:
    """``|d__X;p__Y;...|`` -> ``[("d", "X"), ("p", "Y"), ...]``; None when `tag` is not a lineage tag.

    A lineage tag is delimited by pipes, its fields are separated by ``;`` and each field is a rank
    prefix of `RANKS` followed by ``__`` and a value (possibly empty or ``None``). Ranks may be a
    prefix of the full list (a lineage down to the genus only), but never out of order.
    """
    if len(tag) < 5 or tag[0] != "|" or tag[-1] != "|":
        return None
    fields = tag[1:-1].split(";")
    if len(fields) > len(RANKS):
        return None
    out = []
    for rank, field in zip(RANKS, fields):
        if not field.startswith(rank + "__"):
            return None
        out.append((rank, field[len(rank) + 2 :]))
    return out


def format_lineage(ranks: Sequence[tuple[str, str]]) -> str:
    """The inverse of `parse_lineage`."""
    return "|" + ";".join(f"{rank}__{value}" for rank, value in ranks) + "|"


def find_lineage(header: str) -> str | None:
    """The lineage tag in a FASTA header line (name and description), normalised to ``|d__...|``.

    Takes Evo2's piped form anywhere in the header (``>seq1 |d__Bacteria;...;s__Escherichia coli|``,
    spaces allowed inside), else a bare GTDB lineage (``d__Bacteria;p__...``) up to the first
    whitespace, but for the second word of a species (``...;s__Escherichia coli``: GTDB species
    names are two words). None when the header has neither, or the text found is not a lineage of
    `RANKS`.
    """
    found = _PIPED.search(header)
    text = found.group(1) if found else None
    if text is None:
        bare = _BARE.search(header)
        if bare is not None:
            text = bare.group(0)
            epithet = _EPITHET.match(header, bare.end()) if _ENDS_IN_SPECIES.search(text) else None
            if epithet is not None:
                text += epithet.group(0)
    if text is None:
        return None
    tag = "|" + text.strip().rstrip(";") + "|"
    return tag if parse_lineage(tag) is not None else None


def dropout_length(tag: str) -> int:
    """Bytes `tag` can take after `drop_ranks` (a value shorter than ``None`` grows to it): what a
    window must leave room for. A tag that is not a lineage is dropped whole, so it never grows."""
    ranks = parse_lineage(tag)
    if ranks is None:
        return len(tag.encode("utf-8"))
    grown = [(rank, value if len(value) >= len(DROPPED) else DROPPED) for rank, value in ranks]
    return len(format_lineage(grown).encode("utf-8"))


def drop_ranks(tag: str, keep: Sequence[bool]) -> str:
    """`tag` with the value of every rank whose `keep` flag is False replaced by ``None`` (a rank
    beyond the end of `keep` is kept, never lost)."""
    ranks = parse_lineage(tag)
    if ranks is None:
        raise ValueError(f"not a lineage tag: {tag!r}")
    flags = [*keep, *[True] * (len(ranks) - len(keep))]
    return format_lineage([(rank, value if k else DROPPED) for (rank, value), k in zip(ranks, flags)])
