"""Evo2's sharded-Eden layout: one SQLite database per sample, Parquet split lists, window databases.

``SEQUENCE_DB_DIR/<sample_id>/glm_dataset_<sample_id>.sqlite`` holds ``sequences(contig_id TEXT
PRIMARY KEY, nt_sequence TEXT NOT NULL)``; a contig's sample id is `groups.sample_id` of its id
(``BCR__ECT-SAMPLE1__CT1-1`` -> ``SAMPLE1``), which is how the Eden loader finds its database.

Which contigs a run takes, and how they are split:

- ``--split-parquet SPLIT=FILE``: the contigs the lists name, in those splits (lengths are read
  from the databases; a listed length that disagrees is an error);
- ``--window-db SPLIT=FILE``: exactly the windows of Eden's window database for SPLIT
  (`eden_windows`); its contigs are in SPLIT, and must be in SPLIT's Parquet list when one is given;
  with window databases and no Parquet lists only the contigs they name are taken;
- neither: every contig of every sample database, grouped by sample so the length-stratified
  split keeps each sample in one split (unless ``--group-by`` says otherwise).

Bases are read in window-sized pieces through a read-only connection per sample database, opened
lazily by each process's reader (`eden_reader`); nothing holds a whole contig.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from bionemo_wds.errors import OptionError, SourceError
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.groups import sample_id
from bionemo_wds.prepare.sources.eden_parquet import read_split_lists
from bionemo_wds.prepare.sources.eden_reader import EdenSource, connect_sample_db
from bionemo_wds.prepare.sources.eden_windows import read_window_db
from bionemo_wds.prepare.splits import SPLIT_NAMES
from bionemo_wds.prepare.tags import HEADER_TAGS, tag_all, tagger

if TYPE_CHECKING:
    from bionemo_wds.prepare.options import PrepareOptions

#: The form of a contig id the sample id is taken from.
ID_FORM = "SOURCE__TYPE-SAMPLE__CONTIG, e.g. BCR__ECT-SAMPLE1__CT1-1"
#: Contig ids per ``IN (...)`` query when looking up lengths (below SQLite's variable limit).
LOOKUP_BATCH = 500


def sample_db_path(root: Path, sample: str) -> Path:
    """Where the database of `sample` lives under SEQUENCE_DB_DIR `root`."""
    return root / sample / f"glm_dataset_{sample}.sqlite"


def find_sample_dbs(inputs: Sequence[str]) -> tuple[Path, dict[str, Path]]:
    """The one SEQUENCE_DB_DIR of `inputs` and its sample databases ``{sample: path}``, sorted by sample.

    A subdirectory without its ``glm_dataset_<sample>.sqlite`` is not a sample (as in Eden's loader);
    a directory with no sample at all is an error.
    """
    if len(inputs) != 1:
        raise OptionError(f"--source sharded-eden takes exactly one SEQUENCE_DB_DIR, got {len(inputs)} inputs")
    root = Path(inputs[0])
    if not root.exists():
        raise SourceError(f"input {root} does not exist")
    if not root.is_dir():
        raise SourceError(f"input {root} is not a directory; --source sharded-eden takes one SEQUENCE_DB_DIR")
    found = {}
    for sub in sorted(p for p in root.iterdir() if p.is_dir()):
        path = sample_db_path(root, sub.name)
        if path.is_file():
            found[sub.name] = path
    if not found:
        raise SourceError(
            f"SEQUENCE_DB_DIR {root} holds no sample databases: "
            f"expected {root}/<sample_id>/glm_dataset_<sample_id>.sqlite"
        )
    return root, found


def check_eden_options(opts: PrepareOptions) -> None:
    """Refuse option values that do not fit sharded-Eden input (options of other sources are refused
    for every source by `PrepareOptions.check_source`)."""
    if opts.tags in HEADER_TAGS:
        raise OptionError(
            f"--tags {opts.tags} reads FASTA header lines, which --source sharded-eden does not have; "
            "use --tags sharded-eden (<ctrl_X> from a contig id X__...), regex:PATTERN (on the contig id), "
            "tsv:FILE or none"
        )
    if opts.split_lists and opts.split_parquet:
        raise OptionError("--split-list and --split-parquet both fix the split; give one of them")


def eden_input_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    """The sample databases a run reads, sorted by sample (for the request fingerprint; the Parquet
    lists and window databases are fingerprinted as options). Bad inputs and options are refused here,
    before anything is written."""
    check_eden_options(opts)
    _, dbs = find_sample_dbs(inputs)
    return list(dbs.values())


@contextlib.contextmanager
def _sample_db(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to one sample database; SQLite errors become a `BadInputError` naming it."""
    conn = connect_sample_db(str(path))
    try:
        yield conn
    except sqlite3.DatabaseError as exc:
        raise SourceError(
            f"sample database {path} cannot be read ({exc}); expected a table "
            "sequences(contig_id TEXT PRIMARY KEY, nt_sequence TEXT NOT NULL)"
        ) from exc
    finally:
        conn.close()


def _all_contigs(dbs: dict[str, Path]) -> tuple[list[str], list[int], list[int]]:
    """Every contig of every sample database: ids, lengths and database number (samples sorted, contigs by id)."""
    names: list[str] = []
    lengths: list[int] = []
    where: list[int] = []
    seen: dict[str, int] = {}
    paths = list(dbs.values())
    for number, path in enumerate(paths):
        with _sample_db(path) as conn:
            for contig, length in conn.execute(
                "SELECT contig_id, length(nt_sequence) FROM sequences ORDER BY contig_id"
            ):
                if contig in seen:
                    raise SourceError(
                        f"contig {contig!r} is in both {paths[seen[contig]]} and {path}; contig ids must be unique"
                    )
                seen[contig] = number
                names.append(contig)
                lengths.append(_length(length, contig, path))
                where.append(number)
    return names, lengths, where


def _length(value: object, contig: str, path: Path) -> int:
    """``length(nt_sequence)`` of a contig; NULL (a table that does not enforce NOT NULL) is an error."""
    if not isinstance(value, int):
        raise SourceError(f"contig {contig!r} in {path} has no nt_sequence ({value!r})")
    return value


class _Listed:
    """The contigs a run takes when lists or window databases name them: rows added in order, each
    with its split and where it was named (for messages)."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.split: list[int] = []
        self.listed_length: list[int] = []  # -1: not given (named by a window database only)
        self.named_in: list[str] = []
        self.row: dict[str, int] = {}

    def add(self, contig: str, split: int, length: int, named_in: str) -> int:
        self.row[contig] = len(self.names)
        self.names.append(contig)
        self.split.append(split)
        self.listed_length.append(length)
        self.named_in.append(named_in)
        return self.row[contig]

    def keep(self, mask: np.ndarray) -> _Listed:
        """The rows where `mask` is true, in order."""
        out = _Listed()
        for row in np.flatnonzero(mask).tolist():
            out.add(self.names[row], self.split[row], self.listed_length[row], self.named_in[row])
        return out


def _listed_contigs(opts: PrepareOptions) -> tuple[_Listed, dict[str, tuple[np.ndarray, np.ndarray]], dict]:
    """Rows from the Parquet lists, then the window databases' windows as (rows, numbers) per split."""
    listed = _Listed()
    parquet = opts.split_parquet or {}
    for split, (ids, lengths) in read_split_lists({s: parquet[s] for s in SPLIT_NAMES if s in parquet}).items():
        code, named_in = SPLIT_NAMES.index(split), f"the {split} Parquet {parquet[split]}"
        for contig, length in zip(ids, lengths.tolist()):
            listed.add(contig, code, length, named_in)
    windows: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    notes: dict[str, dict[str, int]] = {}
    window_dbs = opts.window_db or {}
    for split in (s for s in SPLIT_NAMES if s in window_dbs):
        path, code = window_dbs[split], SPLIT_NAMES.index(split)

        def row_of(contig: str, split: str = split, path: str = path, code: int = code) -> int:
            row = listed.row.get(contig)
            if row is None:
                if split in parquet:
                    raise SourceError(
                        f"contig {contig!r} of the {split} window database {path} is not in the {split} "
                        f"Parquet {parquet[split]}"
                    )
                return listed.add(contig, code, -1, f"the {split} window database {path}")
            if listed.split[row] != code:
                raise SourceError(
                    f"contig {contig!r} of the {split} window database {path} is in the "
                    f"{SPLIT_NAMES[listed.split[row]]} split ({listed.named_in[row]}); a contig belongs to one split"
                )
            return row

        db = read_window_db(path, row_of, opts.seq_length, opts.requested_stride)
        windows[split] = (db.rows, db.numbers)
        notes[split] = db.meta
    # a listed contig without a window in its split's window database (Eden's minimum window length
    # dropped them all) is left out, so no base of it is read and the manifest counts only what is used
    used = np.zeros(len(listed.names), dtype=bool)
    for rows, _ in windows.values():
        used[rows] = True
    codes = np.asarray(listed.split, dtype=np.int64)
    unused = np.isin(codes, [SPLIT_NAMES.index(s) for s in windows]) & ~used
    for split in windows:
        notes[split]["listed_contigs_without_windows"] = int((unused & (codes == SPLIT_NAMES.index(split))).sum())
    if unused.any():
        new_row = np.cumsum(~unused) - 1
        windows = {s: (new_row[rows], numbers) for s, (rows, numbers) in windows.items()}
        listed = listed.keep(~unused)
    return listed, windows, notes


def _lengths_from_dbs(listed: _Listed, root: Path, dbs: dict[str, Path]) -> tuple[np.ndarray, np.ndarray]:
    """Each listed contig's length (``length(nt_sequence)``) and database number, from its sample's database."""
    number = {sample: i for i, sample in enumerate(dbs)}
    by_sample: dict[str, list[int]] = {}
    for row, contig in enumerate(listed.names):
        sample = sample_id(contig)
        if sample is None:
            raise SourceError(f"contig {contig!r} of {listed.named_in[row]} has no sample id in it ({ID_FORM})")
        if sample not in dbs:
            raise SourceError(
                f"contig {contig!r} of {listed.named_in[row]}: its sample database "
                f"{sample_db_path(root, sample)} does not exist"
            )
        by_sample.setdefault(sample, []).append(row)
    lengths = np.full(len(listed.names), -1, dtype=np.int64)
    where = np.full(len(listed.names), -1, dtype=np.int64)
    for sample, rows in by_sample.items():
        with _sample_db(dbs[sample]) as conn:
            for lo in range(0, len(rows), LOOKUP_BATCH):
                part = rows[lo : lo + LOOKUP_BATCH]
                ids = [listed.names[r] for r in part]
                marks = ",".join("?" * len(ids))
                sql = f"SELECT contig_id, length(nt_sequence) FROM sequences WHERE contig_id IN ({marks})"
                got = dict(conn.execute(sql, ids).fetchall())
                for row, contig in zip(part, ids):
                    if contig not in got:
                        raise SourceError(
                            f"contig {contig!r} of {listed.named_in[row]} is not in its sample database {dbs[sample]}"
                        )
                    lengths[row] = _length(got[contig], contig, dbs[sample])
                    where[row] = number[sample]
    return lengths, where


def _refuse_disagreeing_lengths(listed: _Listed, lengths: np.ndarray, where: np.ndarray, paths: list[Path]) -> None:
    """A Parquet length that is not the database's: the lists were made from other data."""
    given = np.asarray(listed.listed_length, dtype=np.int64)
    bad = np.flatnonzero((given >= 0) & (given != lengths))
    if len(bad):
        row = int(bad[0])
        raise SourceError(
            f"contig {listed.names[row]!r} has length {int(given[row])} in {listed.named_in[row]} but "
            f"{int(lengths[row])} bases in {paths[int(where[row])]}"
            + (f" ({len(bad)} contigs disagree)" if len(bad) > 1 else "")
        )


def _tags(names: list[str], rule: str, tag_map: dict[str, str] | None = None) -> list[str]:
    """Control tag per contig under `rule` (`prepare.tags`), from its id: a source without header lines."""
    if rule == "none":
        return [""] * len(names)
    return tag_all(names, names, tagger(rule, tag_map))


def catalog_sharded_eden(inputs: Sequence[str], opts: PrepareOptions) -> Catalog:
    """The catalog of a sharded-Eden SEQUENCE_DB_DIR under `opts` (no base read but for the lengths)."""
    check_eden_options(opts)
    root, dbs = find_sample_dbs(inputs)
    split: np.ndarray | None = None
    windows: dict[str, tuple[np.ndarray, np.ndarray]] | None = None
    groups = group_names = None
    notes: dict = {"sample_databases": len(dbs)}
    if opts.split_parquet or opts.window_db:
        listed, fixed, window_notes = _listed_contigs(opts)
        if not listed.names:
            raise SourceError("the split lists and window databases name no contig")
        names = listed.names
        lengths, where = _lengths_from_dbs(listed, root, dbs)
        _refuse_disagreeing_lengths(listed, lengths, where, list(dbs.values()))
        split = np.asarray(listed.split, dtype=np.int8)
        windows = fixed or None
        notes["split"] = "parquet" if opts.split_parquet else "window databases"
        if window_notes:
            notes["window_db"] = window_notes
    else:
        names, length_list, where_list = _all_contigs(dbs)
        if not names:
            raise SourceError(f"the sample databases under {root} hold no contigs")
        lengths = np.asarray(length_list, dtype=np.int64)
        where = np.asarray(where_list, dtype=np.int64)
        if opts.group_by is None:  # keep each sample in one split (`prepare.groups` sets groups otherwise)
            groups, group_names = where.copy(), list(dbs)
            if not opts.split_lists:
                notes["split"] = "grouped by sample"
    empty = np.flatnonzero(lengths == 0)
    if len(empty):
        seq = int(empty[0])
        raise SourceError(
            f"contig {names[seq]!r} in {list(dbs.values())[int(where[seq])]} is empty (length 0); remove it"
            + (" or leave it out of the split lists" if split is not None else "")
        )
    source = EdenSource([str(p) for p in dbs.values()], names, where)
    catalog = Catalog(
        source, names, _tags(names, opts.tags, opts.tag_map), lengths, groups=groups, group_names=group_names
    )
    catalog.split, catalog.windows, catalog.notes = split, windows, notes
    return catalog
