"""Masked-LM batches of a tokenizer's rows in one pass (`mlm_tokens.masked_token_inputs`, the path
`SampleOptions.model_inputs` takes on a CPU): every key and cell equal to the general path's (the
unmasked hf layout of `token_inputs`, then `mlm.apply_masks` over it), for characters, NT's 6-mers,
DNABERT's overlapping k-mers and BPE files (every pair of id and code types the kernel reads), packed
or not, with soft-masked and degenerate bases and every rule that drops them; None wherever the general
path must run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, trainers

from bionemo_wds.load.batch import mlm_native
from bionemo_wds.load.batch import options as options_module
from bionemo_wds.load.batch.hf import IGNORE_INDEX
from bionemo_wds.load.batch.labels import LabelRules
from bionemo_wds.load.batch.mlm import batch_masks
from bionemo_wds.load.batch.mlm_device import draw_candidates
from bionemo_wds.load.batch.mlm_tokens import masked_token_inputs
from bionemo_wds.load.batch.options import SampleOptions
from bionemo_wds.load.batch.tokens import TokenDoc, tokenized_batch

needs_kernel = pytest.mark.skipif(mlm_native.mlm_lay is None, reason="the C extension is not built (no C compiler)")


@pytest.fixture(scope="module")
def small_bpe(tmp_path_factory, lambda_seq) -> str:
    """A BPE file of 200 ids trained on lambda phage (uint8 ids, int16 codes: 200 > int8's 127)."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.BpeTrainer(
        vocab_size=200, special_tokens=specials, initial_alphabet=list("ACGTN"), show_progress=False
    )
    tok.train_from_iterator((lambda_seq[i : i + 1000] for i in range(0, len(lambda_seq), 1000)), trainer)
    path = tmp_path_factory.mktemp("bpe200") / "tokenizer.json"
    tok.save(str(path))
    return str(path)


def token_rows(genome: str, rows: int, docs: int, size: int, dirty: bool, rng: np.random.Generator) -> list:
    """`rows` rows of up to `docs` documents of lambda phage (some empty: filler), each up to `size`
    bases, some on the reverse strand; `dirty`: soft-masked stretches and N too."""
    out = []
    for r in range(rows):
        row = []
        for d in range(int(rng.integers(0 if r else 1, docs + 1))):
            n = int(rng.integers(1, size + 1))
            start = int(rng.integers(0, len(genome) - n))
            bases = np.frombuffer(genome[start : start + n].encode("ascii"), dtype=np.uint8).copy()
            if dirty and rng.random() < 0.6:
                a = int(rng.integers(0, n))
                bases[a : a + int(rng.integers(1, 30))] |= 0x20
                for at in rng.integers(0, n, int(rng.integers(1, 4))):
                    bases[at] = rng.choice(list(b"Nn"))  # every family spells N
            row.append(TokenDoc(bases, bool(rng.random() < 0.5), f"lambda/{r}/{d}"))
        out.append(row)
    return out


def compact_batch(options: SampleOptions, rows: list, seq_length: int, packed: bool, seed: int) -> dict:
    """The compact batch the workers make of `rows` (`tokens.tokenized_batch`), its draws added."""
    batch = tokenized_batch(rows, options.vocab, seq_length, packed)
    batch["keys"] = ["+".join(doc.key for doc in row) for row in rows]
    ids, candidates = draw_candidates(batch, True)
    batch["mlm"] = batch_masks(ids, candidates, batch["keys"], seed, options.masking_rule)
    return batch


def general_path(options: SampleOptions, batch: dict, seq_length: int) -> dict:
    """`SampleOptions.model_inputs` with the one pass turned off: the path every other batch takes."""
    with pytest.MonkeyPatch.context() as m:
        m.setattr(options_module, "masked_token_inputs", lambda *args: None)
        return options.model_inputs(batch, seq_length)


def assert_same_batch(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for key, value in want.items():
        if isinstance(value, torch.Tensor):
            assert got[key].dtype == value.dtype and torch.equal(got[key], value), key
        else:
            assert got[key] == value, key


@needs_kernel
@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(["caduceus", "hyenadna", "nt", "dnabert3", "dnabert6", "bpe"]),
    rows=st.integers(1, 5),
    docs=st.integers(1, 3),
    seq_length=st.integers(8, 160),
    packed=st.booleans(),
    dirty=st.booleans(),
    weight=st.sampled_from([None, 0.0, 1.0]),
    mask_degenerate=st.booleans(),
    replace=st.sampled_from(["bert", "mask"]),
    megatron=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_one_pass_equals_the_general_path(
    lambda_seq,
    small_bpe,
    name,
    rows,
    docs,
    seq_length,
    packed,
    dirty,
    weight,
    mask_degenerate,
    replace,
    megatron,
    seed,
):
    """Either batch format (hf; Megatron's: the unmasked tokens as labels, a loss mask, the passthrough)."""
    options = SampleOptions(
        tokenizer=small_bpe if name == "bpe" else name,
        objective="mlm",
        mlm_probability=0.3,
        mlm_replace=replace,
        batch_format="megatron" if megatron else "hf",
        soft_mask_weight=weight,
        mask_degenerate_bases=mask_degenerate,
    )
    rng = np.random.default_rng(seed)
    rows_of_docs = token_rows(lambda_seq, rows, docs if packed else 1, 300, dirty, rng)
    batch = compact_batch(options, rows_of_docs, seq_length, packed, seed)
    want = general_path(options, batch, seq_length)
    got = options.model_inputs(batch, seq_length)
    assert_same_batch(got, want)
    rules = options.label_rules  # and it is the one pass that made `got`
    assert masked_token_inputs(batch, options.vocab, weight, rules, batch["mlm"], megatron) is not None


@needs_kernel
@pytest.mark.parametrize("name, low, high", [("nt", 0.13, 0.17), ("dnabert6", 0.58, 0.66)])
def test_a_benchmark_sized_batch_equals_the_general_path(lambda_seq, name, low, high):
    """8 rows of 8,192 tokens (the benchmark's batch), short documents (mostly padding), BERT's rule:
    about 15% of NT's ordinary tokens predicted; DNABERT's span masking predicts the 6 tokens around a
    centre drawn with 0.15, about 1 - 0.85**6 = 62% of them."""
    options = SampleOptions(tokenizer=name, objective="mlm", batch_format="hf")
    rows = token_rows(lambda_seq, 8, 1, 40_000, False, np.random.default_rng(2))
    batch = compact_batch(options, rows, 8192, False, 11)
    want = general_path(options, batch, 8192)
    got = options.model_inputs(batch, 8192)
    assert_same_batch(got, want)
    ordinary = options.vocab.ordinary(batch["tokens"]).sum()
    assert low < int((got["labels"] != IGNORE_INDEX).sum()) / int(ordinary) < high


def test_where_the_one_pass_does_not_apply_it_says_none(lambda_seq, monkeypatch):
    """A minimum share of real bases, codes that are not over the ids, no draws, and no C extension:
    None, and the general path runs."""
    options = SampleOptions(tokenizer="nt", objective="mlm")
    batch = compact_batch(options, token_rows(lambda_seq, 3, 1, 200, True, np.random.default_rng(4)), 64, False, 1)
    args = (batch, options.vocab, None)
    codes = batch["mlm"]
    assert masked_token_inputs(*args, LabelRules(), codes) is not None or mlm_native.mlm_lay is None
    assert masked_token_inputs(*args, LabelRules(min_real_fraction=0.5), codes) is None
    assert masked_token_inputs(*args, LabelRules(), codes[:, :50]) is None
    assert masked_token_inputs(*args, LabelRules(), codes.astype(np.int32)) is None  # a pair of types it reads not
    assert masked_token_inputs(*args, LabelRules(), None) is None  # not a masked-LM batch
    monkeypatch.setattr(mlm_native, "mlm_lay", None)
    assert masked_token_inputs(*args, LabelRules(), codes) is None


@needs_kernel
def test_the_kernel_refuses_buffers_that_disagree_with_the_cells_it_is_told():
    """A buffer smaller than the cells, or a pair of types it does not read: a ValueError, never a read past it."""
    lay = mlm_native.mlm_lay.lay_tokens
    ids, codes = np.zeros(4, np.int16), np.full(4, -1, np.int16)
    out, labels, none = np.empty(4, np.int64), np.empty(4, np.int64), np.zeros(0, np.float32)
    with pytest.raises(ValueError, match="codes holds 6 bytes, 8 needed"):
        lay(ids, 2, codes[:3], 2, b"", 0, 5, 100, 1, 2, 2, out, labels, none, none)
    with pytest.raises(ValueError, match="labels holds 24 bytes, 32 needed"):
        lay(ids, 2, codes, 2, b"", 0, 5, 100, 1, 2, 2, out, labels[:3], none, none)
    with pytest.raises(ValueError, match=r"ids of 2 bytes with codes of 1"):
        lay(ids, 2, codes.astype(np.int8), 1, b"", 0, 5, 100, 1, 2, 2, out, labels, none, none)
    with pytest.raises(ValueError, match=r"padding id 7 is one of the ordinary ids 5 .. 99"):
        lay(ids, 2, codes, 2, b"", 0, 5, 100, 7, 2, 2, out, labels, none, none)
    assert lay(ids, 2, codes, 2, b"", 0, 5, 100, 1, 2, 2, out, labels, none, none) == 0
    assert (labels == IGNORE_INDEX).all() and (out == 0).all()
