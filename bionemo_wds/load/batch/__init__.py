"""Where a batch is built: the one package that makes a training batch from planned windows.

- `schema`: the compact batch's fields, dtypes and bytes (`BatchSchema`), which the transfer and
  the data modules ask;
- `draws`: a sample's reverse-complement and tag-dropout draws (pure functions of seed, pass, key);
- `compact`: writing rows of bases and tags into the compact batch's arrays;
- `assemble`: the one assembly path, a planned batch's windows -> a compact batch;
- `options`: the per-sample choices of a dataset (`SampleOptions`);
- `model_inputs`: compact batch -> ``tokens``/``labels``/``loss_mask``/``position_ids``, on the device
  (`packed`: the same for packed samples);
- `labels`: which labels are trained (degenerate bases, upper-case labels, too few real bases);
- `hf`: the batch format of Hugging Face `transformers` models (``batch_format="hf"``).
"""

from bionemo_wds.load.batch.assemble import PlannedRows, assemble
from bionemo_wds.load.batch.compact import compact_batch
from bionemo_wds.load.batch.model_inputs import to_model_inputs
from bionemo_wds.load.batch.options import SampleOptions
from bionemo_wds.load.batch.schema import FIELDS, SHARED_FIELDS, BatchSchema
from bionemo_wds.load.batch.to_torch import SampleNames, tensors

__all__ = [
    "FIELDS",
    "SHARED_FIELDS",
    "BatchSchema",
    "PlannedRows",
    "SampleNames",
    "SampleOptions",
    "assemble",
    "compact_batch",
    "tensors",
    "to_model_inputs",
]
