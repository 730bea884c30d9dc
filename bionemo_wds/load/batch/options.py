"""How a window becomes a sample: strand, control tag, case, loss weights, objective and batch format, in one place.

`SampleOptions` holds the per-sample choices of a `GenomicDataset` and builds both halves of a
batch from them: `assemble_stage` makes compact batches in the loader workers (reverse complement,
tag dropout: seeded by seed, pass and window key) and `model_inputs` expands a compact batch where
it is used (case folding, soft-mask weights, the label rules of `labels`, and the ``hf`` format of
`hf`, all laid out by the builders of `model_inputs` and `packed`). With ``objective="mlm"`` the
workers also draw each sample's masks (`mlm`: seeded by seed, pass and key, for every split) and
the expansion lays them over the batch (`mlm.apply_masks`); with ``mlm_draws="device"`` the workers
send each row's salt and the expansion draws the same masks on the batch's device (`mlm_device`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import Any

import numpy as np
import torch

from bionemo_wds.errors import OptionError
from bionemo_wds.format.manifest import Manifest, stored_case
from bionemo_wds.load.batch.assemble import TokenLayout, assemble
from bionemo_wds.load.batch.hf import check_batch_format
from bionemo_wds.load.batch.labels import LabelRules
from bionemo_wds.load.batch.mlm import apply_masks
from bionemo_wds.load.batch.mlm_device import DRAW_PLACES, draw_masks
from bionemo_wds.load.batch.mlm_rule import BYTES, MaskingRule, check_objective
from bionemo_wds.load.batch.mlm_tokens import masked_token_inputs
from bionemo_wds.load.batch.mlm_windows import masked_window_inputs
from bionemo_wds.load.batch.model_inputs import check_soft_mask_weight, to_model_inputs
from bionemo_wds.load.batch.packed import PackedSchema, packed_model_inputs
from bionemo_wds.load.batch.packed_columns import boundaries
from bionemo_wds.load.batch.schema import BatchSchema, Field
from bionemo_wds.load.batch.to_torch import SampleNames
from bionemo_wds.load.batch.token_inputs import token_model_inputs, token_passthrough
from bionemo_wds.load.plan.progress import EpochState
from bionemo_wds.load.tokenize import Tokenizer, resolve_tokenizer, vocabulary_only


@dataclass(frozen=True)
class SampleOptions:
    """Per-sample choices (see `GenomicDataset` for each); checked when made."""

    rc_prob: float = 0.5
    control_tags: bool = True
    tag_dropout: float = 0.0
    fold_case: bool = True
    soft_mask_weight: float | None = None
    mask_degenerate_bases: bool = True
    uppercase_labels: bool = False
    min_real_fraction: float = 0.0
    batch_format: str = "megatron"
    objective: str = "clm"
    mlm_probability: float = 0.15
    mlm_replace: str = "bert"
    mlm_span: bool | None = None
    tokenizer: Any = "bytes"
    mlm_draws: str = "auto"

    def __post_init__(self) -> None:
        if not 0 <= self.rc_prob <= 1:
            raise OptionError(f"rc_prob must be in [0, 1], got {self.rc_prob}")
        if not 0 <= self.tag_dropout <= 1:
            raise OptionError(f"tag_dropout must be in [0, 1], got {self.tag_dropout}")
        check_soft_mask_weight(self.soft_mask_weight)
        check_batch_format(self.batch_format, self.soft_mask_weight)
        _ = self.label_rules  # checked now
        check_objective(self.objective, self.mlm_probability, self.mlm_replace, self.mlm_span)
        _ = self.masking_rule  # checked now: a tokenizer with a mask token, span masking it can take
        if self.mlm_draws not in DRAW_PLACES:
            raise OptionError(f"mlm_draws must be one of {', '.join(DRAW_PLACES)}, got {self.mlm_draws!r}")
        if self.objective == "mlm" and self.soft_mask_weight not in (None, 0, 1):
            raise OptionError(
                f"objective='mlm' predicts a token or not (no loss weights), so soft_mask_weight="
                f"{self.soft_mask_weight} cannot be given: use None, 0 (soft-masked bases never predicted) or 1"
            )
        if self.vocab is not None and not self.fold_case:
            raise OptionError(
                f"fold_case=False keeps soft-masked bases as lower-case ids, which only tokenizer='bytes' has; "
                f"tokenizer {self.vocab.name!r} spells upper-case bases (weigh soft-masked ones with soft_mask_weight)"
            )

    @classmethod
    def pick(cls, options: Mapping[str, Any]) -> SampleOptions:
        """The options of a dataset's or data module's arguments (`options`: by name; others ignored)."""
        return cls(**{f.name: options[f.name] for f in fields(cls) if f.name in options})

    def placed(self, trainer: Any) -> SampleOptions:
        """These options with ``mlm_draws="auto"`` made "device" when `trainer` (a Lightning Trainer, or
        None) runs on an accelerator, where the expansion draws masks in microseconds, else "workers"."""
        if self.mlm_draws != "auto":
            return self
        device = getattr(getattr(getattr(trainer, "strategy", None), "root_device", None), "type", "cpu")
        return replace(self, mlm_draws="workers" if device == "cpu" else "device")

    @cached_property
    def vocab(self) -> Tokenizer | None:
        """The tokenizer whose ids samples are made of (`tokenize.resolve_tokenizer`; None: bytes, the
        byte layout; also None for a vocabulary object without rules, which masking alone reads)."""
        return None if vocabulary_only(self.tokenizer) else resolve_tokenizer(self.tokenizer)

    def check_tags(self, max_tag_bytes: int, where: str) -> None:
        """A tokenizer other than bytes has no ids for control tags: refuse data that has them."""
        if self.vocab is not None and self.control_tags and max_tag_bytes > 0:
            raise OptionError(
                f"{where} has control tags, which tokenizer {self.vocab.name!r} cannot spell (its vocabulary holds "
                "bases only): give control_tags=False to train without them, or tokenizer='bytes'"
            )

    @cached_property
    def label_rules(self) -> LabelRules:
        """Which labels are trained (`labels.LabelRules`)."""
        return LabelRules(self.mask_degenerate_bases, self.uppercase_labels, self.min_real_fraction)

    @cached_property
    def masking_rule(self) -> MaskingRule | None:
        """The masked-LM rule (`mlm_rule.MaskingRule`) with ``objective="mlm"``, else None."""
        if self.objective != "mlm":
            return None
        vocab: Any = self.vocab if self.vocab is not None else BYTES
        if vocabulary_only(self.tokenizer):  # byte ids with a vocabulary of their own (a mask token)
            vocab = self.tokenizer
        return MaskingRule.of(vocab, self.mlm_probability, self.mlm_replace, self.mlm_span)

    @property
    def draws_on_device(self) -> bool:
        """Whether the expansion draws the masked-LM masks (``mlm_draws="device"``; "auto" is made
        "device" by a data module whose Trainer runs on an accelerator, else it is the workers)."""
        return self.masking_rule is not None and self.mlm_draws == "device"

    def compact_fields(self) -> tuple[Field, ...]:
        """The fields the compact batch has beyond the schema's own: with ``objective="mlm"`` the
        masked-LM draws (``mlm``, rows x the schema's row width), or each row's salt for them when the
        expansion draws them (``mlm_salts``)."""
        rule = self.masking_rule
        if rule is None:
            return ()
        if self.draws_on_device:
            return (Field("mlm_salts", np.dtype(np.int64), ("rows",), "each row's masked-LM salt (batch.mlm_device)"),)
        return (Field("mlm", rule.dtype, ("rows", "window"), "masked-LM draws (batch.mlm)"),)

    def unused(self, manifest: Manifest) -> list[str]:
        """The options that can have no effect on the dataset of `manifest`, and why (to warn about)."""
        problems = []
        if self.soft_mask_weight is not None and stored_case(manifest) == "upper":
            problems.append(
                f"soft_mask_weight={self.soft_mask_weight} has no effect: the dataset was prepared with "
                "--case upper, so no base is soft-masked (prepare with --case keep)"
            )
        if self.tag_dropout > 0 and (not self.control_tags or not manifest.params.max_tag_bytes):
            why = "control_tags is False" if not self.control_tags else "the dataset has no control tags"
            problems.append(f"tag_dropout={self.tag_dropout} has no effect: {why}")
        if self.uppercase_labels and self.fold_case:
            problems.append(
                "uppercase_labels=True has no effect: fold_case=True gives the model upper-case ids, and the "
                "labels are those ids (give fold_case=False for a model that sees the case)"
            )
        return problems

    def assemble_stage(
        self, schema: BatchSchema | PackedSchema, seed: int, epoch: EpochState, train: bool, seq_length: int = 0
    ) -> Any:
        """The stage turning planned windows into compact batches of `schema`: reverse complement
        and tag dropout for training only; with a tokenizer, rows of `seq_length` token ids."""
        rc, drop = (self.rc_prob, self.tag_dropout) if train else (0.0, 0.0)
        layout = None if self.vocab is None else TokenLayout(self.vocab, seq_length)
        return assemble(
            schema, rc, seed, epoch, drop, self.control_tags, layout, self.masking_rule, self.draws_on_device
        )

    def model_inputs(self, compact: dict[str, Any], seq_length: int) -> dict[str, Any]:
        """Compact batch -> tokens, labels, loss_mask, position_ids (and a packed batch's document
        boundaries: `packed.packed_model_inputs`), the label rules applied; with
        ``batch_format="hf"``, the batch a `transformers` model takes (`hf`); with ``objective="mlm"``
        the batch laid out unmasked (as ``hf``), then its masks laid over it (`masked`), or, on a CPU
        for window rows and a tokenizer's rows, both in one pass (`mlm_windows.masked_window_inputs`,
        `mlm_tokens.masked_token_inputs`)."""
        rules, fmt, mlm = self.label_rules, self.batch_format, self.masking_rule is not None
        layout = "hf" if mlm else fmt
        packed = "doc_tokens" in compact
        if self.vocab is not None:  # token ids laid out in the workers (`token_inputs`)
            codes = self.mask_codes(compact) if mlm else None
            # masked-LM: the inputs written once, the masks laid over on the way, where that path applies
            fused = masked_token_inputs(compact, self.vocab, self.soft_mask_weight, rules, codes, fmt != "hf")
            if fused is not None:
                return fused
            out = token_model_inputs(compact, self.vocab, self.soft_mask_weight, rules, layout, causal=not mlm)
            if mlm:  # laid out as hf, so the passthrough of the megatron format is added here
                out = self.masked(out, compact, codes)
                if fmt != "hf":
                    out.update({k: v for k, v in token_passthrough(compact).items() if k not in out})
            return out
        if packed:
            out = packed_model_inputs(compact, self.fold_case, self.soft_mask_weight, rules, layout)
            if mlm:
                out = self.masked(out, compact)
        else:
            case = (self.fold_case, self.soft_mask_weight)
            codes = self.mask_codes(compact) if mlm else None
            # masked-LM: the labels written once, the masks laid over on the way, where that path applies
            fused = masked_window_inputs(compact, seq_length, self.control_tags, *case, rules, codes, fmt != "hf")
            if fused is not None:
                out = fused
            else:
                out = to_model_inputs(compact, seq_length, self.control_tags, *case, rules, layout)
                if mlm:
                    out = self.masked(out, compact, codes)
        if fmt != "hf" and (packed or mlm):
            for passthrough in ("keys", "seq_id", "start", "rc", "doc_rc", "lengths", "dataset"):
                if passthrough in compact:
                    value = compact[passthrough]
                    out[passthrough] = SampleNames(value) if isinstance(value, list) else torch.as_tensor(value)
        return out

    def mask_codes(self, compact: dict[str, Any]) -> Any:
        """The ``mlm`` codes of `compact`: the workers' draws, or drawn here from its row salts."""
        rule = self.masking_rule
        assert rule is not None
        if "mlm" in compact:
            return compact["mlm"]
        if "mlm_salts" in compact:
            return draw_masks(compact, rule, self.vocab is not None)
        raise ValueError("objective='mlm' expands compact batches that carry masks or salts ('mlm', 'mlm_salts')")

    def masked(self, inputs: dict[str, Any], compact: dict[str, Any], codes: Any = None) -> dict[str, Any]:
        """The unmasked ``hf`` inputs of `compact` with its masked-LM draws (`codes`, or `mask_codes`)
        laid over them (`mlm.apply_masks`), in the dataset's batch format. A draw's column is its
        base's place in the compact rows: after BOS, tag and SEP in a window row, the token column
        itself in a packed row and in every row of a tokenizer's (its rows are laid out in the workers,
        specials included)."""
        if codes is None:
            codes = self.mask_codes(compact)
        megatron = self.batch_format != "hf"
        if "doc_tokens" in compact or self.vocab is not None:  # the draws lie over the token columns
            first = torch.zeros(len(compact["lengths"]), dtype=torch.int64)
            out = apply_masks(inputs, codes, first, megatron)
            if megatron and "doc_tokens" in compact:
                out |= boundaries(torch.as_tensor(compact["doc_tokens"]).to(out["tokens"].device))
            return out
        tags = torch.as_tensor(compact["tag_lengths"]).long()
        first = tags + 2 if self.control_tags else torch.ones_like(tags)
        return apply_masks(inputs, codes, first, megatron)
