"""The compact batch's schema (`bionemo_wds.load.batch.schema`): what every builder writes and the transfer sizes by."""

from __future__ import annotations

import numpy as np
import pytest

from bionemo_wds import GenomicDataset
from bionemo_wds.load.batch import SHARED_FIELDS, BatchSchema
from bionemo_wds.load.batch.packed import PACKED_FIELDS, SLOT_DOCUMENTS, PackedDocument, PackedSchema, compact_packed
from bionemo_wds.load.batch.schema import ALIGN, field


@pytest.fixture(scope="module")
def compact(kleb_1024) -> tuple[GenomicDataset, list[dict]]:
    """A real dataset's compact batches (train, with reverse complement; val, with filler)."""
    batches = []
    for split in ("train", "val"):
        ds = GenomicDataset(str(kleb_1024), split, micro_batch_size=8, model_inputs=False, seed=3, rc_prob=0.5)
        for n, batch in enumerate(ds):
            batches.append((ds, batch))
            if n == 3:
                break
    return batches


def test_every_batch_a_dataset_builds_fits_its_schema(compact):
    for ds, batch in compact:
        as_numpy = {k: v.numpy() if hasattr(v, "numpy") else v for k, v in batch.items()}
        as_numpy["filler"] = np.asarray([not k for k in batch["keys"]])  # the plain dataset drops the flag
        ds.schema.check(as_numpy)
        assert ds.schema == BatchSchema(8, ds.params.window_length, ds.params.max_tag_bytes)


def test_a_batch_that_does_not_fit_is_named_by_its_field(compact):
    ds, batch = compact[0]
    bad = {k: v.numpy() if hasattr(v, "numpy") else v for k, v in batch.items()}
    bad["filler"] = np.zeros(8, dtype=bool)
    bad["lengths"] = bad["lengths"].astype(np.int64)
    with pytest.raises(ValueError, match="'lengths' is int64"):
        ds.schema.check(bad)
    bad["lengths"] = bad["lengths"].astype(np.int32)
    ds.schema.check(bad)
    del bad["tags"]
    with pytest.raises(ValueError, match="no 'tags'"):
        ds.schema.check(bad)


def test_the_transfer_sends_the_shared_fields_in_slots_the_schema_sizes():
    assert SHARED_FIELDS == ("bases", "lengths", "tags", "tag_lengths", "rc", "start", "filler", "dataset")
    schema = BatchSchema(rows=16, window=1021, max_tag=40)
    sizes = {name: schema.nbytes(name) for name in SHARED_FIELDS}
    assert sizes == {
        "bases": 16 * 1021,
        "lengths": 16 * 4,
        "tags": 16 * 40,
        "tag_lengths": 16 * 4,
        "rc": 16,
        "start": 16 * 8,
        "filler": 16,
        "dataset": 16 * 2,
    }
    # what the transfer's writer takes per batch: each array rounded up to ALIGN bytes
    assert schema.shared_nbytes == sum(-(-n // ALIGN) * ALIGN for n in sizes.values())
    assert field("keys").dtype is None
    with pytest.raises(KeyError, match="no field 'bogus'"):
        field("bogus")


def slot_bytes_written(batch: dict) -> int:
    """What the transfer writes of `batch` into a slot: every array, rounded up to ALIGN bytes."""
    return sum(-(-v.nbytes // ALIGN) * ALIGN for v in batch.values() if isinstance(v, np.ndarray))


def test_a_full_batch_fills_its_transfer_slot_exactly(compact):
    ds, batch = compact[0]
    arrays = {k: np.asarray(v) for k, v in batch.items() if hasattr(v, "numpy")}
    arrays["filler"] = np.asarray([not k for k in batch["keys"]])  # the plain dataset drops the flag
    arrays.setdefault("dataset", np.zeros(len(batch["keys"]), dtype=np.int16))
    assert set(arrays) == set(SHARED_FIELDS)
    assert slot_bytes_written(arrays) == ds.schema.shared_nbytes


def test_a_packed_batch_fills_its_transfer_slot_exactly():
    """With `SLOT_DOCUMENTS` documents in a row, a packed batch's arrays take exactly the bytes its schema
    sizes slots by; its fields are `PACKED_FIELDS`."""
    rows, seq_length = 4, 1000
    doc = PackedDocument(np.full(20, 4, dtype=np.uint8), b"", False, "s", 0, "s:0+20")
    batch = compact_packed([[doc] * SLOT_DOCUMENTS] * rows, seq_length, control_tags=False)
    batch["filler"] = np.zeros(rows, dtype=bool)
    batch["dataset"] = np.zeros(rows, dtype=np.int16)
    assert set(batch) == {f.name for f in PACKED_FIELDS}
    for spec in PACKED_FIELDS:
        if spec.dtype is not None:
            assert batch[spec.name].dtype == spec.dtype, spec.name
    assert slot_bytes_written(batch) == PackedSchema(rows, seq_length).shared_nbytes
