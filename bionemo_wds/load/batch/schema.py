"""The compact batch's layout, as one typed object: its fields, their dtypes and shapes, its bytes.

A compact batch is what loaders yield and what crosses the loader-worker boundary (about 8x smaller
than the int64 model inputs `model_inputs.to_model_inputs` makes of it). Its arrays are sized by
the micro batch, the dataset's window length and the room it leaves for control tags; the batch
transfer sizes its shared-memory slots by `BatchSchema.shared_nbytes` and the builder
(`assemble`) writes exactly these fields.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

#: Bytes each shared array's place in a transfer slot is aligned to.
ALIGN = 8


@dataclass(frozen=True)
class Field:
    """One entry of a compact batch: a numpy array of `dtype` whose shape is `shape` (in the
    schema's dimension names ``rows``, ``window``, ``tag``), or a list of str (`dtype` None);
    `shared`: it crosses from loader workers in shared memory (the rest is pickled with the message)."""

    name: str
    dtype: np.dtype | None
    shape: tuple[str, ...]
    shared: bool
    doc: str


#: The fields of a compact batch, in the order they are written.
FIELDS: tuple[Field, ...] = (
    Field("bases", np.dtype(np.uint8), ("rows", "window"), True, "bases as token ids, PAD after the window's length"),
    Field("lengths", np.dtype(np.int32), ("rows",), True, "bases of each row"),
    Field("tags", np.dtype(np.uint8), ("rows", "tag"), True, "control tag bytes, PAD-padded"),
    Field("tag_lengths", np.dtype(np.int32), ("rows",), True, "bytes of each row's control tag"),
    Field("rc", np.dtype(bool), ("rows",), True, "whether the row was reverse-complemented"),
    Field("start", np.dtype(np.int64), ("rows",), True, "the window's first base in its sequence"),
    Field("seq_id", None, ("rows",), False, "the sequence each row comes from"),
    Field("keys", None, ("rows",), False, "each window's key, <seq_id>/<window>"),
    Field("filler", np.dtype(bool), ("rows",), False, "a row without a window (padding, a damaged record)"),
    Field("dataset", np.dtype(np.int16), ("rows",), False, "the source of each row (-1 for filler)"),
)
#: The arrays that cross from loader workers in shared memory.
SHARED_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.shared)


@dataclass(frozen=True)
class BatchSchema:
    """The layout of a dataset's compact batches.

    Args:
        rows: samples per batch (the micro batch).
        window: bases per row (the dataset's window length; the widest of a blend's datasets).
        max_tag: bytes of control tag per row (the room the dataset leaves for tags).
    """

    rows: int
    window: int
    max_tag: int

    @property
    def fields(self) -> tuple[Field, ...]:
        return FIELDS

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of field `name` in a full batch."""
        sizes = {"rows": self.rows, "window": self.window, "tag": self.max_tag}
        return tuple(sizes[dim] for dim in field(name).shape)

    def nbytes(self, name: str) -> int:
        """Bytes of array field `name` in a full batch."""
        dtype = field(name).dtype
        if dtype is None:
            raise KeyError(f"{name} is a list of names, not an array")
        return int(np.prod(self.shape(name), dtype=np.int64)) * dtype.itemsize

    @property
    def shared_nbytes(self) -> int:
        """Bytes one batch takes in a transfer slot: each shared array, aligned to `ALIGN` bytes."""
        return sum(-(-self.nbytes(name) // ALIGN) * ALIGN for name in SHARED_FIELDS)

    def check(self, batch: dict[str, Any]) -> None:
        """Raise a `ValueError` naming the first field of `batch` that does not fit the schema (the
        `index` the builder adds is not part of it)."""
        for spec in FIELDS:
            if spec.name not in batch:
                raise ValueError(f"compact batch has no {spec.name!r}")
            value = batch[spec.name]
            if spec.dtype is None:
                if len(value) != self.rows:
                    raise ValueError(f"compact batch field {spec.name!r} has {len(value)} names, not {self.rows}")
                continue
            if value.dtype != spec.dtype or tuple(value.shape) != self.shape(spec.name):
                raise ValueError(
                    f"compact batch field {spec.name!r} is {value.dtype}{tuple(value.shape)}, "
                    f"the schema says {spec.dtype}{self.shape(spec.name)}"
                )


def field(name: str) -> Field:
    """The field called `name`."""
    for spec in FIELDS:
        if spec.name == name:
            return spec
    raise KeyError(f"a compact batch has no field {name!r}")
