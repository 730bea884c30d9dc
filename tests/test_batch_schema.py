"""The compact batch's schema (`bionemo_wds.load.batch.schema`): what every builder writes and the transfer sizes by."""

from __future__ import annotations

import numpy as np
import pytest

from bionemo_wds import GenomicDataset
from bionemo_wds.load.batch import SHARED_FIELDS, BatchSchema
from bionemo_wds.load.batch.schema import ALIGN, field
from bionemo_wds.load.transfer import ARRAYS


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
    assert ARRAYS == SHARED_FIELDS == ("bases", "lengths", "tags", "tag_lengths", "rc", "start")
    schema = BatchSchema(rows=16, window=1021, max_tag=40)
    sizes = {name: schema.nbytes(name) for name in SHARED_FIELDS}
    assert sizes == {
        "bases": 16 * 1021,
        "lengths": 16 * 4,
        "tags": 16 * 40,
        "tag_lengths": 16 * 4,
        "rc": 16,
        "start": 16 * 8,
    }
    # what the transfer's writer takes per batch: each array rounded up to ALIGN bytes
    assert schema.shared_nbytes == sum(-(-n // ALIGN) * ALIGN for n in sizes.values())
    assert field("keys").dtype is None and not field("keys").shared
    with pytest.raises(KeyError, match="no field 'bogus'"):
        field("bogus")
