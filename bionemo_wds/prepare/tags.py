"""Control tags (`--tags RULE`): the tag text each sequence gets, from its header line or its id.

The loader puts a sequence's tag between BOS and SEP of each of its windows (Evo2's control tags);
prepare only decides the text and leaves room for it in every window (`Catalog.max_tag_bytes`).
Rules, in the way each data source writes its tags:

- ``none``: no tag;
- ``description``: the FASTA header text after the name;
- ``lineage``: the taxonomic lineage in the header, Evo2's ``|d__...;p__...;...;s__Genus species|``
  or a bare GTDB ``d__Bacteria;p__...``, normalised to the piped form (`lineage.find_lineage`);
- ``sharded-eden``: ``<ctrl_x>`` for an id ``X__...``, as the sharded-Eden loader builds it;
- ``regex:PATTERN``: the first capture group of the first match of PATTERN in the header line (name
  and description, without ``>``; the contig id for sharded-Eden), the whole match without groups;
- ``tsv:FILE``: lines ``seq_id<TAB>tag`` (read like `--group-by tsv:`, `groups.read_id_tsv`);
- ``substring``: the tag of the first ``--tag-map SUBSTRING=TAG`` entry, in the order given, whose
  SUBSTRING occurs in the sequence id (bionemo's Evo2 ``taxonomy_data``, `prepare.evo2_config`).

A sequence the rule gives no tag is counted (`note_untagged`): a warning, and
``params.source.tags.untagged_sequences`` in the manifest; ``--strict-tags`` makes it an error.

Sources whose sequences carry Evo2's lineage tag inside the bases (Megatron documents written by
``preprocess_evo2``, the texts of OpenGenome2's JSON lines) take it out with `strip_embedded_tag`:
the tag a sequence starts with becomes its control tag, and every occurrence of it leaves the bases.
"""

from __future__ import annotations

import argparse
import functools
import re
import warnings
from collections.abc import Callable, Mapping

from bionemo_wds.core.lineage import find_lineage, parse_lineage
from bionemo_wds.core.tokenizer import encode_tag
from bionemo_wds.errors import OptionError, SourceError
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.groups import read_id_tsv, regex_problem

#: The `--tags` rules without a parameter.
TAG_MODES = ("none", "description", "lineage", "sharded-eden", "substring")
#: Every `--tags` rule, as `--help` and messages name them.
TAG_RULES = (*TAG_MODES, "regex:PATTERN", "tsv:FILE")
#: Plain rules that read the header line's description (a source without headers cannot serve them).
HEADER_TAGS = ("description", "lineage")
# a lineage tag at the very start of a sequence's bases
_LEADING_TAG = re.compile(rb"^\|d__[^|]*\|")


def tag_rule_problem(rule: object) -> str | None:
    """What is wrong with a `--tags` value, or None (a `regex:` must compile, a `tsv:` name a file)."""
    if isinstance(rule, str):
        if rule in TAG_MODES or (rule.startswith("tsv:") and len(rule) > 4):
            return None
        if rule.startswith("regex:") and len(rule) > 6:
            return regex_problem(rule[6:])
    return f"must be one of {', '.join(TAG_RULES)}"


def reads_headers(rule: str) -> bool:
    """Does `rule` read FASTA header lines (rather than sequence ids alone)?"""
    return rule in HEADER_TAGS or rule.startswith("regex:")


def tag_file(rule: str) -> str | None:
    """The table a ``tsv:FILE`` rule reads, else None."""
    return rule[4:] if rule.startswith("tsv:") else None


def eden_tag(seq_id: str) -> str:
    """The sharded-Eden control tag of a contig id: ``BCR__ECT-S1__CT1-1`` -> ``<ctrl_bcr>``."""
    return f"<ctrl_{seq_id.split('__')[0].lower()}>"


def _description(header: str) -> str:
    parts = header.split(None, 1)
    return parts[1] if len(parts) > 1 else ""


def tag_map_problem(table: object) -> str | None:
    """What is wrong with a `--tag-map` table (SUBSTRING -> TAG), or None: non-empty strings both."""
    if isinstance(table, dict) and all(isinstance(k, str) and k and isinstance(v, str) and v for k, v in table.items()):
        return None
    return "must map non-empty id substrings to non-empty tags (SUBSTRING=TAG)"


def parse_tag_pair(text: str) -> tuple[str, str]:
    """`--tag-map SUBSTRING=TAG` -> (SUBSTRING, TAG), split at the first '=' (a lineage tag may hold '=')."""
    key, sep, tag = text.partition("=")
    if not sep or not key or not tag:
        raise argparse.ArgumentTypeError(f"expected SUBSTRING=TAG, got {text!r}")
    return key, tag


def tag_map_conflict(rule: str, tag_map: Mapping[str, str] | None) -> str | None:
    """Why `--tags` and `--tag-map` disagree (substring needs the table, other rules ignore it), or None."""
    if (rule == "substring") != bool(tag_map):
        return f"--tag-map SUBSTRING=TAG and --tags substring go together: give both or neither (--tags is {rule})"
    return None


def by_substring(table: Mapping[str, str]) -> Callable[[str], str]:
    """Sequence id -> the tag of the first entry of `table`, in its order, whose key occurs in the id
    (as bionemo's Evo2 preprocessing matches ``taxonomy_data`` keys); empty when none does."""
    entries = list(table.items())

    def tag_of(seq_id: str) -> str:
        return next((tag for key, tag in entries if key in seq_id), "")

    return tag_of


def tagger(rule: str, tag_map: Mapping[str, str] | None = None) -> Callable[[str], str]:
    """Text -> tag under `rule` (empty: no tag). The text is the header line (name and description)
    for a rule that `reads_headers`, else the sequence id. A ``tsv:`` table is read here, once;
    ``substring`` looks ids up in `tag_map` (``--tag-map``), which it needs and no other rule takes."""
    problem = tag_rule_problem(rule)
    if problem is not None:
        raise OptionError(f"--tags {problem}, got {rule!r}")
    if conflict := tag_map_conflict(rule, tag_map):
        raise OptionError(conflict)
    if rule == "none":
        return lambda text: ""
    if rule == "substring":
        assert tag_map is not None
        return by_substring(tag_map)
    if rule == "sharded-eden":  # as the sharded-Eden loader builds it: <ctrl_{first '__' field, lower case}>
        return lambda text: eden_tag(text.split(None, 1)[0] if text.strip() else text)
    if rule == "description":
        return _description
    if rule == "lineage":
        return lambda text: find_lineage(text) or ""
    if rule.startswith("regex:"):
        pattern = re.compile(rule[6:])

        def by_regex(text: str) -> str:
            found = pattern.search(text)
            if found is None:
                return ""
            return (found.group(1) if pattern.groups else found.group(0)) or ""  # a group may not take part

        return by_regex
    path = rule[4:]
    table = read_id_tsv(path, f"--tags {rule}", column="tag", conflict="has two tags")
    return lambda text: table.get(text, "")


def tag_for(header: str, rule: str) -> str:
    """Control tag text of one sequence under `rule` (its header line, or its id; see `tagger`)."""
    return tagger(rule)(header)


def tag_all(names: list[str], texts: list[str], tag_of: Callable[[str], str]) -> list[str]:
    """The tag of each sequence (`names[i]`, whose header line or id is `texts[i]`) by `tag_of` (a
    `tagger`); a tag that is not printable ASCII is an error naming its sequence (`tokenizer.encode_tag`)."""
    tags = [tag_of(text) for text in texts]
    first: dict[str, str] = {}
    for tag, name in zip(tags, names):
        first.setdefault(tag, name)
    for tag, name in first.items():  # each distinct tag checked once, naming its first sequence
        encode_tag(tag, name)
    return tags


def note_untagged(catalog: Catalog, rule: str, strict: bool = False) -> Catalog:
    """Count the sequences `rule` gave no tag, in ``catalog.notes["tags"]`` (for the manifest); when
    any are, warn with the count and the first one, or, `strict` (``--strict-tags``), refuse."""
    if rule == "none":
        return catalog
    names = catalog.names
    untagged = [name for name, tag in zip(names, catalog.tags) if not tag]
    catalog.notes["tags"] = {"rule": rule, "untagged_sequences": len(untagged)}
    if untagged:
        what = f"--tags {rule} gave no tag to {len(untagged)} of {len(names)} sequences (first: {untagged[0]!r})"
        if strict:
            raise SourceError(f"{what}; --strict-tags refuses untagged sequences")
        warnings.warn(f"{what}; they get an empty tag", stacklevel=2)
    return catalog


def embedded_tag(bases: bytes) -> str:
    """The lineage tag `bases` start with (``|d__...|``, checked by `lineage.parse_lineage`), or ""."""
    found = _LEADING_TAG.match(bases)
    return "" if found is None else lineage_text(found.group())


@functools.lru_cache(maxsize=1 << 12)
def lineage_text(raw: bytes) -> str:
    """``|d__...|`` bytes as tag text, or "" when they are no lineage (`lineage.parse_lineage`); cached:
    a corpus repeats a few thousand lineages over millions of records."""
    tag = raw.decode("ascii", "replace")
    return tag if parse_lineage(tag) is not None else ""


def strip_embedded_tag(data: bytes) -> tuple[str, bytes]:
    """(the lineage tag `data` starts with, `data` with every occurrence of that tag taken out);
    ("", `data`) when it starts with none (a tag elsewhere is left in: `scan` refuses its ``|``)."""
    tag = embedded_tag(data) if data[:4] == b"|d__" else ""
    return tag, (data.replace(tag.encode(), b"") if tag else data)
