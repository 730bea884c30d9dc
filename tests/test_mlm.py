"""Masked-LM draws (`batch.mlm`): shares, the rules' limits, DNABERT's span and purity of every draw."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pytest
import torch

from bionemo_wds.errors import OptionError
from bionemo_wds.load.batch.mlm import apply_masks, mask_tokens, maskable, masks_on_device, row_salts
from bionemo_wds.load.batch.mlm_rule import IGNORE_INDEX, MLM_KEEP, MLM_NONE, MaskingRule, id_dtype


@dataclass(frozen=True)
class Vocab:
    """A small vocabulary with the tokenizers' attributes. Default: Caduceus's characters
    ([CLS]=0, [SEP]=1, [BOS]=2, [MASK]=3, [PAD]=4, [RESERVED]=5, [UNK]=6, then A C G T N from 7:
    ``CharacterTokenizer`` of github.com/kuleshov-group/caduceus)."""

    name: str = "caduceus"
    vocab_size: int = 12
    pad_id: int = 4
    mask_id: int | None = 3
    special_ids: frozenset[int] = field(default_factory=lambda: frozenset(range(7)))
    kmer: int | None = None
    overlapping: bool = False


def dnabert(k: int) -> Vocab:
    """DNABERT's k-mer vocabulary: [PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4, then the 4**k k-mers
    (``dnabert-config/bert-config-k/vocab.txt``)."""
    return Vocab(f"dnabert{k}", 5 + 4**k, 0, 4, frozenset(range(5)), k, True)


CADUCEUS = Vocab()


def batch(vocab: Vocab, rows: int, width: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random ordinary ids, each row a random length with padding after it, and each row's salt."""
    rng = np.random.default_rng(seed)
    first = min(vocab.special_ids | {vocab.pad_id}) + len(vocab.special_ids | {vocab.pad_id})
    ids = rng.integers(first, vocab.vocab_size, size=(rows, width)).astype(np.int64)
    lengths = rng.integers(width // 2, width + 1, size=rows)
    ids[np.arange(width) >= lengths[:, None]] = vocab.pad_id
    return ids, lengths, row_salts([f"chr{seed}:{i * width}+{width}" for i in range(rows)], 1234 + seed)


def test_bert_shares_within_tolerance():
    """About 15% of maskable tokens are chosen, 80/10/10 of them mask/random/kept. Tolerance: 5 binomial
    standard deviations of each share at this size (about 240k tokens, 36k chosen), so a correct draw
    fails about once in 3.5 million runs while a rule off by a point fails always."""
    rule = MaskingRule.of(CADUCEUS)
    ids, lengths, salts = batch(CADUCEUS, 64, 5000)
    can = maskable(ids, lengths, rule)
    out = mask_tokens(ids, can, salts, rule)
    chosen = out != MLM_NONE
    n, k = int(can.sum()), int(chosen.sum())
    assert not (chosen & ~can).any()  # never padding, never past a row's length
    assert abs(k / n - 0.15) < 5 * np.sqrt(0.15 * 0.85 / n)
    shares = ((out == 3).sum(), 0.8), (((out >= 0) & (out != 3)).sum(), 0.1), ((out == MLM_KEEP).sum(), 0.1)
    for share, want in shares:
        assert abs(share / k - want) < 5 * np.sqrt(want * (1 - want) / k), (share / k, want)
    random = out[(out >= 0) & (out != 3)]
    assert set(np.unique(random)) == {7, 8, 9, 10, 11}  # random tokens are ordinary ids, every one drawn


def test_mask_rule_and_specials_never_chosen():
    """``mask``: every chosen token shows the mask token (Caduceus); special ids inside a row are never
    chosen, at any probability."""
    rule = MaskingRule.of(CADUCEUS, probability=0.9, replace="mask")
    ids, lengths, salts = batch(CADUCEUS, 16, 300)
    ids[:, ::7] = 1  # [SEP] among the bases
    out = mask_tokens(ids, maskable(ids, lengths, rule), salts, rule)
    assert set(np.unique(out)) == {MLM_NONE, 3}
    assert (out[:, ::7] == MLM_NONE).all()


def test_draws_are_a_pure_function_of_row_salt_and_position():
    """A row's draws depend on its salt and its tokens' places only: the same row alone or in another
    batch, in another order, gets the same masks; another salt (key, seed or epoch) other masks."""
    rule = MaskingRule.of(CADUCEUS)
    ids, lengths, salts = batch(CADUCEUS, 12, 400)
    whole = mask_tokens(ids, maskable(ids, lengths, rule), salts, rule)
    order = np.random.default_rng(3).permutation(12)
    moved = mask_tokens(ids[order], maskable(ids[order], lengths[order], rule), salts[order], rule)
    np.testing.assert_array_equal(moved, whole[order])
    alone = mask_tokens(ids[5:6], maskable(ids[5:6], lengths[5:6], rule), salts[5:6], rule)
    np.testing.assert_array_equal(alone[0], whole[5])
    other = mask_tokens(ids, maskable(ids, lengths, rule), row_salts([f"x{i}" for i in range(12)], 1234), rule)
    assert ((other != MLM_NONE) != (whole != MLM_NONE)).mean() > 0.1


def dnabert_reference(centres: np.ndarray, candidates: np.ndarray, k: int) -> np.ndarray:
    """DNABERT's span masking as its ``mask_tokens`` writes it (a loop over each row's centres and the
    offsets of ``MASK_LIST[k]``, kept to ``1 <= index <= end``, end the row's last maskable token)."""
    mask_list = {3: [-1, 1], 4: [-1, 1, 2], 5: [-2, -1, 1, 2], 6: [-2, -1, 1, 2, 3]}[k]
    out = centres.copy()
    for i in range(len(centres)):
        where = np.flatnonzero(candidates[i])
        if not len(where):
            continue
        first, end = where[0], where[-1]
        for c in np.flatnonzero(centres[i]):
            for offset in mask_list:
                if first <= c + offset <= end:
                    out[i, c + offset] = True
    return out


@pytest.mark.parametrize("k", [3, 4, 5, 6])
def test_dnabert_span_equals_the_reference(k):
    """Overlapping k-mers: the chosen tokens are the centres (the same draws as without span) spread
    as DNABERT's loop spreads them; each isolated centre masks exactly k tokens."""
    vocab = dnabert(k)
    ids, lengths, salts = batch(vocab, 16, 500, seed=k)
    ids[:, 0] = 2  # [CLS]
    ids[np.arange(16), np.minimum(lengths, 499)] = 3  # [SEP] after the k-mers
    spanned = MaskingRule.of(vocab, probability=0.025, replace="mask")
    assert spanned.span == k
    can = maskable(ids, lengths, spanned)
    centres = mask_tokens(ids, can, salts, MaskingRule.of(vocab, 0.025, "mask", span=False)) != MLM_NONE
    got = mask_tokens(ids, can, salts, spanned) != MLM_NONE
    np.testing.assert_array_equal(got, dnabert_reference(centres, can, k))
    assert not (got & ~can).any()
    if k == 6:  # 2.5% centres mask about 15% (DNABERT's setting)
        assert 0.10 < got.sum() / can.sum() < 0.16


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"probability": 0.0}, "mlm_probability must be a number in (0, 1), got 0.0"),
        ({"probability": 1.0}, "mlm_probability must be a number in (0, 1), got 1.0"),
        ({"probability": -0.1}, "mlm_probability must be a number in (0, 1)"),
        ({"replace": "random"}, "mlm_replace must be one of bert, mask, got 'random'"),
        ({"span": True}, "mlm_span=True is DNABERT's masking of overlapping k-mers, and tokenizer 'caduceus'"),
    ],
)
def test_bad_options_are_refused(kwargs, message):
    with pytest.raises(OptionError) as err:
        MaskingRule.of(CADUCEUS, **kwargs)
    assert message in str(err.value)


def test_vocabulary_without_mask_token_is_refused():
    with pytest.raises(OptionError, match="objective='mlm' needs a tokenizer with a mask token, and 'bytes' has none"):
        MaskingRule.of(Vocab(name="bytes", mask_id=None))


def test_id_dtype_is_the_smallest_that_fits():
    assert [id_dtype(n) for n in (12, 127, 128, 4101, 32767, 32768)] == [
        np.int8,
        np.int8,
        np.int16,
        np.int16,
        np.int16,
        np.int32,
    ]
    for vocab in (CADUCEUS, dnabert(6)):  # every id and code of a rule's matrix fits its type
        rule = MaskingRule.of(vocab)
        info = np.iinfo(rule.dtype)
        assert info.min <= MLM_KEEP and vocab.vocab_size - 1 <= info.max


def test_all_positions_draw_independently():
    """Neighbouring positions are not correlated (the counter-based stream mixes every position):
    the chosen pairs (c, c + 1) occur at about p**2."""
    rule = MaskingRule.of(CADUCEUS, probability=0.5, replace="mask")
    ids, _, salts = batch(CADUCEUS, 64, 2000)
    chosen = mask_tokens(ids, np.ones(ids.shape, bool), salts, rule) != MLM_NONE
    pairs = (chosen[:, 1:] & chosen[:, :-1]).mean()
    assert abs(pairs - 0.25) < 0.01
    assert len(set(itertools.islice(map(bytes, np.packbits(chosen, axis=1)), 64))) == 64


@pytest.mark.parametrize("starts", [[3, 3, 3, 3], [1, 4, 2, 3]], ids=["one_start", "row_starts"])
@pytest.mark.parametrize("megatron", [False, True])
def test_laying_masks_on_a_cpu_equals_the_device_form(starts, megatron):
    """`apply_masks` on a CPU (numpy slices) gives what its tensor form for accelerators
    (`masks_on_device`, run here on CPU tensors) gives: every chosen and trained token replaced and
    predicted, untrained columns (-100) never, columns outside the draws never."""
    rule = MaskingRule.of(CADUCEUS, probability=0.4)
    ids, lengths, salts = batch(CADUCEUS, 4, 40)
    codes = mask_tokens(ids, maskable(ids, lengths, rule), salts, rule)
    seq = 48
    tokens = np.full((4, seq), CADUCEUS.pad_id, dtype=np.int64)
    labels = np.full((4, seq), IGNORE_INDEX, dtype=np.int64)
    for r, p in enumerate(starts):
        tokens[r, p : p + 40] = ids[r]
        labels[r, p : p + 40] = np.where(ids[r] == CADUCEUS.pad_id, IGNORE_INDEX, ids[r])
    labels[:, 10] = IGNORE_INDEX  # an untrained column inside the bases (a degenerate base)

    def inputs() -> dict:
        return {
            "input_ids": torch.from_numpy(tokens.copy()),
            "labels": torch.from_numpy(labels.copy()),
            "position_ids": torch.arange(seq).expand(4, seq),
        }

    first = torch.tensor(starts)
    got = apply_masks(inputs(), codes, first, megatron)
    predicted, shown = masks_on_device(inputs()["input_ids"], inputs()["labels"], torch.from_numpy(codes), first)
    if megatron:
        assert torch.equal(got["tokens"], shown) and torch.equal(got["loss_mask"] > 0, predicted)
        assert torch.equal(
            got["labels"],
            torch.where(torch.from_numpy(labels) != IGNORE_INDEX, torch.from_numpy(labels), torch.from_numpy(tokens)),
        )
    else:
        assert torch.equal(got["input_ids"], shown)
        assert torch.equal(got["labels"], torch.where(predicted, torch.from_numpy(labels), IGNORE_INDEX))
    assert predicted.sum() > 10 and not predicted[:, 10].any()
    assert int(predicted.sum()) == int(
        sum(((codes[r] != MLM_NONE) & (labels[r, p : p + 40] != IGNORE_INDEX)).sum() for r, p in enumerate(starts))
    )
