"""`bionemo-wds show DATASET`: a split's first windows as text, to look at what the model will see.

Each window is printed as a header line (its key, sequence, start, strand, tag, length, and the
shard and record it is in) and its bases wrapped at 80 columns, in the order the shards store them
(the split's seeded global order, shard by shard). The shards are read with the format's own reader
(`format.stored_records`) through `storage.Store`, so a directory and a URL
(``s3://...``, ``https://...``) work alike, and only the first shards' bytes up to the last shown
window are read.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from bionemo_wds.errors import BadInputError
from bionemo_wds.format import ShardInfo, read_manifest, window_key
from bionemo_wds.format.stored_records import stored_records
from bionemo_wds.storage.store import Store

HELP = "print a split's first windows as text: key, sequence, start, strand, tag and the bases"
DESCRIPTION = (
    "Print the first N windows of one split of a prepared dataset, in the order its shards store them: "
    "a header line per window (key SEQ/WINDOW, sequence name, 0-based start in the source sequence, strand, "
    "control tag, length, shard and record) and its bases wrapped at --width columns. Bases are shown as "
    "stored: with --case keep, lower case marks soft-masked repeats; the model sees them upper case, "
    "between BOS, the tag, SEP and EOS, and the loader reverse-complements a window at random when asked "
    "(rc_prob), so a stored window is always the + strand. Reads only as much of the first shards as needed."
)
#: Bases per printed line (FASTA's usual width).
WIDTH = 80


@dataclass(frozen=True)
class ShownWindow:
    """One stored window and where it is."""

    seq_id: str
    window: int
    start: int
    tag: str
    bases: str
    shard: str
    record: str

    @property
    def key(self) -> str:
        return window_key(self.seq_id, self.window)


def _count(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_show_parser(subparsers: Any, **kwargs: Any) -> argparse.ArgumentParser:
    """The `show` subcommand of `bionemo-wds`, added to its `add_subparsers()` action."""
    parser = subparsers.add_parser("show", help=HELP, description=DESCRIPTION, **kwargs)
    parser.add_argument("dataset", help="directory or URL (s3://bucket/run1, https://...) holding manifest.json")
    parser.add_argument(
        "--split", default="train", help="the split to show: train, val or test, as the manifest lists (default: train)"
    )
    parser.add_argument(
        "-n", type=_count, default=5, metavar="N", help="how many windows to print, 1 or more (default: 5)"
    )
    parser.add_argument(
        "--width", type=_count, default=WIDTH, metavar="COLUMNS", help=f"bases per line (default: {WIDTH})"
    )
    return parser


def shown_windows(dataset: str, split: str, n: int, storage_options: dict[str, Any] | None = None) -> list[ShownWindow]:
    """The first `n` windows of `split` of `dataset` (fewer when the split has fewer), in stored order."""
    store = Store(dataset, storage_options)
    manifest = read_manifest(store)
    splits = manifest.splits
    if split not in splits:
        raise BadInputError(f"{store.root} has no {split!r} split; it has {', '.join(splits) or 'none'}")
    return list(itertools.islice(_windows(store, splits[split].shards), n))


def _windows(store: Store, shards: Sequence[ShardInfo]) -> Iterator[ShownWindow]:
    for shard, record, block in stored_records(store, shards):
        for i in range(len(block)):
            yield ShownWindow(
                block.seq_id[i],
                int(block.window[i]),
                int(block.start[i]),
                block.tag[i],
                block.bases(i).tobytes().decode("ascii"),
                shard.path,
                record,
            )


def window_text(window: ShownWindow, width: int = WIDTH) -> str:
    """A window's header line and its bases at `width` per line."""
    header = (
        f">{window.key}  sequence={window.seq_id}  start={window.start}  strand=+  "
        f"tag={window.tag or '(none)'}  length={len(window.bases)}  shard={window.shard}  record={window.record}"
    )
    lines = [window.bases[at : at + width] for at in range(0, len(window.bases), width)]
    return "\n".join([header, *lines])


def run_show(args: argparse.Namespace) -> int:
    """Print `args.n` windows of `args.split` of `args.dataset`; a bad dataset or split raises (exit 2)."""
    for window in shown_windows(args.dataset, args.split, args.n):
        print(window_text(window, args.width))
    return 0
