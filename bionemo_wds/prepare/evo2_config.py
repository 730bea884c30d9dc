"""bionemo's Evo2 preprocessing config (`prepare --evo2-config FILE`) as prepare runs.

bionemo-framework's `preprocess_evo2` reads a YAML list of `Evo2PreprocessingConfig` mappings and
writes one Megatron indexed dataset per entry. Teams that have such a file can prepare the same
FASTA with it: each entry becomes one prepare run (its inputs, its output directory, the options
its fields map to). `FIELDS` is the one table of what each field does here, read by the reader, the
tests and the docs (`mapping_markdown`):

- ``map``: the field sets our option(s) (``datapaths`` -> INPUTS, ``seed`` -> ``--seed``, ...);
- ``ignore``: accepted with a note, whatever its value: a scheduling knob that changes no byte;
- ``refuse``: accepted at its default value only. Any other value is refused, naming the field
  and why: something we deliberately do elsewhere (reverse complements and lineage dropout are drawn
  at load, seeded per epoch and window, rather than baked into the data once) or do not do
  (another tokenizer, RNA transcription).

Any problem (an unknown field, with the closest known one; a value we cannot honour; a missing
FASTA) is one `BadInputError` line naming the file and the field, raised before anything is written.
"""

from __future__ import annotations

import difflib
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from bionemo_wds.core.lineage import DROPPED, RANKS, format_lineage
from bionemo_wds.errors import BadInputError

MAP, IGNORE, REFUSE = "map", "ignore", "refuse"

_BYTES = "tokens are byte-level ids (one per base, uint8), fixed by the format"
_TOKENIZER = f"{_BYTES}; no other tokenizer or vocabulary is used"


@dataclass(frozen=True)
class Evo2Field:
    """One `Evo2PreprocessingConfig` field: its default, what we do with it and with what (or why)."""

    #: The field's default in `Evo2PreprocessingConfig`.
    default: Any
    #: `MAP`, `IGNORE` or `REFUSE`.
    action: str
    #: `MAP`: the prepare option(s) it sets and how; `IGNORE`, `REFUSE`: the reason.
    what: str
    #: Other values that also mean "not set" (``special_tokens: null`` for ``{}``).
    also_default: tuple[Any, ...] = ()

    def is_default(self, value: Any) -> bool:
        """Does `value` leave the field at its default (which is never refused)?"""
        return any(
            isinstance(value, bool) == isinstance(d, bool) and value == d for d in (self.default, *self.also_default)
        )


#: Every field of bionemo's `Evo2PreprocessingConfig` (and of its older versions), in its order.
FIELDS: dict[str, Evo2Field] = {
    "datapaths": Evo2Field(
        [], MAP, "INPUTS with --source fasta (FASTA files, each must exist; relative to the current directory)"
    ),
    "output_dir": Evo2Field(None, MAP, "--out OUTPUT_DIR/OUTPUT_PREFIX (the current directory when null)"),
    "output_prefix": Evo2Field(None, MAP, "--out OUTPUT_DIR/OUTPUT_PREFIX: one output directory per entry"),
    "train_split": Evo2Field(
        0.7, MAP, "--split TRAIN,VALID,TEST (absolute values, normalised; whole sequences, length-stratified)"
    ),
    "valid_split": Evo2Field(0.2, MAP, "--split (the val ratio)"),
    "test_split": Evo2Field(0.1, MAP, "--split (the test ratio)"),
    "overwrite": Evo2Field(False, MAP, "--overwrite"),
    "embed_reverse_complement": Evo2Field(
        False,
        REFUSE,
        "reverse complements are drawn at load, seeded per epoch (GenomicDataset(rc_prob=...)), "
        "not stored as extra documents",
    ),
    "random_reverse_complement": Evo2Field(
        0.0,
        REFUSE,
        "reverse complements are drawn at load, seeded per epoch (GenomicDataset(rc_prob=...)), not baked in once",
    ),
    "random_lineage_dropout": Evo2Field(
        0.0,
        REFUSE,
        "lineage ranks are dropped at load, seeded per window (GenomicDataset(tag_dropout=...)), not baked in once",
    ),
    "transcribe": Evo2Field(None, REFUSE, "bases are stored as given; there is no RNA (back-)transcription"),
    "force_uppercase": Evo2Field(False, MAP, "--case upper when true (--case keep when false)"),
    "indexed_dataset_dtype": Evo2Field("uint8", REFUSE, _BYTES),
    "append_eod": Evo2Field(True, REFUSE, "every sample ends with EOS, added at load; it cannot be left out"),
    "enforce_sample_length": Evo2Field(
        None, REFUSE, "samples are windows of --seq-length tokens, padded at load; set --seq-length instead"
    ),
    "ftfy": Evo2Field(False, REFUSE, "bases are checked as IUPAC codes (--on-invalid), not repaired as text"),
    "tokenizer_type": Evo2Field("Byte-Level", REFUSE, _TOKENIZER),
    "vocab_file": Evo2Field(None, REFUSE, _TOKENIZER),
    "vocab_size": Evo2Field(512, REFUSE, _TOKENIZER),
    "merges_file": Evo2Field(None, REFUSE, _TOKENIZER),
    "tokenizer_model_name": Evo2Field(None, REFUSE, _TOKENIZER),
    "pretrained_tokenizer_model": Evo2Field(None, REFUSE, _TOKENIZER),
    "special_tokens": Evo2Field({}, REFUSE, f"{_TOKENIZER}; the specials are BOS, SEP, EOS, PAD", also_default=(None,)),
    "fast_hf_tokenizer": Evo2Field(False, REFUSE, _TOKENIZER),
    "workers": Evo2Field(
        1, MAP, "--workers when not 1 (at 1, prepare uses every core; the output does not depend on it)"
    ),
    "preproc_concurrency": Evo2Field(100000, IGNORE, "a scheduling knob: it changes no byte of the output"),
    "chunksize": Evo2Field(1, IGNORE, "a scheduling knob: it changes no byte of the output"),
    "drop_empty_sequences": Evo2Field(
        False, REFUSE, "an empty sequence is refused, naming it, rather than dropped: remove it from the FASTA"
    ),
    "nnn_filter": Evo2Field(
        False,
        REFUSE,
        "sequences holding NNN are not dropped; --split-at-n 3 cuts them at N runs instead, keeping their bases",
    ),
    "seed": Evo2Field(None, MAP, "--seed (when null: our default seed, so a run repeats)"),
    "taxonomy_data": Evo2Field(
        {},
        MAP,
        "--tags substring with one --tag-map ID_SUBSTRING=|d__...;s__...| per key, in order (the first key "
        "found in the sequence id wins; a missing rank is None)",
        also_default=(None,),
    ),
    "prompt_spacer_length": Evo2Field(
        131072,
        REFUSE,
        "the tag is put once at the start of every window, at load, not repeated inside a sequence",
    ),
    # fields of older versions
    "subsequence_length": Evo2Field(None, REFUSE, "sequences are cut into windows of --seq-length at prepare"),
    "include_sequence_id": Evo2Field(
        False, REFUSE, "sequence ids are kept in the catalog and sample keys, not in the bases"
    ),
    "gzip_data": Evo2Field(False, REFUSE, "shards hold raw bases; --compress zstd compresses them instead"),
    "taxonomy_path": Evo2Field(None, REFUSE, "give the lineages inline as taxonomy_data"),
}

#: Lineage fields of a `taxonomy_data` value, in `RANKS` order (`kingdom` is older versions' `domain`).
LINEAGE_FIELDS = ("domain", "phylum", "clazz", "order", "family", "genus", "species")
LINEAGE_ALIASES = {"kingdom": "domain"}


@dataclass(frozen=True)
class Evo2Run:
    """One entry of an Evo2 preprocessing config as a prepare run."""

    #: The entry's number in the file (1 for a single mapping).
    entry: int
    inputs: list[str]
    out: str
    #: `PrepareOptions` field -> value, for what the entry's fields set (source, split, case and overwrite
    #: always: Evo2's split defaults differ from ours, and its datapaths are FASTA).
    options: dict[str, Any]
    #: One line per field accepted but ignored.
    notes: list[str] = field(default_factory=list)


def read_evo2_config(path: str | Path) -> list[Evo2Run]:
    """The runs an Evo2 preprocessing YAML (a list of config mappings, or one mapping) asks for.

    Every entry is checked, and no two may share an output directory, before any run starts.
    """
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise BadInputError(f"--evo2-config {path} cannot be read: {' '.join(str(exc).split())}") from exc
    entries = data if isinstance(data, list) else [data]
    if not entries or not all(isinstance(e, Mapping) for e in entries):
        raise BadInputError(f"--evo2-config {path}: expected a list of Evo2PreprocessingConfig mappings (or one)")
    runs = [
        evo2_run(e, f"--evo2-config {path}" + (f" entry {i}" if len(entries) > 1 else ""), i)
        for i, e in enumerate(entries, 1)
    ]
    seen: dict[Path, int] = {}
    for run in runs:
        key = Path(run.out).resolve()
        if key in seen:
            raise BadInputError(
                f"--evo2-config {path}: entries {seen[key]} and {run.entry} both write {run.out} "
                "(output_dir/output_prefix); give each its own"
            )
        seen[key] = run.entry
    return runs


def evo2_run(entry: Mapping[str, Any], where: str, number: int = 1) -> Evo2Run:
    """One `Evo2PreprocessingConfig` mapping -> its prepare run; `where` names the file in messages."""
    for name in entry:
        if name not in FIELDS:
            raise BadInputError(f"{where}: unknown field {name!r}{closest(name, FIELDS)}")
    values = {name: entry.get(name, spec.default) for name, spec in FIELDS.items()}
    notes = []
    for name, spec in FIELDS.items():
        value = values[name]
        if spec.action == REFUSE and not spec.is_default(value):
            raise BadInputError(f"{where}: {name} {value!r} is refused: {spec.what} (leave it out)")
        if spec.action == IGNORE and not spec.is_default(value):
            notes.append(f"{where}: {name} is ignored: {spec.what}")
    options: dict[str, Any] = {"source": "fasta", "split": _split(values, where)}
    options["overwrite"] = _flag(values, "overwrite", where)
    options["case"] = "upper" if _flag(values, "force_uppercase", where) else "keep"
    for name in ("seed", "workers"):
        if not FIELDS[name].is_default(values[name]):  # Evo2's 1 worker and unseeded split: ours stay
            options[name] = _integer(values[name], name, where, 0 if name == "seed" else 1)
    tag_map = _tag_map(values["taxonomy_data"], where)
    if tag_map:
        options.update(tags="substring", tag_map=tag_map)
    return Evo2Run(number, _datapaths(values["datapaths"], where), _out(values, where), options, notes)


def closest(name: Any, known: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the known name closest to `name`, or ""."""
    close = difflib.get_close_matches(str(name), list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _datapaths(value: Any, where: str) -> list[str]:
    """`datapaths`: a non-empty list of existing files."""
    if not isinstance(value, list) or not all(isinstance(p, str) and p for p in value):
        raise BadInputError(f"{where}: datapaths must be a list of FASTA paths, got {value!r}")
    if not value:
        raise BadInputError(f"{where}: datapaths is empty: no FASTA to prepare")
    for p in value:
        if not Path(p).is_file():
            raise BadInputError(f"{where}: datapaths: {p} does not exist or is not a file")
    return list(value)


def _out(values: Mapping[str, Any], where: str) -> str:
    """`output_dir`/`output_prefix` -> our output directory (Evo2 names files there with the prefix)."""
    out_dir, prefix = values["output_dir"], values["output_prefix"]
    for name, value in (("output_dir", out_dir), ("output_prefix", prefix)):
        if value is not None and not (isinstance(value, str) and value):
            raise BadInputError(f"{where}: {name} must be a path, got {value!r}")
    if prefix is not None and (Path(prefix).name != prefix or prefix in (".", "..")):
        raise BadInputError(f"{where}: output_prefix {prefix!r} must be a plain name (it names the output directory)")
    if out_dir is None and prefix is None:
        raise BadInputError(f"{where}: output_dir and output_prefix are both unset: name the output")
    return str(Path(out_dir or ".") / prefix) if prefix is not None else str(out_dir)


def _number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _split(values: Mapping[str, Any], where: str) -> tuple[float, float, float]:
    """`train_split`/`valid_split`/`test_split` -> `--split` ratios (absolute values, as Evo2 takes them)."""
    names = ("train_split", "valid_split", "test_split")
    for name in names:
        if not _number(values[name]):
            raise BadInputError(f"{where}: {name} must be a number, got {values[name]!r}")
    ratios = tuple(abs(float(values[name])) for name in names)
    if not sum(ratios) > 0:
        raise BadInputError(f"{where}: train_split, valid_split, test_split are all zero")
    return ratios  # type: ignore[return-value]  # three, by construction


def _flag(values: Mapping[str, Any], name: str, where: str) -> bool:
    if not isinstance(values[name], bool):
        raise BadInputError(f"{where}: {name} must be true or false, got {values[name]!r}")
    return bool(values[name])


def _integer(value: Any, name: str, where: str, minimum: int) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or int(value) < minimum:
        raise BadInputError(f"{where}: {name} must be an integer of at least {minimum}, got {value!r}")
    return int(value)


def _tag_map(taxonomy: Any, where: str) -> dict[str, str]:
    """`taxonomy_data` -> {id substring: Evo2's lineage tag ``|d__...;p__...;...;s__...|``}, in order."""
    if taxonomy is None:
        return {}
    if not isinstance(taxonomy, Mapping):
        raise BadInputError(f"{where}: taxonomy_data must map sequence-id substrings to lineages, got {taxonomy!r}")
    return {
        _key(key, where): lineage_tag(lineage, f"{where}: taxonomy_data.{key}") for key, lineage in taxonomy.items()
    }


def _key(key: Any, where: str) -> str:
    if not isinstance(key, str) or not key:
        raise BadInputError(f"{where}: taxonomy_data key {key!r} must be a non-empty sequence-id substring")
    return key


def lineage_tag(lineage: Any, where: str) -> str:
    """One `Evo2TaxonomyLineage` mapping -> the tag Evo2 writes for it, a missing rank as ``None``."""
    if not isinstance(lineage, Mapping):
        raise BadInputError(f"{where} must be a mapping of {', '.join(LINEAGE_FIELDS)}, got {lineage!r}")
    ranks: dict[str, str] = {}
    for name, value in lineage.items():
        rank = LINEAGE_ALIASES.get(str(name), str(name))
        if rank not in LINEAGE_FIELDS:
            raise BadInputError(f"{where}: unknown lineage field {name!r}{closest(name, LINEAGE_FIELDS)}")
        if rank in ranks:
            raise BadInputError(f"{where}: {name!r} and 'domain' are the same rank: give one")
        if isinstance(value, bool) or not (value is None or isinstance(value, (str, int))):
            raise BadInputError(f"{where}.{name} must be a name or null, got {value!r}")
        text = DROPPED if value is None else str(value)
        if not text or any(c in text for c in "|;\n"):
            raise BadInputError(f"{where}.{name} {text!r} must be non-empty and hold no '|' or ';'")
        ranks[rank] = text
    return format_lineage([(r, ranks.get(f, DROPPED)) for r, f in zip(RANKS, LINEAGE_FIELDS)])


def mapping_markdown() -> str:
    """`FIELDS` as a markdown table (field, default, what prepare does), for the docs."""
    verbs = {MAP: "sets", IGNORE: "ignored (a note)", REFUSE: "refused unless default"}
    rows = ["| Evo2 field | default | here | option or reason |", "| --- | --- | --- | --- |"]
    for name, spec in FIELDS.items():
        default = yaml.safe_dump(spec.default, default_flow_style=True).strip().removesuffix("...").strip()
        rows.append(f"| `{name}` | `{default}` | {verbs[spec.action]} | {spec.what.replace('|', chr(92) + '|')} |")
    return "\n".join(rows)
