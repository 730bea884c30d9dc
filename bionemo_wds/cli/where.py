"""`bionemo-wds where DATASET KEY...`: the FASTA bases a batch's key names, from the sequence table.

A key is what a batch's ``keys`` carry (`load.provenance`): a stored window ``<seq_id>/<window>``
(windows layout: its start and length computed from the manifest's window, stride and tail rule,
window numbers running on across the pieces ``--split-at-n`` cut), a document ``<seq_id>:<start>+<length>``
(sequence layout: windows cut at load, packed documents; a packed row's keys joined by ``;`` give one
line each), or a bare sequence id (its rows of the table). One line per match: TSV with a header, or
JSON lines. The strand printed is ``+``: a key names bases of the source sequence; whether a loader
reverse-complemented them is the batch's ``rc`` (``GenomicDataset.provenance`` reports it).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from typing import Any

import numpy as np

from bionemo_wds.errors import BadInputError
from bionemo_wds.format import Manifest, read_manifest
from bionemo_wds.format.sequence_table import SequenceRows, escape, read_sequence_table
from bionemo_wds.load.provenance import Provenance, parse_document_key, parse_window_key, record
from bionemo_wds.prepare.windows import PIECE, window_counts, window_table
from bionemo_wds.storage.store import Store

HELP = "print the input file, sequence, coordinates, split, tag and group a batch key (or sequence id) names"
DESCRIPTION = (
    "Map keys from a batch (its 'keys' field) back to the FASTA bases they hold, using the dataset's "
    "sequence table (sequences.tsv). KEY is a stored window SEQ_ID/WINDOW (windows layout), a document "
    "SEQ_ID:START+LENGTH (sequence layout; a packed row's keys joined by ';' give one line per document) "
    "or a bare sequence id (all its rows). Coordinates are 0-based, end exclusive, in the source sequence; "
    "the strand is + (the key names source bases; a batch's rc field says when the loader reverse-"
    "complemented them). An unknown key exits 2 naming it."
)
#: The columns printed (TSV header; the keys of each JSON line, after ``key``).
COLUMNS = ("key", "split", "file", "seq_id", "start", "end", "strand", "tag", "group")


def add_where_parser(sub: Any, **options: Any) -> argparse.ArgumentParser:
    """Register ``where`` on the subcommand parsers `sub`."""
    parser: argparse.ArgumentParser = sub.add_parser("where", help=HELP, description=DESCRIPTION, **options)
    parser.add_argument("dataset", help="directory or URL (s3://bucket/run1, https://...) holding manifest.json")
    parser.add_argument(
        "keys",
        nargs="+",
        metavar="KEY",
        help="SEQ_ID/WINDOW, SEQ_ID:START+LENGTH (several joined by ';'), or a sequence id",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per line instead of TSV with a header")
    return parser


def window_span(table: SequenceRows, manifest: Manifest, seq_id: str, number: int) -> tuple[int, int] | None:
    """(start in the source sequence, length) of window `number` of `seq_id` as prepare cut it (or an
    Eden window database fixed it: ``params.source.window_db``), or None when it has no such window."""
    params = manifest.params
    window, stride = int(params.window_length), int(params.stride)
    tail = PIECE if params.layout == "sequences" else str(params.tail or "end")
    rows = table.of_sequence(seq_id)
    if (params.source or {}).get("window_db"):  # windows an Eden window database fixed: k starts at k * stride
        start = number * stride
        row = table.locate(seq_id, rows[0].start + start) if rows else None
        return None if row is None else (row.start + start, min(row.start + row.length - start, window))
    lengths = np.array([row.length for row in rows], dtype=np.int64)
    counts = window_counts(lengths, window, stride, tail)
    before = np.cumsum(counts) - counts
    for row, first, count, length in zip(rows, before.tolist(), counts.tolist(), lengths.tolist()):
        if first <= number < first + count:
            cut = window_table(np.zeros(1, np.int64), np.array([length]), window, stride, tail)
            return row.start + int(cut.start[number - first]), int(cut.length[number - first])
    return None


def key_provenance(store: Store, manifest: Manifest, table: SequenceRows, key: str) -> list[tuple[str, Provenance]]:
    """What `key` names (module docstring), each with the key (or the part of a packed key) naming it;
    a `BadInputError` naming the key and the dataset when it names nothing there."""
    rows = table.of_sequence(key)
    if rows:
        return [(key, record(0, store.root, table, key, row.start, row.length, False)) for row in rows]
    out = []
    for part in key.split(";"):
        span: tuple[str, int, int] | None = None
        try:
            span = parse_document_key(part)
        except ValueError:
            try:
                seq_id, number = parse_window_key(part)
            except ValueError:
                seq_id, number = part, -1
            found = window_span(table, manifest, seq_id, number) if number >= 0 else None
            span = (seq_id, *found) if found is not None else None
        row = None if span is None else table.locate(span[0], span[1])
        if span is None or row is None or span[1] + span[2] > row.start + row.length:
            raise BadInputError(
                f"key {part!r} names no sequence, window or document of {store.root} "
                "(a key is SEQ_ID/WINDOW, SEQ_ID:START+LENGTH or a sequence id)"
            )
        out.append((part, record(0, store.root, table, *span, False)))
    return out


def run_where(args: argparse.Namespace) -> int:
    """Print where each of `args.keys` lies in `args.dataset`; exit 2 (raised) for an unknown key."""
    store = Store(args.dataset)
    manifest = read_manifest(store)
    table = read_sequence_table(store, manifest)
    lines = [match for key in args.keys for match in key_provenance(store, manifest, table, key)]
    if not args.json:
        print("\t".join(COLUMNS))
    for key, found in lines:
        fields = {"key": key, **{k: v for k, v in asdict(found).items() if k in COLUMNS}}
        if args.json:
            print(json.dumps({**fields, "dataset": found.dataset}))
        else:
            print("\t".join(escape(str(fields[c])) for c in COLUMNS))
    sys.stdout.flush()
    return 0
