"""A packed row's ``lengths``: its bases, all its documents together (as a window row's ``lengths``
counts its bases), in the compact batch and passed through into the model inputs."""

from __future__ import annotations

import numpy as np
import torch

from bionemo_wds.load.batch.options import SampleOptions
from bionemo_wds.load.batch.packed import PackedDocument, compact_packed


def document(n: int, key: str, tag: bytes = b"", rc: bool = False) -> PackedDocument:
    return PackedDocument(np.full(n, ord("A"), dtype=np.uint8), tag, rc, key.split(":")[0], 0, key)


def test_packed_lengths_count_each_rows_bases() -> None:
    rows = [
        [document(10, "a:0+10", b"|x|"), document(5, "b:0+5", b"|yy|", rc=True)],
        [document(40, "c:0+40", b"|x|")],
        [],  # an empty sample
    ]
    compact = compact_packed(rows, seq_length=64, control_tags=True)
    assert compact["lengths"].dtype == np.int32 and compact["lengths"].tolist() == [15, 40, 0]
    compact["dataset"] = np.zeros(3, dtype=np.int16)
    inputs = SampleOptions().model_inputs(compact, 64)
    assert torch.equal(inputs["lengths"], torch.tensor([15, 40, 0], dtype=torch.int32))
    # the row's tokens: its bases, and per document BOS, the tag, SEP and EOS
    overhead = torch.tensor([(3 + 3) + (3 + 4), 3 + 3, 0])
    assert torch.equal(inputs["seq_lens"].sum(1), inputs["lengths"] + overhead)
    assert inputs["doc_rc"].tolist() == [[False, True], [False, False], [False, False]]
    assert inputs["rc"].tolist() == [False, False, False]  # the first document's strand
