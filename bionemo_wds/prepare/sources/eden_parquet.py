"""Eden's Parquet split lists: one file per split, columns ``contig_id`` (string) and ``length`` (integer).

The sharded-Eden pipeline describes each split by such a file; `bionemo-wds prepare --split-parquet`
takes the split from them and `bionemo-wds precompute-windows` turns one into a window database.
pyarrow reads them; it is the optional extra ``bionemo-wds[eden]``, so a missing pyarrow is a
`BadInputError` that says how to install it, not an ImportError from deep inside a run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from bionemo_wds.errors import BadInputError, SourceError

#: The columns a split list must have (Eden's SEQUENCE_ID_COLUMN_NAME and SEQUENCE_LENGTH_COLUMN_NAME).
PARQUET_COLUMNS = ("contig_id", "length")


def _pyarrow() -> tuple[Any, Any]:
    """(pyarrow, pyarrow.parquet), or a `BadInputError` saying to install the ``eden`` extra."""
    try:
        import pyarrow as pa  # type: ignore[import-untyped]
        import pyarrow.parquet as pq  # type: ignore[import-untyped]
    except ImportError as exc:
        raise BadInputError("reading Parquet split lists needs pyarrow: pip install 'bionemo-wds[eden]'") from exc
    return pa, pq


def read_split_parquet(path: str) -> tuple[list[str], np.ndarray]:
    """The contig ids (in file order) and int64 lengths of one split list.

    Refused, each with a message naming `path`: a file pyarrow cannot read, missing columns (all of
    them named), a ``contig_id`` that is not text or a ``length`` that is not an integer, empty
    (null) values, negative lengths, and a contig listed twice.
    """
    pa, pq = _pyarrow()
    try:
        schema = pq.read_schema(path)
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(f"split Parquet {path} cannot be read: {exc}") from exc
    missing = [c for c in PARQUET_COLUMNS if c not in schema.names]
    if missing:
        raise SourceError(
            f"split Parquet {path} lacks column(s) {', '.join(missing)}: a split list needs columns "
            f"{', '.join(PARQUET_COLUMNS)} (it has: {', '.join(schema.names) or 'none'})"
        )
    id_type, length_type = schema.field("contig_id").type, schema.field("length").type
    if pa.types.is_dictionary(id_type):
        id_type = id_type.value_type
    if not (pa.types.is_string(id_type) or pa.types.is_large_string(id_type)):
        raise SourceError(f"split Parquet {path}: column contig_id must hold strings, not {id_type}")
    if not pa.types.is_integer(length_type):
        raise SourceError(f"split Parquet {path}: column length must hold integers, not {length_type}")
    try:
        table = pq.read_table(path, columns=list(PARQUET_COLUMNS))
    except (OSError, pa.ArrowException) as exc:
        raise SourceError(f"split Parquet {path} cannot be read: {exc}") from exc
    for column in PARQUET_COLUMNS:
        nulls = table.column(column).null_count
        if nulls:
            raise SourceError(f"split Parquet {path}: column {column} has {nulls} empty (null) value(s)")
    ids = [str(x) for x in table.column("contig_id").to_pylist()]
    lengths = np.asarray(table.column("length").to_numpy(), dtype=np.int64)
    if len(lengths) and int(lengths.min()) < 0:
        bad = int(np.argmin(lengths))
        raise SourceError(f"split Parquet {path}: contig {ids[bad]!r} has a negative length {int(lengths[bad])}")
    if len(set(ids)) != len(ids):
        seen: set[str] = set()
        for contig in ids:
            if contig in seen:
                raise SourceError(f"split Parquet {path} lists contig {contig!r} twice")
            seen.add(contig)
    return ids, lengths


def read_split_lists(named: Mapping[str, str]) -> dict[str, tuple[list[str], np.ndarray]]:
    """`read_split_parquet` of each ``{split: FILE}``; a contig in two splits' lists is an error naming both."""
    out: dict[str, tuple[list[str], np.ndarray]] = {}
    where: dict[str, str] = {}
    for split, path in named.items():
        ids, lengths = read_split_parquet(path)
        for contig in ids:
            other = where.setdefault(contig, split)
            if other != split:
                raise SourceError(
                    f"contig {contig!r} is listed for both {other} ({named[other]}) and {split} ({path}); "
                    "a contig belongs to one split"
                )
        out[split] = (ids, lengths)
    return out
