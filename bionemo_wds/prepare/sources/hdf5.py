"""HDF5 inputs: one dataset of pre-tokenized samples (`--x-key`), optionally one label per sample (`--y-key`).

Each row of the x dataset is one sample of byte-level token ids (a base's id is its ASCII code, as
`bionemo_wds.core.tokenizer` defines): a 2-D integer dataset ``(rows, width)`` ("fixed", rows padded to
the width) or a 1-D dataset of variable-length integer arrays, ``h5py.vlen_dtype(...)`` ("ragged").
Every row becomes one catalog sequence named by its row number (``"0"``, ``"1"``, ...), so
``--split-list train=rows.txt`` takes row numbers and ``--split`` splits rows by ratio.

Specials the rows may carry are not bases: a leading BOS and trailing EOS/PAD ids (the padding of
fixed-width rows) are dropped, and the row's length is what remains. An id outside 0-255 cannot be
a byte and is refused when the catalog is built (naming row and position); an id in 0-255 that is
not an IUPAC code (an inner EOS, PAD, SEP, UNK, a digit ...) is left to `prepare.scan`, which refuses
it (or skips the row, or replaces it with N) like a bad FASTA base. A row that holds nothing after
the specials are dropped is refused, or skipped with ``--on-invalid skip``.

The catalog reads the x dataset in blocks of about `BLOCK_BYTES` (never the whole dataset) to find
each row's extent. Readers open the file lazily in the process that reads (the writer pool forks:
an h5py handle must not cross a fork) and keep the current row, so the windows of one long row and
`scan`'s chunks of it read the row once (`hdf5_reader.Hdf5Reader` says what a row costs).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from bionemo_wds.core.tokenizer import BOS_ID, EOS_ID, PAD_ID, encode_tag
from bionemo_wds.errors import BadInputError, OptionError, SourceError
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.sources.hdf5_reader import RAGGED_MAX_ROWS, Hdf5Source, h5py_module

if TYPE_CHECKING:
    from bionemo_wds.prepare.options import PrepareOptions

#: Bytes of token ids read per block while the catalog finds each row's extent.
BLOCK_BYTES = 16 << 20
#: Ragged rows per block at first (then sized from the bytes the previous block held); at most RAGGED_MAX_ROWS.
RAGGED_FIRST_ROWS = 1024
#: Datasets named in a "key not found" message.
SHOWN_KEYS = 20
#: Ids at or below this are trailing specials: EOS (0) and PAD (1) are the two smallest ids.
TRAILING_MAX = max(EOS_ID, PAD_ID)
if {EOS_ID, PAD_ID} != set(range(TRAILING_MAX + 1)):  # pragma: no cover - a tokenizer change must revisit this
    raise ImportError("hdf5 source assumes EOS and PAD are the ids 0 and 1")


@dataclass(frozen=True)
class Hdf5Layout:
    """What the x (and y) datasets of an input are, checked (`inspect_hdf5`)."""

    path: str  # as the user gave it
    x_key: str
    y_key: str | None
    layout: str  # "fixed" or "ragged"
    dtype: np.dtype  # of the ids (the element type of ragged rows)
    rows: int
    width: int | None  # fixed layout: ids per row
    chunk_rows: int | None  # fixed layout, chunked: rows per HDF5 chunk


def _dataset_names(group: Any, limit: int) -> tuple[list[str], bool]:
    """Paths of up to `limit` datasets under `group`, and whether there are more."""
    h5py = h5py_module()
    found: list[str] = []

    def visit(name: str, obj: Any) -> bool | None:
        if isinstance(obj, h5py.Dataset):
            found.append(obj.name.lstrip("/") or name)
        return True if len(found) > limit else None  # a non-None return stops the walk

    group.visititems(visit)
    return found[:limit], len(found) > limit


def _listing(group: Any) -> str:
    names, more = _dataset_names(group, SHOWN_KEYS)
    if not names:
        return "none"
    return ", ".join(repr(n) for n in names) + (", ..." if more else "")


def _dataset(f: Any, path: str, key: str, option: str) -> Any:
    """Dataset `key` of open file `f`, or a `BadInputError` naming key and file and what is there."""
    h5py = h5py_module()
    try:
        obj = f.get(key)
    except (KeyError, OSError, ValueError) as exc:  # a dangling link, an unreadable object
        raise SourceError(f"{option} {key!r} in {path} cannot be opened: {exc}") from exc
    if obj is None:
        raise SourceError(f"{option} {key!r} is not in {path}; datasets there: {_listing(f)}")
    if isinstance(obj, h5py.Group):
        raise SourceError(f"{option} {key!r} in {path} is a group, not a dataset; datasets in it: {_listing(obj)}")
    if not isinstance(obj, h5py.Dataset):
        raise SourceError(f"{option} {key!r} in {path} is not a dataset ({type(obj).__name__})")
    return obj


def _dtype_text(h5py: Any, dtype: np.dtype) -> str:
    """A dtype as a message shows it (h5py's strings and ragged arrays are numpy object dtypes)."""
    if h5py.check_string_dtype(dtype) is not None:
        return "strings"
    vlen = h5py.check_vlen_dtype(dtype)
    if vlen is not None:
        return f"variable-length arrays of {np.dtype(vlen)}"
    return str(dtype)


def _x_layout(h5py: Any, x: Any, path: str, key: str) -> tuple[str, np.dtype, int | None, int | None]:
    """(layout, id dtype, width, chunk rows) of x dataset `x`, or a `BadInputError` saying what is wrong."""
    shape = "x".join(str(n) for n in x.shape) or "scalar"
    need = (
        "token ids must be integers (uint8 or any integer type), one sample per row: a 2-D (rows, width) "
        "dataset or a 1-D dataset of variable-length arrays (h5py.vlen_dtype)"
    )
    vlen = h5py.check_vlen_dtype(x.dtype) if h5py.check_string_dtype(x.dtype) is None else None
    if vlen is not None:
        if not isinstance(vlen, np.dtype) or not np.issubdtype(vlen, np.integer):
            raise SourceError(f"--x-key {key!r} in {path} holds {_dtype_text(h5py, x.dtype)}; {need}")
        if x.ndim != 1:
            raise SourceError(f"--x-key {key!r} in {path} is a {shape} dataset of variable-length arrays; {need}")
        return "ragged", vlen, None, None
    if not np.issubdtype(x.dtype, np.integer):
        raise SourceError(f"--x-key {key!r} in {path} has dtype {_dtype_text(h5py, x.dtype)}; {need}")
    if x.ndim != 2:
        raise SourceError(f"--x-key {key!r} in {path} has shape {shape}; {need}")
    return "fixed", x.dtype, int(x.shape[1]), int(x.chunks[0]) if x.chunks else None


def _check_y(h5py: Any, y: Any, path: str, x_key: str, y_key: str, rows: int) -> None:
    """Refuse a y dataset that is not one integer, float or string label per row of x."""
    if not (y.ndim == 1 or (y.ndim == 2 and y.shape[1] == 1)):
        shape = "x".join(str(n) for n in y.shape) or "scalar"
        raise SourceError(f"--y-key {y_key!r} in {path} has shape {shape}; it must hold one label per row (1-D)")
    if y.shape[0] != rows:
        raise SourceError(
            f"--y-key {y_key!r} in {path} has {y.shape[0]} rows but --x-key {x_key!r} has {rows}; "
            "it must hold one label per row of x"
        )
    label = h5py.check_string_dtype(y.dtype) is not None or y.dtype.kind in "iufbS"
    if not label:
        raise SourceError(
            f"--y-key {y_key!r} in {path} has dtype {_dtype_text(h5py, y.dtype)}; labels must be integers, "
            "floats or strings"
        )


def _open(h5py: Any, path: str) -> Any:
    """`path` opened read-only, or a `BadInputError` saying it is not a readable HDF5 file."""
    try:
        if not h5py.is_hdf5(path):
            raise SourceError(f"input {path} is not an HDF5 file (--source hdf5 reads one FILE.h5)")
        return h5py.File(path, "r")
    except OSError as exc:
        raise SourceError(f"input {path} is not a readable HDF5 file: {exc}") from exc


def inspect_hdf5(path: str, opts: PrepareOptions) -> Hdf5Layout:
    """Open `path` and check its x (and y) datasets; reads no row."""
    h5py = h5py_module()
    x_key = opts.x_key
    if not x_key:
        raise OptionError("--source hdf5 needs --x-key: the dataset of token ids, one sample per row")
    with _open(h5py, path) as f:
        x = _dataset(f, path, x_key, "--x-key")
        layout, dtype, width, chunk_rows = _x_layout(h5py, x, path, x_key)
        rows = int(x.shape[0])
        if rows == 0:
            raise SourceError(f"--x-key {x_key!r} in {path} has no rows")
        if opts.y_key:
            _check_y(h5py, _dataset(f, path, opts.y_key, "--y-key"), path, x_key, opts.y_key, rows)
    return Hdf5Layout(path, x_key, opts.y_key or None, layout, dtype, rows, width, chunk_rows)


def _checked_input(inputs: Sequence[str], opts: PrepareOptions) -> Hdf5Layout:
    """The run's one HDF5 input, its datasets checked; bad inputs and options refused."""
    if len(inputs) != 1:
        raise OptionError(f"--source hdf5 takes exactly one input FILE.h5, got {len(inputs)}")
    path = Path(inputs[0])
    if not path.exists():
        raise SourceError(f"input {path} does not exist")
    if path.is_dir():
        raise SourceError(f"input {path} is a directory; --source hdf5 takes one FILE.h5")
    if not os.access(path, os.R_OK):
        raise SourceError(f"input {path} is not readable (permission denied)")
    if opts.tags != "none":
        raise OptionError(
            f"--tags {opts.tags} does not apply to --source hdf5: control tags come from --y-key (one label per row)"
        )
    return inspect_hdf5(str(path), opts)


def hdf5_input_files(inputs: Sequence[str], opts: PrepareOptions) -> list[Path]:
    """The one HDF5 file a run reads (for the request fingerprint); refuses bad inputs and options, and
    x/y datasets that cannot be used, before anything is written."""
    return [Path(_checked_input(inputs, opts).path)]


# -- the catalog ------------------------------------------------------------------------------------


def _first_bad_id(ids: np.ndarray) -> int:
    """Flat index of the first id of `ids` outside 0-255, or -1 (two reductions when all are fine)."""
    if ids.dtype == np.uint8 or ids.size == 0:
        return -1
    if int(ids.min()) >= 0 and int(ids.max()) <= 255:
        return -1
    return int(np.argmax(((ids < 0) | (ids > 255)).ravel()))


def _bad_id(where: str, row: int, col: int, value: int) -> BadInputError:
    return SourceError(
        f"row {row} of {where} has token id {value} at position {col} (0-based, as stored): ids must be 0-255, "
        "a base's byte (the specials BOS=2 leading and EOS=0/PAD=1 trailing are dropped)"
    )


def _fixed_extents(block: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(leading BOS: 0 or 1, bases) per row of a 2-D block of checked ids."""
    m, width = block.shape
    if width == 0:
        return np.zeros(m, np.int8), np.zeros(m, np.int64)
    is_base = block > TRAILING_MAX
    end = (width - np.argmax(is_base[:, ::-1], axis=1)).astype(np.int64)
    end[~is_base.any(axis=1)] = 0
    lead = (block[:, 0] == BOS_ID).astype(np.int8)
    return lead, np.maximum(end - lead, 0)


def _ragged_extents(flat: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(leading BOS: 0 or 1, bases) per row of a ragged block: its rows' checked ids concatenated."""
    m = len(sizes)
    lead, end = np.zeros(m, np.int8), np.zeros(m, np.int64)
    full = np.flatnonzero(sizes > 0)
    if len(full):
        starts = (np.cumsum(sizes) - sizes)[full]
        pos = np.arange(len(flat), dtype=np.int64) - np.repeat(starts, sizes[full])
        # per row: 1 + the position of its last id that is not EOS/PAD (0: none); empty rows hold no ids,
        # so each reduceat segment [start of a non-empty row, start of the next) is exactly that row
        end[full] = np.maximum.reduceat(np.where(flat > TRAILING_MAX, pos + 1, 0), starts)
        lead[full] = flat[starts] == BOS_ID
    return lead, np.maximum(end - lead, 0)


def _extents(x: Any, info: Hdf5Layout, progress: bool) -> tuple[np.ndarray, np.ndarray]:
    """(leading BOS, bases) per row of x, reading it in blocks of about `BLOCK_BYTES`; an id outside
    0-255 is refused naming its row and position."""
    where = f"{info.x_key!r} in {info.path}"
    lead = np.zeros(info.rows, np.int8)
    lengths = np.zeros(info.rows, np.int64)
    bar = tqdm(total=info.rows, desc="index", unit="row", unit_scale=True, disable=not progress)
    try:
        if info.layout == "fixed":
            assert info.width is not None
            step = max(1, BLOCK_BYTES // max(1, info.width * info.dtype.itemsize))
            if info.chunk_rows:  # whole chunks per block: each chunk is decompressed once
                step = max(info.chunk_rows, step // info.chunk_rows * info.chunk_rows)
            for lo in range(0, info.rows, step):
                hi = min(info.rows, lo + step)
                block = np.asarray(x[lo:hi])
                bad = _first_bad_id(block)
                if bad >= 0:
                    row, col = divmod(bad, info.width)
                    raise _bad_id(where, lo + row, col, int(block[row, col]))
                lead[lo:hi], lengths[lo:hi] = _fixed_extents(block)
                bar.update(hi - lo)
        else:
            lo, step = 0, RAGGED_FIRST_ROWS
            while lo < info.rows:
                hi = min(info.rows, lo + step)
                rows = list(x[lo:hi])
                sizes = np.fromiter((len(r) for r in rows), np.int64, count=len(rows))
                flat = np.concatenate(rows) if sizes.sum() else np.zeros(0, info.dtype)
                bad = _first_bad_id(flat)
                if bad >= 0:
                    row = int(np.searchsorted(np.cumsum(sizes), bad, side="right"))
                    raise _bad_id(where, lo + row, bad - int(sizes[:row].sum()), int(flat[bad]))
                lead[lo:hi], lengths[lo:hi] = _ragged_extents(flat, sizes)
                bar.update(hi - lo)
                # the next block: about BLOCK_BYTES if its rows are like these (a row is read whole)
                step = int(min(RAGGED_MAX_ROWS, max(1, (hi - lo) * BLOCK_BYTES // max(1, flat.nbytes))))
                lo = hi
    finally:
        bar.close()
    return lead, lengths


def _label(value: Any) -> str:
    """One y value as tag text: str() of a number, bytes decoded as ASCII (a `UnicodeDecodeError` otherwise)."""
    if isinstance(value, np.ndarray):  # a (rows, 1) dataset
        value = value.reshape(-1)[0]
    if isinstance(value, (bytes, np.bytes_)):
        return bytes(value).decode("ascii")
    return str(value)


def _labels(y: Any, info: Hdf5Layout, keep: np.ndarray) -> list[str]:
    """The tag text of each kept row: its y value, checked to be printable ASCII (`encode_tag`)."""
    where = f"--y-key {info.y_key!r} in {info.path}"
    step = max(1, BLOCK_BYTES // max(1, y.dtype.itemsize * 4))
    wanted = np.zeros(info.rows, bool)
    wanted[keep] = True
    tags: list[str] = []
    checked: set[str] = set()
    for lo in range(0, info.rows, step):
        hi = min(info.rows, lo + step)
        values = y[lo:hi]
        for i in np.flatnonzero(wanted[lo:hi]).tolist():
            row = lo + i
            try:
                tag = _label(values[i])
            except UnicodeDecodeError as exc:
                raise SourceError(f"{where}: the label of row {row} is not ASCII text: {values[i]!r}") from exc
            if tag not in checked:
                try:
                    encode_tag(tag, str(row))
                except BadInputError as exc:
                    raise SourceError(
                        f"{where}: the label of row {row}, {tag!r}, has non-printable or non-ASCII characters; "
                        "control tags are printable ASCII"
                    ) from exc
                checked.add(tag)
            tags.append(tag)
    return tags


def catalog_hdf5(inputs: Sequence[str], opts: PrepareOptions) -> Catalog:
    """One catalog sequence per row of `--x-key` (named by its row number), tagged with its `--y-key`
    label; rows with no bases after the specials are refused, or skipped with ``--on-invalid skip``."""
    info = _checked_input(inputs, opts)
    path = info.path
    h5py = h5py_module()
    with _open(h5py, path) as f:
        lead, lengths = _extents(f[info.x_key], info, opts.progress)
        keep = np.flatnonzero(lengths > 0)
        skipped = []
        for row in np.flatnonzero(lengths == 0).tolist():
            reason = f"row {row} of {info.x_key!r} in {path} holds no bases (only the specials BOS, EOS, PAD)"
            if opts.on_invalid != "skip":
                raise SourceError(f"{reason}; use --on-invalid skip to leave such rows out")
            skipped.append({"seq_id": str(row), "file": path, "reason": reason})
        names = [str(row) for row in keep.tolist()]
        tags = _labels(f[info.y_key], info, keep) if info.y_key else [""] * len(keep)
    source = Hdf5Source(path, info.x_key, info.layout, lead, lengths)
    catalog = Catalog(source, names, tags, lengths[keep], seq=keep.astype(np.int64))
    catalog.skipped.extend(skipped)
    catalog.notes.update(
        x_key=info.x_key,
        y_key=info.y_key,
        dtype=str(info.dtype),
        layout=info.layout,
        rows=info.rows,
        width=info.width,
    )
    return catalog
