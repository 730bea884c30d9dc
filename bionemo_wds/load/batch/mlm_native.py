"""The masked-LM kernels in C behind `mlm.mask_tokens` (``mlm_kernel.c``: the draws) and `mlm.lay_on_cpu`,
`mlm_windows` and `mlm_tokens` (``mlm_lay.c``: the draws laid over a batch): the same draws and cells as
the numpy code, in one pass over a batch instead of a dozen whole-batch numpy passes (docs/benchmarks.md
has the figures). Where the extensions are not built (no C compiler at install), numpy runs and a
warning says so once per process."""

from __future__ import annotations

import warnings
from functools import cache

import numpy as np

from bionemo_wds.load.batch.mlm_rule import BERT_MASK_SHARE, BERT_RANDOM_SHARE, MaskingRule

try:
    import bionemo_wds.load.batch.mlm_kernel as mlm_kernel
except ImportError:  # built by `pip install -e .` where a C compiler is found (setup.py: optional)
    mlm_kernel = None  # type: ignore[assignment]
try:
    import bionemo_wds.load.batch.mlm_lay as mlm_lay
except ImportError:  # the same
    mlm_lay = None  # type: ignore[assignment]


def kernel_built() -> bool:
    """Whether both extensions are built; where not, a warning says so once per process."""
    if mlm_kernel is None or mlm_lay is None:
        warn_missing_kernel()
        return False
    return True


def native_ready(ids: np.ndarray, candidates: np.ndarray) -> bool:
    """Whether `mlm_kernel` draws these masks (built, ids of a type it reads, and candidates as a bool
    matrix of the ids' shape or one length a row)."""
    if not kernel_built() or ids.dtype not in KERNEL_ID_TYPES or ids.ndim != 2:
        return False
    if candidates.ndim == 1:
        return len(candidates) == len(ids) and candidates.dtype.kind in "iu"
    return ids.shape == candidates.shape and candidates.dtype == np.bool_


def native_lays(ids: np.ndarray, labels: np.ndarray, codes: np.ndarray) -> bool:
    """Whether `mlm_lay.lay` lays these masks (built; int64 rows of ids and labels, in place)."""
    if not kernel_built():
        return False
    rows = ids.dtype == np.int64 and labels.dtype == np.int64 and ids.shape == labels.shape and ids.ndim == 2
    return rows and ids.flags.c_contiguous and labels.flags.c_contiguous and codes.dtype in CODE_TYPES


def native_lays_windows(codes: np.ndarray) -> bool:
    """Whether `mlm_lay.lay_windows` lays these codes (built; int8, int16 or int32 codes)."""
    return mlm_lay is not None and codes.ndim == 2 and codes.dtype in CODE_TYPES[:3]


def native_lays_tokens(ids: np.ndarray, codes: np.ndarray) -> bool:
    """Whether `mlm_lay.lay_tokens` lays these codes over these compact ids (built; the same shape;
    one of the pairs of types `TOKEN_TYPES`)."""
    return mlm_lay is not None and ids.shape == codes.shape and (ids.dtype, codes.dtype) in TOKEN_TYPES


def native_mask_tokens(
    ids: np.ndarray, candidates: np.ndarray, salts: np.ndarray, rule: MaskingRule, specials: bool
) -> np.ndarray:
    """`mask_tokens` by the C kernel (`mlm_kernel.draw`: one pass over the batch, the same cells)."""
    n, width = ids.shape
    out = np.empty((n, width), dtype=rule.dtype)
    cells: np.ndarray | bytes = NOTHING
    lengths: np.ndarray | bytes = NOTHING
    if candidates.ndim == 1:  # the cells before each row's length: no matrix to make or read
        lengths = np.ascontiguousarray(candidates, dtype=np.int64)
    else:
        cells = np.ascontiguousarray(candidates).view(np.uint8)
    mlm_kernel.draw(
        out,
        out.itemsize,
        np.ascontiguousarray(ids),
        ids.dtype.itemsize,
        cells,
        lengths,
        np.ascontiguousarray(salts, dtype=np.uint64),
        n,
        width,
        rule.bound32,
        rule.span,
        rule.special_table.view(np.uint8),
        np.ascontiguousarray(rule.random_ids, dtype=np.int64),
        rule.mask_id,
        rule.replace == "bert",
        BERT_MASK_SHARE,
        BERT_MASK_SHARE + BERT_RANDOM_SHARE,
        specials,
        rule.pad_id,
    )
    return out


def native_lay(
    ids: np.ndarray,
    labels: np.ndarray,
    codes: np.ndarray,
    starts: np.ndarray,
    weights: np.ndarray,
    unmasked: np.ndarray,
) -> None:
    """`mlm.lay_on_cpu` by the C kernel (`mlm_lay.lay`), in place: `weights` the loss mask to fill
    (float32 zeros, rows x seq_length) with `unmasked` (int64, the same shape: Megatron's labels, the
    label where trained, else the token before masking), or both empty (then labels become -100 where
    not predicted)."""
    n, seq_length = ids.shape
    codes = np.ascontiguousarray(codes)
    first = np.ascontiguousarray(starts, dtype=np.int64)
    mlm_lay.lay(ids, labels, codes, codes.itemsize, first, n, seq_length, codes.shape[1], weights, unmasked)


def native_lay_windows(
    tokens: np.ndarray,
    labels: np.ndarray,
    label_bases: np.ndarray,
    codes: np.ndarray,
    dropped: np.ndarray | None,
    first: int,
    lengths: np.ndarray,
    loss_mask: np.ndarray | None = None,
) -> int:
    """`mlm_windows.masked_window_inputs`'s pass by the C kernel (`mlm_lay.lay_windows`): `labels`
    written whole, `tokens` masked in place; with `loss_mask` (float32 zeros, the tokens' shape),
    Megatron's labels (the unmasked tokens) and loss mask (1 where predicted). The number predicted."""
    n, seq_length = tokens.shape
    codes = np.ascontiguousarray(codes)
    return mlm_lay.lay_windows(
        tokens,
        labels,
        np.ascontiguousarray(label_bases, dtype=np.uint8),
        codes,
        codes.itemsize,
        NOTHING if dropped is None else np.ascontiguousarray(dropped).view(np.uint8),
        first,
        np.ascontiguousarray(lengths, dtype=np.int64),
        n,
        seq_length,
        codes.shape[1],
        NOTHING_TO_WRITE if loss_mask is None else loss_mask,
    )


def native_lay_tokens(
    ids: np.ndarray,
    codes: np.ndarray,
    flags: np.ndarray | None,
    drop: int,
    ordinary: tuple[int, int],
    pad_id: int,
    shown: np.ndarray,
    labels: np.ndarray,
    loss_mask: np.ndarray | None = None,
    attention_mask: np.ndarray | None = None,
) -> int:
    """`mlm_tokens.masked_token_inputs`'s pass by the C kernel (`mlm_lay.lay_tokens`): a tokenizer's
    compact `ids` (rows x width) and their `codes` (the same cells) to int64 `shown` ids and `labels`,
    written whole (a row's trailing padding filled, not laid cell by cell). A token is trained when its
    id is in the `ordinary` range and none of the `drop` bits of its `flags` (uint8, or None) is set.
    With `loss_mask` (float32): Megatron's labels (the unmasked tokens) and loss mask; else the hf labels
    (-100 where not predicted) and, with `attention_mask` (int64), 1 where the id is not `pad_id`. The
    number predicted."""
    lo, hi = ordinary
    ids, codes = np.ascontiguousarray(ids), np.ascontiguousarray(codes)
    rows, width = ids.shape
    return mlm_lay.lay_tokens(
        ids,
        ids.itemsize,
        codes,
        codes.itemsize,
        NOTHING if flags is None else np.ascontiguousarray(flags, dtype=np.uint8),
        drop,
        lo,
        hi,
        pad_id,
        rows,
        width,
        shown,
        labels,
        NOTHING_TO_WRITE if loss_mask is None else loss_mask,
        NOTHING_TO_WRITE if attention_mask is None else attention_mask,
    )


#: An empty buffer: the kernel's "not given".
NOTHING = b""
#: An empty writable buffer: the same, where the kernel takes a buffer to write.
NOTHING_TO_WRITE = np.zeros(0, dtype=np.float32)
#: The id types the kernel reads: uint8 bases, a vocabulary's signed ids.
KERNEL_ID_TYPES = tuple(np.dtype(t) for t in (np.uint8, np.int16, np.int32, np.int64))
#: The (compact ids, codes) type pairs `lay_tokens` reads: those a tokenizer's `id_dtype` and the rule's give.
TOKEN_TYPES = tuple(
    (np.dtype(i), np.dtype(c))
    for i, c in ((np.uint8, np.int8), (np.uint8, np.int16), (np.int16, np.int16), (np.int32, np.int32))
)
#: The types of ``mlm`` codes `lay` reads (`lay_windows`: the first three, those `mlm_rule.id_dtype` gives).
CODE_TYPES = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))


@cache
def warn_missing_kernel() -> None:
    """Say once per process that masked-LM draws run on the slower numpy path, and how to get the kernel."""
    warnings.warn(
        "bionemo_wds.load.batch.mlm_kernel and mlm_lay (the C extensions that draw and lay masked-LM masks in one "
        "pass, with the same masks) are not built: the masks are drawn by numpy, several times slower on a CPU. "
        "Install a C compiler and reinstall (pip install -e .), or run `python setup.py build_ext --inplace` in "
        "the checkout.",
        RuntimeWarning,
        stacklevel=3,
    )
