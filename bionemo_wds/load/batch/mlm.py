"""Masked-LM draws: which tokens of a sample are predicted, and what the model sees in their place.

The rule is BERT's, as the encoder families of DNA use it (Nucleotide Transformer, DNABERT,
DNABERT-2, Caduceus): each maskable token is chosen with probability ``probability``; a chosen
token is predicted (its label is its id) and the model sees, by ``replace``:

- ``"bert"``: the mask token 80% of the time, a random token 10%, the token itself 10%
  (BERT; `transformers`' ``DataCollatorForLanguageModeling``, which NT and DNABERT-2 train with);
- ``"mask"``: the mask token always (Caduceus).

A random token is drawn among the vocabulary's ids that are not special (the collator of
`transformers` draws among every id, specials included; a special in the middle of bases is a
token no real sample holds).

``span`` (DNABERT, overlapping k-mers): a chosen token is a *centre*, and the tokens that share its
bases are chosen with it, so the model cannot read the answer off its neighbours: for k-mers the
centre c masks tokens ``c - (k - 1) // 2 .. c + k // 2`` (DNABERT's ``MASK_LIST``: k=3 -> -1..+1,
k=4 -> -1..+2, k=5 -> -2..+2, k=6 -> -2..+3; ``mask_tokens`` in DNABERT's
``examples/run_pretrain.py``, github.com/jerryji1993/DNABERT), kept within the maskable tokens (its
``1 <= index <= end``). ``probability`` is then the probability of a centre (DNABERT pre-trained
6-mers with 0.025, which masks about 15% of tokens).

Never a special token, padding or a position past a row's length is chosen. Every draw is a pure
function of the row's salt (`row_salts`: the sample's key and the pass's `seeds.mlm_salt`, from
seed and epoch) and the token's position in the row: the same masks for any worker count, after a
resume, and on every tensor-parallel rank of a group. `mask_tokens` is vectorised over the whole
batch: counter-based hashes (a 32-bit one per token, 64-bit ones for the chosen tokens), no
generator state, no Python loop per token.

The draws travel in the compact batch as one matrix (``mlm``, `MLM_NONE` where nothing is predicted,
`MLM_KEEP` where the token is predicted and left as it is, else the id the model sees), in the
smallest signed integer type the vocabulary fits (`id_dtype`); `apply_masks` lays them over the
model inputs on whatever device they are on.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from bionemo_wds.core.seeds import GOLDEN, keyed_hashes, mix64
from bionemo_wds.load.batch.mlm_native import native_lay, native_lays, native_mask_tokens, native_ready
from bionemo_wds.load.batch.mlm_rule import (
    BERT_MASK_SHARE,
    BERT_RANDOM_SHARE,
    IGNORE_INDEX,
    MLM_KEEP,
    MLM_NONE,
    REPLACE_MIX,
    MaskingRule,
)


def row_salts(keys: list[str], salts: int | np.ndarray) -> np.ndarray:
    """Each row's salt (uint64): its sample's key hashed with its pass's salt (`seeds.mlm_salt`: one
    for all rows, or one per row where a blend's rows come from streams of their own); a filler
    row's key is empty, and it has nothing to mask anyway."""
    return keyed_hashes(
        keys, int(salts) if isinstance(salts, (int, np.integer)) else np.asarray(salts, dtype=np.uint64)
    )


def maskable(ids: np.ndarray, lengths: np.ndarray, rule: MaskingRule) -> np.ndarray:
    """Where a row of `ids` (rows x width) holds a token that may be chosen: before the row's length,
    not special, not padding."""
    inside = np.arange(ids.shape[1]) < np.asarray(lengths)[:, None]
    return inside & ~rule.special_table[ids]


def batch_masks(
    ids: np.ndarray, candidates: np.ndarray, keys: list[str], salts: int | np.ndarray, rule: MaskingRule
) -> np.ndarray:
    """The ``mlm`` matrix of a compact batch (`mask_tokens`): its rows of ids, the tokens that may
    be chosen besides specials and padding, each row's key and its pass's salt."""
    return mask_tokens(ids, candidates, row_salts(keys, salts), rule, specials=True)


def mask_tokens(
    ids: np.ndarray, candidates: np.ndarray, salts: np.ndarray, rule: MaskingRule, specials: bool = False
) -> np.ndarray:
    """The ``mlm`` matrix of a batch of token rows (rows x width): `MLM_NONE` where nothing is
    predicted, `MLM_KEEP` where the token is predicted and shown as it is, else the id shown (the
    mask token or a random token). `candidates`: the tokens that may be chosen (`maskable`; or one
    int length a row: the tokens before it, which spares making the matrix); `specials`: leave out
    the rule's special ids too, looked up at the drawn tokens alone; `salts`: one per row
    (`row_salts`). A pure function of its arguments.

    Token (r, c) is a centre when ``fmix32(salt32[r] + (c + 1) * 0x9E3779B9)`` (murmur3's 32-bit
    finaliser of a Weyl sequence; salt32: the row salt's halves xor-ed) is below ``probability *
    2**32``: 32-bit hashes of every token, half the memory traffic of 64-bit ones. A chosen
    token's replacement comes from 64-bit SplitMix64 hashes of ``salts[r] + (c + 1) * golden``,
    computed for the chosen tokens alone.
    """
    if native_ready(ids, candidates):
        return native_mask_tokens(ids, candidates, salts, rule, specials)
    return numpy_mask_tokens(ids, candidates, salts, rule, specials)


def numpy_mask_tokens(
    ids: np.ndarray, candidates: np.ndarray, salts: np.ndarray, rule: MaskingRule, specials: bool = False
) -> np.ndarray:
    """`mask_tokens` in whole-batch numpy passes: the reference the C kernel is tested against, and the
    path where it is not built."""
    n, width = ids.shape
    if candidates.ndim == 1:  # row lengths
        candidates = np.arange(width) < np.asarray(candidates)[:, None]
    out = np.full((n, width), MLM_NONE, dtype=rule.dtype)
    if not n or not width:
        return out
    salts = np.asarray(salts, dtype=np.uint64)
    folded = ((salts ^ (salts >> np.uint64(32))) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    steps = np.arange(1, width + 1, dtype=np.uint32) * WEYL32
    chosen = fmix32(folded[:, None] + steps[None, :]) < np.uint32(rule.bound32)
    if rule.span > 1:
        allowed = candidates & ~rule.special_table[ids] if specials else candidates
        where = np.flatnonzero(spread(chosen & allowed, rule.span) & allowed)
    else:
        chosen &= candidates
        where = np.flatnonzero(chosen)
        if specials:  # a lookup at the drawn tokens alone, not the whole batch
            where = where[~rule.special_table[ids.ravel()[where]]]
    if not len(where):
        return out
    if rule.replace == "mask":
        out.ravel()[where] = rule.mask_id
        return out
    row, col = np.divmod(where, width)
    second = mix64(salts[row] + (col.astype(np.uint64) + np.uint64(1)) * GOLDEN)
    share = (second >> np.uint64(11)).astype(np.float64) * 2.0**-53  # uniform in [0, 1)
    third = mix64(second ^ REPLACE_MIX) >> np.uint64(32)  # 32 more uniform bits: the random token
    pick = ((third * np.uint64(len(rule.random_ids))) >> np.uint64(32)).astype(np.int64)
    values = np.where(
        share < BERT_MASK_SHARE,
        rule.mask_id,
        np.where(share < BERT_MASK_SHARE + BERT_RANDOM_SHARE, rule.random_ids[pick], MLM_KEEP),
    )
    out.ravel()[where] = values
    return out


#: The 32-bit golden-ratio increment (Weyl sequence of the 32-bit draws) and murmur3's finaliser constants.
WEYL32 = np.uint32(0x9E3779B9)
FMIX_F1, FMIX_F2 = np.uint32(0x85EBCA6B), np.uint32(0xC2B2AE35)
_S13, _S16 = np.uint32(13), np.uint32(16)


def fmix32(h: np.ndarray) -> np.ndarray:
    """murmur3's 32-bit finaliser of every element of a uint32 array (a well-mixing bijection; numpy's
    uint32 arithmetic wraps modulo 2**32). Changes `h` in place and returns it."""
    h ^= h >> _S16
    h *= FMIX_F1
    h ^= h >> _S13
    h *= FMIX_F2
    h ^= h >> _S16
    return h


def spread(centres: Any, k: int) -> Any:
    """DNABERT's span: each centre c also chooses ``c - (k - 1) // 2 .. c + k // 2`` of its row (a
    bool numpy array, or a bool tensor on any device: `mlm_device`)."""
    out = centres.clone() if isinstance(centres, torch.Tensor) else centres.copy()
    width = centres.shape[1]
    for offset in range(-((k - 1) // 2), k // 2 + 1):
        if offset > 0:
            out[:, offset:] |= centres[:, : width - offset]
        elif offset < 0:
            out[:, :offset] |= centres[:, -offset:]
    return out


def apply_masks(inputs: dict[str, Any], mlm: Any, first: Any, megatron: bool) -> dict[str, Any]:
    """Lay a batch's ``mlm`` matrix over its unmasked model inputs, on their device.

    `inputs`: the ``hf`` layout of the batch, made for this batch alone (``input_ids``, ``labels``
    of the unshifted tokens, -100 where not trained, ``position_ids``, ...; changed in place); `mlm`:
    rows x width, its column j is token column ``first[r] + j`` of row r (`first`: rows, the first
    base column). The result: ``input_ids`` with the replacements, ``labels`` the original id where a
    token is chosen and trained, -100 elsewhere. `megatron`: ``tokens``, ``labels`` (the unmasked
    tokens' labels, so every label is an id a vocab-parallel loss can index), ``loss_mask`` (1 where
    predicted), ``position_ids``. On a CPU the C kernel or numpy at the chosen cells (`lay_on_cpu`); elsewhere
    whole-batch tensor ops (torch's CPU kernels for these are many times slower than numpy's on a shared machine).
    """
    ids, labels = inputs["input_ids"], inputs["labels"]
    unmasked: torch.Tensor | None = None
    if ids.device.type == "cpu":
        codes = mlm.numpy() if isinstance(mlm, torch.Tensor) else np.asarray(mlm)
        starts = first.numpy() if isinstance(first, torch.Tensor) else np.asarray(first)
        weights, plain = lay_on_cpu(ids.numpy(), labels.numpy(), codes, starts, megatron)
        shown = ids
        if megatron:
            unmasked, loss_mask = torch.from_numpy(plain), torch.from_numpy(weights)
    else:
        unmasked = torch.where(labels != IGNORE_INDEX, labels, ids) if megatron else None
        predicted, shown = masks_on_device(ids, labels, mlm, first)
        loss_mask = predicted.float()
        labels = labels.masked_fill(~predicted, IGNORE_INDEX)
    if megatron:
        return {"tokens": shown, "labels": unmasked, "loss_mask": loss_mask, "position_ids": inputs["position_ids"]}
    out = dict(inputs)
    out["input_ids"] = shown
    out["labels"] = labels
    return out


def lay_on_cpu(
    ids: np.ndarray, labels: np.ndarray, codes: np.ndarray, starts: np.ndarray, megatron: bool
) -> tuple[np.ndarray, np.ndarray]:
    """`apply_masks` on numpy rows, in place: ids replaced where chosen; `megatron`: returns the loss
    mask (float32, 1 where predicted) and Megatron's labels (the label where trained, else the token
    before masking), `labels` left alone; else labels -100 where not predicted (two empty arrays
    returned). By `mlm_lay.lay` where built (one pass, the Megatron labels in it), else numpy at
    the chosen cells (`lay_masks`)."""
    weights = np.zeros(ids.shape if megatron else 0, dtype=np.float32)
    if native_lays(ids, labels, codes):
        unmasked = np.empty_like(ids) if megatron else np.zeros(0, dtype=np.int64)
        native_lay(ids, labels, codes, starts, weights, unmasked)
        return weights, unmasked
    unmasked = np.where(labels != IGNORE_INDEX, labels, ids) if megatron else np.zeros(0, dtype=np.int64)
    chosen = lay_masks(ids, labels, codes, starts)
    if megatron:
        np.put(weights, chosen, 1.0)
    else:
        kept = labels.ravel()[chosen]
        labels.fill(IGNORE_INDEX)
        np.put(labels, chosen, kept)
    return weights, unmasked


def lay_masks(ids: np.ndarray, labels: np.ndarray, codes: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Replace the chosen tokens of `ids` in place (`apply_masks`, numpy), touching the chosen cells
    alone: returns where a token is predicted (chosen and trained: `labels` not -100), as flat indices
    of `ids`."""
    seq_length = ids.shape[1]
    where = np.flatnonzero(codes != MLM_NONE)
    row, col = np.divmod(where, max(1, codes.shape[1]))
    col += np.asarray(starts, dtype=np.int64)[row]
    inside = col < seq_length
    flat = row[inside] * seq_length + col[inside]
    where = where[inside]
    trained = labels.ravel()[flat] != IGNORE_INDEX
    flat, drawn = flat[trained], codes.ravel()[where[trained]]
    shown = drawn >= 0
    np.put(ids, flat[shown], drawn[shown])
    return flat


def masks_on_device(ids: torch.Tensor, labels: torch.Tensor, mlm: Any, first: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """`apply_masks` by whole-batch tensor ops (gather/where), for an accelerator: where a token is
    predicted, and the ids shown."""
    device = ids.device
    codes = torch.as_tensor(mlm).to(device)
    n, seq_length = ids.shape
    start = torch.as_tensor(first).to(device).long()[:, None]
    col = torch.arange(seq_length, device=device).expand(n, seq_length)
    inside = (col >= start) & (col < start + codes.shape[1])
    at = (col - start).clamp(0, max(codes.shape[1] - 1, 0))
    drawn = codes.long().gather(1, at) if codes.shape[1] else torch.full_like(ids, MLM_NONE)
    drawn = torch.where(inside, drawn, torch.full_like(drawn, MLM_NONE))
    predicted = (drawn != MLM_NONE) & (labels != IGNORE_INDEX)
    return predicted, torch.where(predicted & (drawn >= 0), drawn, ids)
