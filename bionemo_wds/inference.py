"""`encode`: sequences in memory -> the model inputs the training path yields, for inference.

One tokenizer, two paths: a window encoded here and the same window read from prepared shards go
through the same `stages.collate_compact` and `model_inputs.to_model_inputs`, so a model sees
identical ``tokens``, ``labels``, ``loss_mask`` and ``position_ids`` at training and inference time.
Sequences longer than a window are cut with the dataset's rule (`prepare.windows.window_table`:
windows of ``seq_length - 3 - longest tag`` bases every `stride` bases (a lineage tag counted with
the room prepare leaves for its ranks dropped to ``None``), the last one aligned to the
sequence end unless ``tail="drop"``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from bionemo_wds.compat.stages import collate_compact
from bionemo_wds.core.lineage import dropout_length
from bionemo_wds.core.tokenizer import encode_tag, first_invalid
from bionemo_wds.errors import OptionError, SourceError
from bionemo_wds.format import window_key
from bionemo_wds.load.batch.labels import LabelRules
from bionemo_wds.load.batch.model_inputs import to_model_inputs
from bionemo_wds.prepare.windows import TAIL_MODES, check_stride, window_length, window_table


def _as_list(values: Any, what: str) -> list[Any]:
    if isinstance(values, (str, bytes, bytearray)):
        return [values]
    if not isinstance(values, Sequence):
        raise TypeError(f"{what} must be a string or a sequence of strings, got {type(values).__name__}")
    return list(values)


def encode(
    sequences: str | bytes | Sequence[str | bytes],
    seq_length: int,
    tags: str | Sequence[str] | None = None,
    control_tags: bool = True,
    fold_case: bool = True,
    soft_mask_weight: float | None = None,
    stride: int | None = None,
    tail: str = "end",
    mask_degenerate_bases: bool = True,
    uppercase_labels: bool = False,
) -> dict[str, Any]:
    """Model inputs of `sequences` (bases as text: IUPAC codes of either case), one row per window.

    Args:
        sequences: one sequence or several.
        seq_length: tokens per row (the model's context).
        tags: a control tag for every sequence (one string for all, or one per sequence), placed
            between BOS and SEP as the shards' tags are; None: no tags.
        control_tags: lay out ``BOS + tag + SEP + bases + EOS`` (else ``BOS + bases + EOS``), as the
            data modules' argument of that name.
        fold_case, soft_mask_weight: as in `GenomicWebDataModule` (upper-case ids for soft-masked
            bases; loss weight of lower-case labels).
        stride: bases between window starts (default: the window length, so windows tile a sequence).
        tail: "end" (a last window aligned to the sequence end, no base lost) or "drop" (Eden's count).
        mask_degenerate_bases, uppercase_labels: as in `GenomicWebDataModule` (``loss_mask`` 0 where
            the label is not A/C/G/T; upper-case labels of soft-masked bases).

    Returns:
        ``tokens``, ``labels`` (int64), ``loss_mask`` (float32), ``position_ids`` of shape
        (windows, seq_length), and per window ``sequence`` (index into `sequences`), ``start``,
        ``lengths`` and ``keys`` (``<index>/<window>``) to map rows back.
    """
    seqs = [s.encode("ascii", "replace") if isinstance(s, str) else bytes(s) for s in _as_list(sequences, "sequences")]
    if not seqs:
        raise SourceError("encode needs at least one sequence")
    tag_list = [""] * len(seqs) if tags is None else _as_list(tags, "tags")
    if len(tag_list) == 1 and len(seqs) > 1:
        tag_list = tag_list * len(seqs)
    if len(tag_list) != len(seqs):
        raise OptionError(f"encode got {len(tag_list)} tags for {len(seqs)} sequences; give one per sequence")
    if tail not in TAIL_MODES:
        raise OptionError(f"tail must be one of {', '.join(TAIL_MODES)}, got {tail!r}")
    tag_bytes = [encode_tag(t, f"#{i}") for i, t in enumerate(tag_list)]
    for i, seq in enumerate(seqs):
        if not seq:
            raise SourceError(f"sequence #{i} is empty")
        bad = first_invalid(seq)
        if bad >= 0:
            raise SourceError(
                f"sequence #{i} has {chr(seq[bad])!r} at position {bad}, which is not an IUPAC nucleotide code"
            )
    # the tag room prepare leaves (`Catalog.max_tag_bytes`), so windows fall where the dataset's do
    longest = max(map(dropout_length, tag_list)) if control_tags else 0
    window = window_length(seq_length, longest)
    stride = window if stride is None else stride
    check_stride(stride, window, seq_length, longest)
    lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    table = window_table(np.arange(len(seqs)), lengths, window, stride, tail)
    samples = []
    for seq_index, number, start, length in zip(
        table.seq_index.tolist(), table.window_index.tolist(), table.start.tolist(), table.length.tolist()
    ):
        bases = np.frombuffer(seqs[seq_index], dtype=np.uint8)[start : start + length]
        key = window_key(str(seq_index), number)
        samples.append(
            {
                "bases": bases,
                "tag": tag_bytes[seq_index],
                "key": key,
                "seq_id": str(seq_index),
                "start": start,
                "rc": False,
            }
        )
    compact = collate_compact(samples, window, longest)
    rules = LabelRules(mask_degenerate_bases, uppercase_labels)
    out = to_model_inputs(compact, seq_length, control_tags, fold_case, soft_mask_weight, rules)
    del out["seq_id"], out["rc"]  # the input's index says which sequence; nothing is flipped here
    out["sequence"] = torch.from_numpy(table.seq_index.copy())
    return out
