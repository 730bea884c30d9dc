"""The benchmark's peers for the batch format a `transformers` model takes (``batch_format="hf"``).

- ``ours_hf``: ``ours`` (format 4 windows, the same data module and options) with
  ``batch_format="hf"``: ``input_ids``, ``attention_mask``, ``labels`` (not shifted, -100 where not
  trained), ``position_ids``; the two rows give the cost of the format.
- ``ours_packed_hf``: ``ours_packed`` with ``batch_format="hf"``: the packed batch with the
  flattened varlen keys (``cu_seq_lens_q/k``, ``max_length_q/k``).
- ``ours_mlm``: ``ours_hf`` with ``objective="mlm"`` (byte ids with a mask token, `MASKED_BYTES`):
  the masks drawn in the loader workers (the package's way) and laid over the batch at expansion.
- ``ours_mlm_main``: ``ours_hf`` whose masks are drawn in the main process instead, on each compact
  batch before its expansion (the same draws, `batch.mlm.batch_masks`): the other place the draws
  could be made; the two rows say which is faster.
- ``ours_hf_device``, ``ours_mlm_device``: ``ours_hf`` and ``ours_mlm`` whose compact batches are
  moved to the GPU and expanded there, as a Trainer does (``on_after_batch_transfer``), the masks
  drawn there too (``mlm_draws="device"``), from pinned memory; each batch waits for the GPU. Only
  with CUDA.

Each prepares its own copy of its peer's dataset (the same options), so its prepare row repeats
that peer's.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np

from benchmarks.packing_peers import OursPacked
from benchmarks.peers import SEED, Ours
from bionemo_wds.core.tokenizer import PAD_ID

#: The peers of this module.
FORMAT_PEERS = ("ours_hf", "ours_packed_hf", "ours_mlm", "ours_mlm_main", "ours_hf_device", "ours_mlm_device")
#: The peers that expand their batches on a GPU.
DEVICE_PEERS = ("ours_hf_device", "ours_mlm_device")


def format_missing(peer: str = "ours_hf") -> str | None:
    """Why this checkout or machine cannot run `peer` (a data module without ``batch_format`` or,
    for the device peers, ``mlm_draws``; no CUDA device), or None."""
    import torch

    from bionemo_wds.lightning.datamodule import GenomicWebDataModule

    options = inspect.signature(GenomicWebDataModule).parameters
    if "batch_format" not in options:
        return "this checkout's GenomicWebDataModule has no batch_format option"
    if peer in DEVICE_PEERS and "mlm_draws" not in options:
        return "this checkout's GenomicWebDataModule has no mlm_draws option"
    if peer in DEVICE_PEERS and not torch.cuda.is_available():
        return "needs a CUDA device (the batches are expanded on the GPU)"
    return None


class OursHF(Ours):
    name = "ours_hf"

    def load_options(self) -> dict[str, Any]:
        return {**super().load_options(), "batch_format": "hf"}


class OursPackedHF(OursPacked):
    name = "ours_packed_hf"

    def load_options(self) -> dict[str, Any]:
        return {**super().load_options(), "batch_format": "hf"}


def masked_bytes() -> Any:
    """Our byte ids with a mask token (id 5, unused by bases); every id but a base's special, so a
    random replacement is a base: the vocabulary of the masked-LM rows."""
    from bionemo_wds.load.batch.mlm_rule import Vocabulary

    return Vocabulary("bytes-with-mask", 256, PAD_ID, 5, frozenset(range(256)) - frozenset(b"ACGTNacgtn"))


class OursMLM(Ours):
    name = "ours_mlm"

    def load_options(self) -> dict[str, Any]:
        return {**super().load_options(), "batch_format": "hf", "objective": "mlm", "tokenizer": masked_bytes()}


class OursMLMMain(Ours):
    name = "ours_mlm_main"

    def load_options(self) -> dict[str, Any]:
        return {**super().load_options(), "batch_format": "hf"}

    def expand(self, dm: Any, compact: dict[str, Any]) -> dict[str, Any]:
        """The masks of `compact` drawn here, in the main process, then laid over its hf inputs."""
        import torch

        from bionemo_wds.core.seeds import mlm_salt
        from bionemo_wds.load.batch.mlm import apply_masks, batch_masks
        from bionemo_wds.load.batch.mlm_rule import MaskingRule

        ids, lengths = np.asarray(compact["bases"]), np.asarray(compact["lengths"])
        rule = MaskingRule.of(masked_bytes())
        masks = batch_masks(ids, np.arange(ids.shape[1]) < lengths[:, None], compact["keys"], mlm_salt(SEED, 0), rule)
        first = torch.as_tensor(compact["tag_lengths"]).long() + 2  # BOS, tag, SEP before the bases
        return apply_masks(dm.model_inputs(compact), masks, first, megatron=False)


def on_gpu(dm: Any, compact: dict[str, Any]) -> dict[str, Any]:
    """`compact` moved to the GPU and expanded there (what a Trainer's transfer and
    ``on_after_batch_transfer`` do), waiting for the GPU to finish the batch."""
    import torch

    moved = {k: v.to("cuda", non_blocking=True) if isinstance(v, torch.Tensor) else v for k, v in compact.items()}
    out = dm.model_inputs(moved)
    torch.cuda.synchronize()
    return out


class OursHFDevice(OursHF):
    name = "ours_hf_device"

    def load_options(self) -> dict[str, Any]:
        return {**super().load_options(), "pin_memory": True}  # what a GPU run uses

    def expand(self, dm: Any, compact: dict[str, Any]) -> dict[str, Any]:
        return on_gpu(dm, compact)


class OursMLMDevice(OursMLM):
    name = "ours_mlm_device"

    def load_options(self) -> dict[str, Any]:
        return {**super().load_options(), "mlm_draws": "device", "pin_memory": True}

    def expand(self, dm: Any, compact: dict[str, Any]) -> dict[str, Any]:
        return on_gpu(dm, compact)
