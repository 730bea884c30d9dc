"""Read-only views of a prepared dataset: `inspect` (from the manifest) and `verify` (every byte)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tqdm import tqdm

from bionemo_wds.core.windowing import default_stride
from bionemo_wds.errors import ManifestError, refusal_named
from bionemo_wds.format import (
    INDEXED_FORMAT_VERSION,
    HashingReader,
    Manifest,
    Params,
    ShardInfo,
    SplitInfo,
    WindowBlock,
    decode_record,
    has_record_index,
    iter_record_members,
    read_manifest,
    shard_indexes,
    stored_case,
    unlisted_shards,
)
from bionemo_wds.format.record_index import RecordIndex
from bionemo_wds.format.sequence_table import (
    SEQUENCE_TABLE_NAME,
    missing_table_message,
    read_sequence_table,
    table_entry,
    table_problems,
)
from bionemo_wds.prepare.sequence_checks import PieceLengths, check_sequence_index
from bionemo_wds.prepare.splits import SPLIT_NAMES
from bionemo_wds.storage.store import Store

#: Record-index disagreements listed per shard before the rest are summed up in one line.
MAX_RECORD_PROBLEMS = 10


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).rjust(w) if i else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
    return "\n".join([line(header), "  ".join("-" * w for w in widths), *map(line, rows)])


def _source_line(params: Params) -> list[str]:
    """One line on where the sequences came from and how they were grouped and cut, when not plain FASTA."""
    source = params.source or {}
    parts = []
    if source.get("kind", "fasta") != "fasta":
        parts.append(f"source {source['kind']}")
    if source.get("y_key"):
        parts.append(f"tags: labels of {source['y_key']!r}")
    if (source.get("tags") or {}).get("untagged_sequences"):
        parts.append(f"{source['tags']['untagged_sequences']} sequences untagged by --tags {params.tags}")
    if params.group_by:
        grouping = source.get("group_by") or {}
        parts.append(
            f"group-by {params.group_by} ({grouping.get('groups', '?')} groups, "
            f"{grouping.get('ungrouped_sequences', 0)} sequences ungrouped)"
        )
    replaced = source.get("replaced")  # --on-invalid replace-N
    if replaced:
        parts.append(f"{replaced['bases']} bases replaced with N in {replaced['sequences']} sequences")
    if params.split_at_n:
        cut = source.get("split_at_n") or {}
        parts.append(
            f"split at runs of >= {params.split_at_n} N ({cut.get('sequences_cut', '?')} sequences cut, "
            f"{cut.get('pieces', '?')} pieces)"
        )
    return ["  ".join(parts)] if parts else []


def inspect_text(root: str | Path, storage_options: dict[str, Any] | None = None) -> str:
    """Splits, shards, samples, tokens, bytes per token, the record index files (format version 4)
    and the length mix, as text tables (`root` a directory or a URL; only the manifest is read)."""
    from bionemo_wds.format.manifest import MANIFEST_NAME

    manifest = read_manifest(str(root), storage_options)  # checks what every reader needs
    params = manifest.params
    splits = manifest.splits
    for name, s in splits.items():  # and what only `inspect` reads (all versions write it)
        for key in ("n_sequences", "n_bases", "n_tokens", "length_mix"):
            if getattr(s, key) is None:
                where = Store(str(root), storage_options).url(MANIFEST_NAME)
                raise ManifestError(f"{where} is damaged: it has no splits.{name}.{key} (prepare the dataset again)")
    inputs = [i for i in (manifest.request or {}).get("inputs") or [] if isinstance(i, dict)]  # path, bytes
    input_size = _fmt_bytes(sum(int(i.get("bytes", 0)) for i in inputs))
    input_paths = ", ".join(str(i.get("path")) for i in inputs[:3]) or "-"
    if len(inputs) > 3:
        input_paths += f", ... ({len(inputs) - 3} more)"
    rows, total = [], [0, 0, 0, 0, 0, 0]
    for name, s in splits.items():
        size = sum(sh.bytes for sh in s.shards)
        n_tokens, n_bases = s.n_tokens or 0, s.n_bases or 0  # all there (checked above)
        vals = [len(s.shards), s.n_sequences or 0, s.n_samples, n_tokens, n_bases, size]
        total = [a + b for a, b in zip(total, vals)]
        rows.append(
            [
                name,
                *[f"{v:,}" for v in vals[:5]],
                _fmt_bytes(size),
                f"{size / max(n_tokens, 1):.3f}",
                f"{size / max(n_bases, 1):.3f}",
            ]
        )
    rows.append(
        [
            "all",
            *[f"{v:,}" for v in total[:5]],
            _fmt_bytes(total[5]),
            f"{total[5] / max(total[3], 1):.3f}",
            f"{total[5] / max(total[4], 1):.3f}",
        ]
    )
    out = [
        f"dataset {root}  (format v{manifest.format_version}, bionemo-wds {manifest.package_version or '?'})",
        f"inputs ({len(inputs)} file(s), {input_size}): {input_paths}",
        _params_line(params, stored_case(manifest)),
        *_layout_line(params),
        *_source_line(params),
        "",
        _table(
            ["split", "shards", "sequences", "samples", "tokens", "bases", "bytes", "bytes/token", "bytes/base"], rows
        ),
        *_index_files(splits),
        _table_line(manifest),
        "",
        "length mix (share of the split's bases per length bucket; sequences in brackets)" + _rule_note(params),
    ]
    labels = list(next(iter(splits.values())).length_mix or {}) if splits else []
    mix_rows = []
    for name, s in splits.items():
        mix = s.length_mix or {}
        mix_rows.append(
            [name, *[f"{mix[b]['bases'] / max(s.n_bases or 0, 1):6.1%} ({mix[b]['sequences']})" for b in labels]]
        )
    out.append(_table(["split", *labels], mix_rows))
    if manifest.skipped:
        out.append(f"\nskipped sequences: {len(manifest.skipped)} (see manifest 'skipped')")
    if manifest.unassigned_sequences:
        out.append(f"sequences in no split list: {manifest.unassigned_sequences}")
    return "\n".join(out)


def _rule_note(params: Params) -> str:
    """Which rule split the sequences by the ratios, when the manifest names one (`splits.SPLIT_RULES`)."""
    return f"; split by the {params.split_rule} rule, seed {params.seed}" if params.split_rule else ""


def _params_line(params: Params, case: str) -> str:
    """The parameters the shards were written with. A sequence-layout dataset stores pieces, not
    training windows: its line names them so (`_layout_line` says what the loader cuts)."""
    if params.layout == "sequences":
        cut = f"pieces of up to {params.window_length} bases"
        per_record = f"pieces/record {params.windows_per_record}"
    else:
        cut = f"seq_length {params.seq_length}  window {params.window_length}  stride {params.stride}"
        per_record = f"windows/record {params.windows_per_record}"
    return (
        f"{cut}  tail {params.tail}  tags {params.tags}  case {case}  seed {params.seed}  "
        f"{per_record}  codec {params.codec or 'none'}  layout {params.layout}"
    )


def _layout_line(params: Params) -> list[str]:
    """What the sequence layout stores and what the loader cuts of it, when the dataset has it."""
    if params.layout != "sequences":
        return []
    stride = min(default_stride(params.seq_length), params.window_length)
    return [
        "sequence layout: every base stored once, as pieces of whole sequences in a seeded order (the samples "
        f"below count pieces); the loader cuts the windows: by default seq_length {params.seq_length} (what "
        f"prepare was given) and stride {stride}, or any seq_length, stride or pack=True it is asked for"
    ]


def _index_files(splits: dict[str, SplitInfo]) -> list[str]:
    """One line each on the splits' record index files (format version 4) and sequence index files
    (version 5), when there are any."""
    files = [s.record_index for s in splits.values() if s.record_index is not None]
    out = []
    if files:
        described = [f"{f.path} {_fmt_bytes(int(f.bytes))} ({int(f.records):,} records)" for f in files]
        out.append(f"record index: {', '.join(described)}")
    sequences = [s.sequence_index for s in splits.values() if s.sequence_index is not None]
    if sequences:
        described = [f"{f.path} {_fmt_bytes(int(f.bytes))} ({int(f.sequences):,} sequences)" for f in sequences]
        out.append(f"sequence index: {', '.join(described)}")
    return out


def _table_line(manifest: Manifest) -> str:
    """One line on the sequence table (`format.sequence_table`), or on its absence."""
    entry = table_entry(manifest)
    if entry is None:
        return f"sequence table: none (prepared before it existed; rerun the same prepare to add {SEQUENCE_TABLE_NAME})"
    size = _fmt_bytes(int(entry.get("bytes", 0)))
    return f"sequence table: {entry.get('path')} {size} ({int(entry.get('rows', 0)):,} rows)"


def _check_table(store: Store, manifest: Manifest, report: VerifyReport) -> None:
    """The sequence table against its manifest entry (size, sha256, rows) and the splits' counts."""
    if table_entry(manifest) is None:
        report.notes.append(missing_table_message(store.root))
        return
    try:
        found: list[str] = []
        table = read_sequence_table(store, manifest, found)
    except ManifestError as exc:
        report.problems.append(str(exc))
        return
    report.problems += found if found else table_problems(table, manifest)


@dataclass
class VerifyReport:
    checked: int = 0
    samples: int = 0
    problems: list[str] = field(default_factory=list)
    #: facts that are no problem, e.g. that a dataset of an older format has no record index
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify(root: str | Path, progress: bool = True, storage_options: dict[str, Any] | None = None) -> VerifyReport:
    """Re-read every shard: size, sha256, readable records, sample and token counts, and each
    record's offset, size, window count and crc32 against the record index (format versions 3 and
    4; in version 4 the index file itself against its listed size, sha256 and row counts too).
    The sequence table (`format.sequence_table`) against its entry and the splits. `root` is a
    directory or a URL (each shard, and each index file, is then streamed once)."""
    store = Store(root, storage_options)
    manifest = read_manifest(store)
    report = VerifyReport()
    indexed = has_record_index(manifest)
    if not indexed:
        report.notes.append(
            f"{store.root} has no record index (format version {manifest.format_version}; written since version "
            f"{INDEXED_FORMAT_VERSION}): records are checked by their shard's sha256 only"
        )
    _check_table(store, manifest, report)
    shards: list[tuple[ShardInfo, RecordIndex | None, tuple[PieceLengths, int] | None]] = []
    listed: dict[str, str] = {}  # shard path -> the split that lists it first
    for split, info in manifest.splits.items():
        held = [sum(getattr(sh, key) for sh in info.shards) for key in ("n_samples", "n_tokens")]
        for key, total in zip(("n_samples", "n_tokens"), held):
            if getattr(info, key) is not None and getattr(info, key) != total:
                report.problems.append(
                    f"manifest.json: the {split} split lists {key} {getattr(info, key)} but its shards hold {total}"
                )
        indexes = _split_indexes(store, manifest, split, report.problems)
        pieces = check_sequence_index(store, manifest, split, indexes, report.problems)  # the sequence layout
        first_piece = 0
        for n, sh in enumerate(info.shards):
            first_piece += sh.n_samples
            shard_pieces = None if pieces is None else (pieces, first_piece - sh.n_samples)
            path = sh.path
            if path in listed:  # read once; a loader would read its windows twice
                report.problems.append(f"{path}: listed more than once in the manifest ({listed[path]}, {split})")
                continue
            if path.rpartition("/")[0] != split:
                report.problems.append(f"{path}: listed in the {split} split but not in its folder {split}/")
            listed[path] = split
            shards.append((sh, indexes[n] if indexes is not None else None, shard_pieces))
    found: dict[str, dict[str, int] | None] = {}
    for split in dict.fromkeys([*manifest.splits, *SPLIT_NAMES]):  # a split's folder without its split too
        found[split] = store.sizes(split)  # None: the protocol cannot list (each shard is then fetched)
        for rel in unlisted_shards(split, found[split] or {}, manifest.params.prefix, listed):
            report.problems.append(f"{rel}: shard on disk but not in the manifest")
    for sh, index, shard_pieces in tqdm(shards, desc="verify", unit="shard", disable=not progress):
        split, _, name = sh.path.rpartition("/")
        report.checked += 1
        if found.get(split) is not None and name not in found[split]:  # type: ignore[operator]
            report.problems.append(f"{sh.path}: missing")
            continue
        if indexed and index is None and manifest.format_version == INDEXED_FORMAT_VERSION and sh.records is None:
            report.problems.append(f"{sh.path}: no record index in the manifest")
        try:  # the system refusing the file (permission, too many open files) is no problem of it
            with refusal_named(store.url(sh.path)), store.open(sh.path) as fh:
                read = _read_shard(fh, sh.path, index, shard_pieces)
        except FileNotFoundError:
            report.problems.append(f"{sh.path}: missing")
            continue
        size, sha, samples, tokens, records, parse_problem, disagree = read
        if size != sh.bytes:
            report.problems.append(f"{sh.path}: {size} bytes, manifest says {sh.bytes} (truncated or replaced)")
        elif sha != sh.sha256:
            report.problems.append(f"{sh.path}: sha256 {sha[:12]}... differs from the manifest's {sh.sha256[:12]}...")
        if disagree:
            shown = disagree[:MAX_RECORD_PROBLEMS]
            report.problems += [f"{sh.path}: {d}" for d in shown]
            if len(disagree) > len(shown):
                report.problems.append(
                    f"{sh.path}: {len(disagree) - len(shown)} more disagreement(s) with the record index"
                )
        if index is not None and not parse_problem and records < len(index):  # more: one line each above
            report.problems.append(f"{sh.path}: holds {records} records, the record index lists {len(index)}")
        if parse_problem:
            report.problems.append(parse_problem)
            continue
        report.samples += samples
        if samples != sh.n_samples or tokens != sh.n_tokens:
            report.problems.append(
                f"{sh.path}: holds {samples} samples / {tokens} tokens, manifest says {sh.n_samples} / {sh.n_tokens}"
            )
    return report


def _split_indexes(
    store: Store, manifest: Manifest, split: str, problems: list[str]
) -> list[RecordIndex | None] | None:
    """Each shard's record index of `split` (`format.shard_indexes`, its index file's sha256
    checked); what is wrong with the index goes to `problems`, and an index that cannot be used at
    all (a version-4 file missing, truncated, not the listed one) leaves the shards to be checked
    without it."""
    try:
        return shard_indexes(store, manifest, split, problems)
    except ManifestError as exc:
        problems.append(f"{exc}; the {split} split's records are checked without it")
        return None


def _read_shard(
    fh: Any, name: str, index: Any, pieces: tuple[PieceLengths, int] | None = None
) -> tuple[int, str, int, int, int, str | None, list[str]]:
    """One read of a shard serves the hash, the parse and the record-index check: (size, sha256,
    samples, tokens, records, the first parse problem, the record-index disagreements). `pieces`
    (the sequence layout): the split's piece lengths and the position of the shard's first piece,
    which each record's lengths are checked against (the first disagreement per shard)."""
    samples = tokens = records = 0
    parse_problem = None
    disagree: list[str] = []
    reader = HashingReader(fh)
    try:
        for key, offset, data in iter_record_members(reader, name):
            block: WindowBlock | None = None
            try:  # decode_record checks each record's lengths against its tokens
                block = decode_record(data)
            except Exception as exc:
                parse_problem = parse_problem or f"{name}: record {key} cannot be decoded: {exc}"
            if index is not None:
                windows = len(block) if block is not None else None
                disagree += index.disagreements(records, key, offset, data, windows)
            if pieces is not None and block is not None:
                wrong = pieces[0].disagreement(key, pieces[1] + samples, block.lengths)
                if wrong is not None:
                    disagree.append(wrong)
                    pieces = None  # the rest of the shard would disagree the same way
            records += 1
            if block is not None:
                samples += len(block)
                tokens += len(block.tokens)
    except ValueError as exc:  # not a complete tar
        parse_problem = f"{name}: {exc}"
    size, sha = reader.finish()
    return size, sha, samples, tokens, records, parse_problem, disagree
