"""Read-only memory maps of local ``.npy`` files that keep no file descriptor open.

A split's record index (and sequence index) is memory-mapped so that a row is read only where it is
used. `numpy.load` with ``mmap_mode="r"`` maps through `mmap.mmap`, which keeps a duplicate of the
file's descriptor for as long as the map lives (CPython before 3.13 cannot drop it): a blend of
1,000 datasets then holds over 1,000 descriptors before a shard is read, past a ``ulimit -n`` of
256 or 1,024. A POSIX mapping needs no descriptor once made, so here the file is opened, mapped and
closed at once: with Python 3.13's ``mmap(..., trackfd=False)``, before it with the C library's
``mmap`` through `ctypes` (unmapped when the last array using it is collected). Where neither is
available (not POSIX), `numpy.load` maps the file as before.

The arrays are `numpy.memmap` instances, read-only, with the ``filename`` and ``offset`` a
`numpy.memmap` has, so a spawned loader worker can map the file again (`map_array`) instead of
receiving a copy of the rows.
"""

from __future__ import annotations

import ast
import ctypes
import functools
import mmap
import os
import re
import struct
import sys
import weakref
from typing import Any

import numpy as np

__all__ = ["load_npy", "map_array"]


def _c_mapper() -> Any:
    """The C library's ``mmap``/``munmap`` with their argument types, or None where there is none."""
    if sys.version_info >= (3, 13) or not hasattr(mmap, "MAP_SHARED"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mmap.restype = ctypes.c_void_p
        libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
        libc.munmap.restype = ctypes.c_int
        libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    except (OSError, AttributeError):
        return None
    return libc


_LIBC = _c_mapper()
_MAP_FAILED = ctypes.c_void_p(-1).value


def _map_fd(fd: int, size: int, path: str) -> Any:
    """A read-only shared mapping of the first `size` bytes of `fd` (a buffer object) that does not
    keep `fd`; None where this platform cannot map without it."""
    if sys.version_info >= (3, 13):
        return mmap.mmap(fd, size, access=mmap.ACCESS_READ, trackfd=False)  # type: ignore[call-arg,unused-ignore]
    if _LIBC is None:
        return None
    address = _LIBC.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if address is None or address == _MAP_FAILED:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), path)
    buffer = (ctypes.c_char * size).from_address(address)
    weakref.finalize(buffer, _LIBC.munmap, address, size)  # when no array uses the mapping any more
    return buffer


def map_array(path: str, dtype: np.dtype, offset: int, shape: tuple[int, ...]) -> np.memmap:
    """The C-ordered array of `dtype` and `shape` at byte `offset` of the file `path`, memory-mapped
    read-only; no descriptor stays open (except where the platform cannot map without one). An
    `OSError` (the file's own: missing, permission denied, too many open files) names `path`; a
    file shorter than the array is a `ValueError`."""
    dtype = np.dtype(dtype)
    length = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    fd = os.open(path, os.O_RDONLY)
    try:
        size = os.fstat(fd).st_size
        if size < length:
            raise ValueError(f"the file has {size} bytes; its array ends at byte {length}")
        buffer = _map_fd(fd, size, path) if size else None
    finally:
        os.close(fd)
    if buffer is None:
        if size:  # no way to map without a descriptor here: numpy's own map (it keeps one)
            return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)
        buffer, offset = bytearray(), 0
    rows = np.ndarray.__new__(np.memmap, shape, dtype=dtype, buffer=buffer, offset=offset)
    rows.flags.writeable = False
    rows.filename, rows.offset, rows.mode = os.path.abspath(path), offset, "r"
    return rows


def load_npy(path: str) -> np.memmap:
    """The array of the ``.npy`` file `path`, memory-mapped read-only as `map_array` maps it (what
    ``numpy.load(path, mmap_mode="r")`` gives, without its open descriptor). A file that is not a
    C-ordered ``.npy`` array is a `ValueError`; an `OSError` is the file's own."""
    with open(path, "rb") as fh:
        version = np.lib.format.read_magic(fh)
        at = fh.tell()
        header = _written_header(fh, version)
        if header is not None:
            shape, fortran, dtype = header
        elif version in ((1, 0), (2, 0)):
            fh.seek(at)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(fh)
        else:  # a later header version: numpy's own reader (and its map)
            return np.load(path, mmap_mode="r", allow_pickle=False)
        offset = fh.tell()
    if fortran or dtype.hasobject:
        raise ValueError("not a C-ordered array of plain values")
    return map_array(path, dtype, offset, tuple(shape))


#: A header as `numpy.save` writes it: the dtype's description, the order and the shape, padded.
_HEADER = re.compile(r"\{'descr': (.+), 'fortran_order': (True|False), 'shape': \(([0-9, ]*)\), \} *\n")


def _written_header(fh: Any, version: tuple[int, int]) -> tuple[tuple[int, ...], bool, np.dtype] | None:
    """(shape, fortran order, dtype) of a version 1.0 or 2.0 header in the layout `numpy.save` writes,
    read from `fh` (left at the array's first byte); None for another one (numpy's reader then reads
    it). Each distinct dtype description is evaluated once per process: numpy's reader evaluates
    the whole header as Python (`ast.literal_eval`, ~0.3 ms), which a blend of 1,000 datasets pays
    1,000 times for the same dtype."""
    size_format = {(1, 0): "<H", (2, 0): "<I"}.get(version)
    if size_format is None:
        return None
    raw = fh.read(struct.calcsize(size_format))
    if len(raw) != struct.calcsize(size_format):
        return None
    text = fh.read(struct.unpack(size_format, raw)[0])
    match = _HEADER.fullmatch(text.decode("latin1"))
    if match is None:
        return None
    shape = tuple(int(n) for n in match.group(3).replace(" ", "").split(",") if n)
    try:
        dtype = _dtype(match.group(1))
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None  # numpy's reader says what is wrong with it
    return shape, match.group(2) == "True", dtype


@functools.lru_cache(maxsize=64)
def _dtype(descr: str) -> np.dtype:
    """The dtype of a header's ``descr`` text."""
    return np.lib.format.descr_to_dtype(ast.literal_eval(descr))
