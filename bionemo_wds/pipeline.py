"""The composable loading stages, under the name users import them by.

``from bionemo_wds.pipeline import untuple, decode_sample, shuffle, reverse_complement, tag_dropout,
batch`` gives exactly the stages `GenomicWebDataModule` runs (they live in `bionemo_wds.compat.stages`), for
`WebDataModule` pipelines of your own; `to_model_inputs` expands their compact batches.
"""

from bionemo_wds.compat.stages import (
    Window,
    batch,
    chunks,
    collate_compact,
    decode_sample,
    reverse_complement,
    shuffle,
    tag_dropout,
    untuple,
)
from bionemo_wds.load.batch.model_inputs import keep_numpy, tensors, to_model_inputs, to_tensors
from bionemo_wds.load.plan.progress import EpochState
from bionemo_wds.load.record_stream import iter_blocks, read_records
from bionemo_wds.seeds import flips
from bionemo_wds.tokenizer import COMPLEMENT, reverse_complement_bases

__all__ = [
    "COMPLEMENT",
    "EpochState",
    "Window",
    "batch",
    "chunks",
    "collate_compact",
    "decode_sample",
    "flips",
    "iter_blocks",
    "keep_numpy",
    "read_records",
    "reverse_complement",
    "reverse_complement_bases",
    "shuffle",
    "tag_dropout",
    "tensors",
    "to_model_inputs",
    "to_tensors",
    "untuple",
]
