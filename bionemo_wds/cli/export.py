"""`bionemo-wds export-megatron DATASET OUT_PREFIX`: a prepared split as a Megatron indexed dataset."""

from __future__ import annotations

import argparse
from typing import Any

from bionemo_wds.export.megatron import export_megatron

HELP = "write a split as a Megatron indexed dataset (PREFIX.bin / PREFIX.idx) for Megatron-Bridge's Evo2 recipe"
DESCRIPTION = (
    "Write one split of a prepared dataset as OUT_PREFIX.bin and OUT_PREFIX.idx with megatron-core's "
    "IndexedDatasetBuilder (uint8 byte-level token ids, as bionemo's preprocess_evo2 writes them), and "
    "OUT_PREFIX.documents.tsv naming each document (prepare --source megatron names documents by it; export "
    "each split to a prefix named by it, e.g. mout/ecoli_train, and prepare --split-from-names gives the splits "
    "back). A sequence-layout dataset (prepare --layout sequences) "
    "gives one document per sequence, equal to the FASTA sequence; a windows-layout dataset one document per "
    "stored window (its windows overlap, so they are what it holds). Bases are written as stored; control tags "
    "and reverse complements are not written into documents. Needs megatron-core: pip install "
    "'bionemo-wds[megatron]' && pip install --no-deps megatron-core."
)


def add_export_parser(subparsers: Any, **kwargs: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser("export-megatron", help=HELP, description=DESCRIPTION, **kwargs)
    parser.add_argument("dataset", help="directory or URL (s3://bucket/run1, https://...) holding manifest.json")
    parser.add_argument(
        "out_prefix",
        help="local path prefix: writes OUT_PREFIX.bin, .idx and .documents.tsv (its directory is made when missing)",
    )
    parser.add_argument("--split", default="train", help="the split to write (default: train)")
    parser.add_argument(
        "--no-eod",
        dest="append_eod",
        action="store_false",
        help="no end-of-document token (id 0) after each document (preprocess_evo2's append_eod: false)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    return parser


def run_export(args: argparse.Namespace) -> int:
    """Write the export; bad input raises (exit 2)."""
    report = export_megatron(args.dataset, args.out_prefix, args.split, args.append_eod, progress=not args.quiet)
    print(
        f"wrote {report.documents} documents ({report.unit}s), {report.tokens} tokens: "
        f"{report.bin_path}, {report.idx_path}, {report.names_path}"
    )
    return 0
