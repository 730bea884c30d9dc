"""Masked-LM draws made where the batch is expanded, on its device: the same draws as the workers'.

With ``mlm_draws="device"`` the loader workers put one salt per row in the compact batch
(``mlm_salts``, `mlm.row_salts`) instead of the whole ``mlm`` matrix, and the expansion draws the
matrix from the compact batch on the device it was moved to: by numpy on a CPU (`mlm.mask_tokens`),
by whole-batch tensor ops elsewhere (`device_mask_tokens`), then lays it over the model inputs as
for worker draws (`mlm.apply_masks`). The tensor ops compute `mlm.mask_tokens`'s hashes bit for bit
in int64 arithmetic (multiplication wraps modulo 2**64; a logical shift is an arithmetic one
masked), so a batch gets the same masks whichever side drew them, on every device and rank.

Where the draws go is a matter of speed alone: on an accelerator a few kernels over the batch take
microseconds and the loader does none of the work; on a CPU the workers draw in parallel with the
training step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bionemo_wds.core.seeds import GOLDEN, MIX_M1, MIX_M2
from bionemo_wds.load.batch.mlm import FMIX_F1, FMIX_F2, WEYL32, mask_tokens, spread
from bionemo_wds.load.batch.mlm_rule import (
    BERT_MASK_SHARE,
    BERT_RANDOM_SHARE,
    MLM_KEEP,
    MLM_NONE,
    REPLACE_MIX,
    MaskingRule,
)
from bionemo_wds.load.batch.packed_columns import base_columns

#: Where masked-LM draws are made: the loader workers, the expansion on the batch's device, or
#: the device when the data module's Trainer runs on an accelerator (the workers otherwise).
DRAW_PLACES = ("workers", "device", "auto")

_M32 = 0xFFFFFFFF


def _signed(value: int) -> int:
    """A uint64 constant as the int64 with the same bits (a torch int64 scalar)."""
    value = int(value) & ((1 << 64) - 1)
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN, _MIX = _signed(int(GOLDEN)), _signed(int(REPLACE_MIX))
_M1, _M2 = _signed(int(MIX_M1)), _signed(int(MIX_M2))


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's ``>>`` is arithmetic)."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def mix64_t(x: torch.Tensor) -> torch.Tensor:
    """`seeds.mix64` (SplitMix64's finaliser) of int64 tensors holding uint64 bit patterns."""
    x = (x ^ _shr(x, 30)) * _M1
    x = (x ^ _shr(x, 27)) * _M2
    return x ^ _shr(x, 31)


def fmix32_t(h: torch.Tensor) -> torch.Tensor:
    """`mlm.fmix32` of int64 tensors holding values below 2**32."""
    h = h ^ (h >> 16)
    h = (h * int(FMIX_F1)) & _M32
    h = h ^ (h >> 13)
    h = (h * int(FMIX_F2)) & _M32
    return h ^ (h >> 16)


def device_mask_tokens(
    ids: torch.Tensor, candidates: torch.Tensor, salts: torch.Tensor, rule: MaskingRule, specials: bool = True
) -> torch.Tensor:
    """`mlm.mask_tokens` by tensor ops on the device of `ids`: `salts` one int64 per row (the uint64
    salts' bits). Equal to `mask_tokens` of the same arguments, element for element."""
    device = ids.device
    n, width = candidates.shape
    dtype = torch.from_numpy(np.empty(0, rule.dtype)).dtype
    out = torch.full((n, width), MLM_NONE, dtype=dtype, device=device)
    if not n or not width:
        return out
    salts = salts.to(device=device, dtype=torch.int64)
    folded = (salts & _M32) ^ _shr(salts, 32)
    steps = (torch.arange(1, width + 1, device=device, dtype=torch.int64) * int(WEYL32)) & _M32
    chosen = fmix32_t((folded[:, None] + steps[None, :]) & _M32) < rule.bound32
    special_table, random_ids = device_tables(rule, device)
    special = special_table[ids.long()] if specials else torch.zeros_like(chosen)
    allowed = candidates.to(device=device, dtype=torch.bool) & ~special
    if rule.span > 1:
        chosen = spread(chosen & allowed, rule.span) & allowed
    else:
        chosen &= allowed
    if rule.replace == "mask":
        return out.masked_fill_(chosen, rule.mask_id)
    # every cell's replacement draw, not only the chosen cells': no nonzero(), which waits for the
    # device, and on an accelerator a few more element-wise kernels over the batch cost nothing
    col = torch.arange(1, width + 1, device=device, dtype=torch.int64)
    second = mix64_t(salts[:, None] + col[None, :] * _GOLDEN)
    share = _shr(second, 11).double() * 2.0**-53
    third = _shr(mix64_t(second ^ _MIX), 32)
    shown = random_ids[(third * len(rule.random_ids)) >> 32]
    shown = torch.where(share < BERT_MASK_SHARE + BERT_RANDOM_SHARE, shown, torch.full_like(shown, MLM_KEEP))
    shown = torch.where(share < BERT_MASK_SHARE, torch.full_like(shown, rule.mask_id), shown)
    return torch.where(chosen, shown.to(dtype), out)


#: Each rule's tables on each device, made once (a copy to the device per batch would cost more than
#: the draws); keyed by the rule's id, holding the rule so the id is not reused.
_TABLES: dict[tuple[int, str], tuple[MaskingRule, torch.Tensor, torch.Tensor]] = {}


def device_tables(rule: MaskingRule, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """`rule`'s special-id table and random ids as tensors on `device`, copied there once."""
    key = (id(rule), str(device))
    if key not in _TABLES:
        special = torch.as_tensor(rule.special_table, device=device)
        _TABLES[key] = (rule, special, torch.as_tensor(rule.random_ids, device=device))
    return _TABLES[key][1], _TABLES[key][2]


def draw_candidates(compact: dict[str, Any], vocab_rows: bool) -> tuple[Any, Any]:
    """The ids a compact batch's draws read and the cells that may be chosen (before specials are
    left out): a tokenizer's rows (`vocab_rows`) every cell of ``tokens``; a packed row the base
    columns of ``tokens`` (`packed_columns.base_columns`); a window row ``bases`` before its length. numpy
    arrays in, numpy out (the workers; rows whose cells before a length may be chosen as those lengths,
    which `mlm.mask_tokens` takes in place of the matrix); tensors in, tensors on their device out."""
    if vocab_rows or "doc_tokens" in compact:
        ids = compact["tokens"]
    else:
        ids, lengths = compact["bases"], compact["lengths"]
    if not isinstance(ids, torch.Tensor):
        if vocab_rows:
            return ids, np.full(len(ids), ids.shape[1], dtype=np.int64)
        if "doc_tokens" in compact:
            return ids, base_columns(compact["doc_tokens"], compact["doc_prefix"], ids.shape[1])
        return ids, np.asarray(lengths, dtype=np.int64)
    if vocab_rows:
        return ids, torch.ones(ids.shape, dtype=torch.bool, device=ids.device)
    if "doc_tokens" in compact:
        return ids, document_bases(compact["doc_tokens"], compact["doc_prefix"], ids.shape[1])
    return ids, torch.arange(ids.shape[1], device=ids.device) < lengths[:, None]


def document_bases(sizes: torch.Tensor, prefix: torch.Tensor, seq_length: int) -> torch.Tensor:
    """`packed_columns.base_columns` by tensor ops: where each packed row holds a base (not a document's
    BOS, tag, SEP or EOS, not the padding after its last document)."""
    sizes, prefix = sizes.long(), prefix.long()
    ends = sizes.cumsum(1)
    col = torch.arange(seq_length, device=sizes.device).expand(len(sizes), seq_length).contiguous()
    doc = torch.searchsorted(ends, col, right=True).clamp(max=sizes.shape[1] - 1)
    end = ends.gather(1, doc)
    start = end - sizes.gather(1, doc)
    return (col >= start + prefix.gather(1, doc)) & (col < end - 1)


def draw_masks(compact: dict[str, Any], rule: MaskingRule, vocab_rows: bool) -> Any:
    """The ``mlm`` matrix of a compact batch that carries its row salts (``mlm_salts``): numpy's
    `mask_tokens` for CPU tensors, `device_mask_tokens` on an accelerator."""
    ids, candidates = draw_candidates(compact, vocab_rows)
    salts = compact["mlm_salts"]
    if isinstance(ids, torch.Tensor) and ids.device.type != "cpu":
        return device_mask_tokens(ids, candidates, salts, rule)
    as_np = (lambda t: t.numpy()) if isinstance(ids, torch.Tensor) else np.asarray
    codes = mask_tokens(as_np(ids), as_np(candidates), as_np(salts).view(np.uint64), rule, specials=True)
    return torch.from_numpy(codes) if isinstance(ids, torch.Tensor) else codes
