"""A sample's random draws when its batch is built: strand and tag dropout. The one place they are made.

Every draw is a pure function of a salt (seed and pass: `seeds.flip_salt`, `seeds.tag_salt`) and
the window's key, so it never depends on which worker builds the batch or when. The batch builder
(`assemble`) draws for a whole record at once; the webdataset stages (`compat.stages`) draw for
one window at a time through the same functions.
"""

from __future__ import annotations

from collections.abc import Callable

from bionemo_wds.core.lineage import drop_ranks, parse_lineage
from bionemo_wds.core.seeds import salted_flip, salted_uniforms
from bionemo_wds.errors import OptionError
from bionemo_wds.load.rows import BlockRows


def row_flip(block: BlockRows, row: int, p: float, salt: int) -> bool:
    """Whether window `row` of a decoded record is reverse-complemented (probability `p`, pass `salt`)."""
    return p >= 1 or (p > 0 and block.flips(p, salt)[row])


def key_flip(key: str, p: float, salt: int) -> bool:
    """`row_flip` of a window known by its key alone (a sample given as a dict)."""
    return p >= 1 or (p > 0 and salted_flip(key, p, salt))


def dropped_tag(tag: bytes, key: str, p: float, salt: int) -> bytes:
    """`tag` of window `key` after dropout with probability `p` (salt: `seeds.tag_salt`): in a
    lineage tag each rank's value independently becomes ``None`` (Evo2's ``random_lineage_dropout``);
    any other tag is dropped whole. The draws depend only on (salt, key)."""
    if not tag or p <= 0:
        return tag
    text = tag.decode("ascii")
    ranks = parse_lineage(text)
    if ranks is None:
        return b"" if salted_uniforms(key, 1, salt)[0] < p else tag
    keep = [u >= p for u in salted_uniforms(key, len(ranks), salt)]
    return drop_ranks(text, keep).encode("ascii") if not all(keep) else tag


def check_tag_room(tags: list[bytes], keys: list[str], max_tag: int) -> None:
    """A dropped lineage tag can grow (``p__Ab`` -> ``p__None``); prepare leaves room for that since
    lineage dropout exists, a dataset prepared before did not: say so instead of a layout error."""
    for tag, key in zip(tags, keys):
        if len(tag) > max_tag:
            raise OptionError(
                f"window {key}: its control tag after tag dropout ({tag.decode('ascii')!r}, {len(tag)} bytes) "
                f"is longer than the {max_tag} bytes the dataset leaves for tags; prepare the dataset again "
                "with this version (it leaves room for lineage dropout) or set tag_dropout=0"
            )


class Salts(dict):
    """The salt of each (seed, pass) a batch's windows draw by, derived once (`seeds.flip_salt`,
    `seeds.tag_salt`)."""

    def __init__(self, derive: Callable[[int, int], int]):
        super().__init__()
        self.derive = derive

    def __missing__(self, draw: tuple[int, int]) -> int:
        salt = self[draw] = self.derive(*draw)
        return salt
