"""Model inputs as Hugging Face `transformers` causal LMs take them: ``model(**batch)``.

A `transformers` causal LM shifts ``labels`` itself (the logits at column c are scored against
``labels[c + 1]``) and leaves out every label of -100. So the ``hf`` batch is the same token layout
as the default (Megatron-style) one, with:

- ``input_ids``: the ``tokens``;
- ``labels``: NOT shifted: ``labels[c]`` is the token at column c where the default batch trains
  column c - 1 on it (``loss_mask[c - 1] > 0``), else -100 (the first column, specials, tags,
  padding, degenerate bases when they are masked, the first token of every packed document, so no
  document is trained across a boundary);
- ``position_ids``: as the default batch's (restarting at 0 in every packed document);
- unpacked: ``attention_mask`` (1 for BOS .. EOS, 0 for padding);
- packed: the variable-length keys of `transformers`' ``DataCollatorWithFlattening(
  return_flash_attn_kwargs=True)`` (`packed.varlen_keys`): ``cu_seq_lens_q`` = ``cu_seq_lens_k``
  (int32: 0 and the end of every document and of every row's padding over the flattened batch) and
  ``max_length_q`` = ``max_length_k`` (the longest, a Python int); and ``use_cache=False``. No
  ``attention_mask``. `transformers` keeps each document to itself two ways: flash-attention takes
  ``cu_seq_lens``, and sdpa, eager and flex attention build the block-diagonal causal mask from the
  ``position_ids`` (from transformers 4.53.3 on, with torch 2.6), but only when there is no 2D
  ``attention_mask`` (flash-attention would unpad by it; the others would not look at the
  positions) and no cache: a config's ``use_cache`` is True by default, and a model makes a cache
  on every forward then, training too, so the batch says ``use_cache=False``.

A weight per label cannot be given this way: ``soft_mask_weight`` is refused unless it is 0 (soft-
masked bases out of the loss) or 1. The batch builders write this format directly on a CPU
(`model_inputs`, `packed`: no more work than the default format's); `from_megatron` makes it of a
default batch, on any device.
"""

from __future__ import annotations

from typing import Any

import torch

from bionemo_wds.core.tokenizer import PAD_ID
from bionemo_wds.errors import OptionError
from bionemo_wds.load.batch.labels import LabelRules

#: The batch formats: today's (``tokens``, shifted ``labels``, ``loss_mask``, ``position_ids``:
#: Megatron's and NeMo's GPT batch, what bionemo's Evo2 takes) and Hugging Face's.
BATCH_FORMATS = ("megatron", "hf")
#: The label `transformers` (and torch's cross-entropy) leaves out of the loss.
IGNORE_INDEX = -100


def check_batch_format(batch_format: str, soft_mask_weight: float | None) -> None:
    """A known format, and no loss weights where the format has no room for them."""
    if batch_format not in BATCH_FORMATS:
        raise OptionError(f"batch_format must be one of {', '.join(BATCH_FORMATS)}, got {batch_format!r}")
    if batch_format == "hf" and soft_mask_weight not in (None, 0, 1):
        raise OptionError(
            f"batch_format='hf' has no loss weights (a label is trained or -100), so soft_mask_weight="
            f"{soft_mask_weight} cannot be given: use None, 0 (soft-masked bases out of the loss) or 1"
        )


def from_megatron(inputs: dict[str, Any], packed: bool) -> dict[str, Any]:
    """The default model inputs `inputs` (``tokens``, ``labels``, ``loss_mask``, ``position_ids``) as
    the ``hf`` batch's ``input_ids``, ``attention_mask`` (unpacked), ``labels``, ``position_ids``, on
    the same device (a packed batch's varlen keys: `packed.varlen_keys`)."""
    tokens, labels, mask = inputs["tokens"], inputs["labels"], inputs["loss_mask"]
    shifted = torch.full_like(labels, IGNORE_INDEX)
    shifted[:, 1:] = labels[:, :-1].masked_fill(mask[:, :-1] == 0, IGNORE_INDEX)
    out: dict[str, Any] = {"input_ids": tokens}
    if not packed:
        out["attention_mask"] = (tokens != PAD_ID).long()
    out["labels"] = shifted
    out["position_ids"] = inputs["position_ids"]
    return out


def finish(inputs: dict[str, Any], rules: LabelRules, hf: bool, packed: bool) -> dict[str, Any]:
    """A default batch laid out without label rules, with `rules` applied and, for `hf`, as the
    ``hf`` batch (`from_megatron`): the form for an accelerator and the CPU's slower layouts."""
    inputs = rules.apply(inputs)
    return from_megatron(inputs, packed) if hf else inputs
