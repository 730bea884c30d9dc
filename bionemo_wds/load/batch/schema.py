"""The compact batch's layout, as one typed object: its fields, their dtypes and shapes, its bytes.

A compact batch is what loaders yield and what crosses the loader-worker boundary (about 8x smaller
than the int64 model inputs `model_inputs.to_model_inputs` makes of it). Its arrays are sized by
the micro batch, the dataset's window length and the room it leaves for control tags; the batch
transfer sizes its shared-memory slots by `BatchSchema.shared_nbytes` and the builder
(`assemble`) writes exactly these fields.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Bytes each shared array's place in a transfer slot is aligned to.
ALIGN = 8


@dataclass(frozen=True)
class Field:
    """One entry of a compact batch: a numpy array of `dtype` whose shape is `shape` (in its schema's
    dimension names: ``rows``, ``window``, ``tag`` here), or a list of str (`dtype` None). Arrays
    cross from loader workers in shared memory (`load.transfer`), lists are pickled with the message."""

    name: str
    dtype: np.dtype | None
    shape: tuple[str, ...]
    doc: str


#: The fields of a compact batch, in the order they are written.
FIELDS: tuple[Field, ...] = (
    Field("bases", np.dtype(np.uint8), ("rows", "window"), "bases as token ids, PAD after the window's length"),
    Field("lengths", np.dtype(np.int32), ("rows",), "bases of each row"),
    Field("tags", np.dtype(np.uint8), ("rows", "tag"), "control tag bytes, PAD-padded"),
    Field("tag_lengths", np.dtype(np.int32), ("rows",), "bytes of each row's control tag"),
    Field("rc", np.dtype(bool), ("rows",), "whether the row was reverse-complemented"),
    Field("start", np.dtype(np.int64), ("rows",), "the window's first base in its sequence"),
    Field("seq_id", None, ("rows",), "the sequence each row comes from"),
    Field("keys", None, ("rows",), "each window's key, <seq_id>/<window>"),
    Field("filler", np.dtype(bool), ("rows",), "a row without a window (padding, a damaged record)"),
    Field("dataset", np.dtype(np.int16), ("rows",), "the source of each row (-1 for filler)"),
)
#: The arrays, which cross from loader workers in shared memory.
SHARED_FIELDS: tuple[str, ...] = tuple(f.name for f in FIELDS if f.dtype is not None)


def slot_nbytes(fields: tuple[Field, ...], sizes: Mapping[str, int]) -> int:
    """Bytes a full batch of `fields` takes in a transfer slot with dimensions `sizes`: each array's
    bytes rounded up to `ALIGN`, as the transfer writes them."""
    total = 0
    for spec in fields:
        if spec.dtype is not None:
            nbytes = math.prod(sizes[dim] for dim in spec.shape) * spec.dtype.itemsize
            total += -(-nbytes // ALIGN) * ALIGN
    return total


@dataclass(frozen=True)
class BatchSchema:
    """The layout of a dataset's compact batches.

    Args:
        rows: samples per batch (the micro batch).
        window: bases per row (the dataset's window length; the widest of a blend's datasets).
        max_tag: bytes of control tag per row (the room the dataset leaves for tags).
        extra: fields beyond `FIELDS` (the masked-LM draws: `options.SampleOptions.compact_fields`).
    """

    rows: int
    window: int
    max_tag: int
    extra: tuple[Field, ...] = ()

    @property
    def fields(self) -> tuple[Field, ...]:
        return FIELDS + self.extra

    @property
    def sizes(self) -> dict[str, int]:
        """The size of each dimension the fields' shapes name."""
        return {"rows": self.rows, "window": self.window, "tag": self.max_tag}

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of field `name` in a full batch."""
        return tuple(self.sizes[dim] for dim in field(name, self.fields).shape)

    def nbytes(self, name: str) -> int:
        """Bytes of array field `name` in a full batch."""
        dtype = field(name, self.fields).dtype
        if dtype is None:
            raise KeyError(f"{name} is a list of names, not an array")
        return int(np.prod(self.shape(name), dtype=np.int64)) * dtype.itemsize

    @property
    def shared_nbytes(self) -> int:
        """Bytes one batch takes in a transfer slot (`slot_nbytes`)."""
        return slot_nbytes(self.fields, self.sizes)

    def check(self, batch: dict[str, Any]) -> None:
        """Raise a `ValueError` naming the first field of `batch` that does not fit the schema (the
        `index` the builder adds is not part of it)."""
        for spec in self.fields:
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


def field(name: str, fields: tuple[Field, ...] = FIELDS) -> Field:
    """The field of `fields` called `name`."""
    for spec in fields:
        if spec.name == name:
            return spec
    raise KeyError(f"a compact batch has no field {name!r}")
