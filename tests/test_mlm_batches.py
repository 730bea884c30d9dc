"""``objective="mlm"``: masked-LM batches from our loaders, the same masks wherever they are read.

The vocabulary is defined here (the tokenizers' attributes, `batch.mlm_rule.MaskVocabulary`): our byte
ids (a base is its ASCII code; EOS, PAD, BOS, SEP, UNK are 0..4) with a mask token at id 5, every
id but the bases' special, so a random replacement is a base. A `transformers` ``BertForMaskedLM``
built from a tiny config (no download) trains on these batches with a falling loss.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import LAMBDA, main_here, refused
from torch.utils.data import DataLoader
from transformers import BertConfig, BertForMaskedLM

from bionemo_wds import GenomicDataset, GenomicMapDataset
from bionemo_wds.core.tokenizer import PAD_ID
from bionemo_wds.errors import OptionError
from bionemo_wds.load.batch.mlm_rule import IGNORE_INDEX, Vocabulary
from bionemo_wds.prepare import PrepareOptions, prepare

SEQ_LENGTH = 512
MASK_ID = 5
BASES = frozenset(b"ACGTNacgtn")
VOCAB = Vocabulary("bytes-with-mask", 256, PAD_ID, MASK_ID, frozenset(range(256)) - BASES)


@pytest.fixture(scope="module")
def pieces(lambda_lineage_fa, tmp_path_factory) -> dict[str, Path]:
    """The lambda pieces (lineage tags, some soft-masked), in both layouts; windows split 8/1/1."""
    fasta, _, _ = lambda_lineage_fa
    base = tmp_path_factory.mktemp("mlm")
    out = {"windows": base / "windows", "sequences": base / "sequences"}
    for layout, root in out.items():
        stride = 300 if layout == "windows" else None
        opts = PrepareOptions(seq_length=SEQ_LENGTH, stride=stride, tags="lineage", layout=layout, progress=False)
        if layout == "sequences":
            opts = PrepareOptions(seq_length=SEQ_LENGTH, tags="lineage", layout=layout, split=(1, 0, 0), progress=False)
        prepare([fasta], root, opts)
    return out


def dataset(root: Path, **options) -> GenomicDataset:
    settings = {"micro_batch_size": 4, "seed": 3, "objective": "mlm", "tokenizer": VOCAB} | options
    return GenomicDataset(str(root), **settings)


def batches(ds: GenomicDataset, workers: int = 0, epoch: int | None = None) -> list[dict]:
    if epoch is not None:
        ds.set_epoch(epoch)
    return list(DataLoader(ds, batch_size=None, num_workers=workers))


def masked_fields(batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    return batch["input_ids"], batch["labels"]


def assert_same_masks(got: list[dict], expected: list[dict]) -> None:
    assert len(got) == len(expected)
    for n, (a, b) in enumerate(zip(got, expected)):
        for name in ("input_ids", "labels"):
            assert torch.equal(a[name], b[name]), f"batch {n}: {name}"


def test_hf_mlm_batch_predicts_masked_bases_only(pieces):
    """Labels are the unmasked batch's ids at the chosen columns, -100 elsewhere (never BOS, a tag,
    SEP, EOS or padding); the other columns are the unmasked ids; about 15% of the bases are chosen,
    most of them shown as the mask token; the compact batch carries the draws in int16."""
    ds = dataset(pieces["windows"], batch_format="hf")
    plain = GenomicDataset(str(pieces["windows"]), micro_batch_size=4, seed=3, batch_format="hf")
    got, ref = batches(ds), batches(plain)
    chosen = bases = shown_mask = 0
    for a, b in zip(got, ref):
        assert sorted(a) == ["attention_mask", "input_ids", "labels", "position_ids"]
        predicted = a["labels"] != IGNORE_INDEX
        assert torch.equal(a["labels"][predicted], b["labels"][predicted])
        assert (b["labels"][predicted] != IGNORE_INDEX).all()  # a trained base of the causal batch
        assert torch.equal(a["input_ids"][~predicted], b["input_ids"][~predicted])
        assert torch.equal(a["attention_mask"], b["attention_mask"])
        chosen += int(predicted.sum())
        bases += int((b["labels"] != IGNORE_INDEX).sum())
        shown_mask += int((a["input_ids"][predicted] == MASK_ID).sum())
    assert abs(chosen / bases - 0.15) < 5 * np.sqrt(0.15 * 0.85 / bases)  # 5 binomial sd
    assert abs(shown_mask / chosen - 0.8) < 5 * np.sqrt(0.8 * 0.2 / chosen)
    compact = next(iter(dataset(pieces["windows"], model_inputs=False)))
    assert compact["mlm"].dtype == torch.int16 and compact["mlm"].shape == compact["bases"].shape


def test_megatron_mlm_batch_is_the_hf_batch(pieces):
    """``batch_format="megatron"``: tokens are the hf input ids, loss_mask 1 exactly where hf labels
    are not -100, and there the labels are the hf labels (elsewhere the unmasked ids, no -100)."""
    hf = next(iter(dataset(pieces["windows"], batch_format="hf")))
    meg = next(iter(dataset(pieces["windows"])))
    assert torch.equal(meg["tokens"], hf["input_ids"])
    predicted = hf["labels"] != IGNORE_INDEX
    assert torch.equal(meg["loss_mask"] > 0, predicted)
    assert torch.equal(meg["labels"][predicted], hf["labels"][predicted])
    assert (meg["labels"] >= 0).all()


def test_packed_mlm_masks_bases_of_every_document(pieces):
    """Packed rows: only base columns are predicted (never a document's BOS, tag, SEP or EOS), and
    the varlen keys of the hf batch stay."""
    ds = dataset(pieces["sequences"], batch_format="hf", pack=True, seq_length=SEQ_LENGTH)
    plain = GenomicDataset(
        str(pieces["sequences"]), micro_batch_size=4, seed=3, batch_format="hf", pack=True, seq_length=SEQ_LENGTH
    )
    for a, b in zip(batches(ds)[:3], batches(plain)[:3]):
        predicted = a["labels"] != IGNORE_INDEX
        assert predicted.any()
        bases = torch.zeros_like(predicted)
        bases[:, :-1] = b["labels"][:, 1:] != IGNORE_INDEX  # hf causal labels: column c is base c
        bases |= b["labels"] != IGNORE_INDEX
        assert not (predicted & ~bases).any()
        assert torch.equal(a["cu_seq_lens_q"], b["cu_seq_lens_q"])


def test_masks_do_not_depend_on_worker_count_and_change_with_epoch(pieces):
    """0 and 2 loader workers give the same masks; the next epoch draws other masks for the same
    windows (matched by key: the epoch's order differs too)."""
    ds = dataset(pieces["windows"], batch_format="hf")
    zero, two = batches(ds, 0, epoch=1), batches(ds, 2, epoch=1)
    assert_same_masks(two, zero)
    keyed = dataset(pieces["windows"], rc_prob=0.0)  # the default format keeps the keys

    def masks(epoch: int) -> dict[str, torch.Tensor]:
        return {k: b["loss_mask"][i] for b in batches(keyed, 0, epoch) for i, k in enumerate(b["keys"]) if k}

    first, second = masks(1), masks(2)
    common = set(first) & set(second)  # an exact epoch leaves fewer than a batch of windows out
    assert len(common) > 10
    assert sum(not torch.equal(first[k], second[k]) for k in common) > 0.9 * len(common)
    assert all(torch.equal(first[k], v) for k, v in masks(1).items())  # the same epoch again: the same


def test_resumed_epoch_draws_the_same_masks(pieces):
    """k batches, then state_dict(batches=k) through JSON: a fresh dataset resuming it (with 2
    workers) yields the rest of the epoch with the masks the uninterrupted pass drew."""
    whole = batches(dataset(pieces["windows"], batch_format="hf"), 0, epoch=4)
    first = dataset(pieces["windows"], batch_format="hf")
    first.set_epoch(4)
    k = 3
    it = iter(DataLoader(first, batch_size=None, num_workers=0))
    taken = [next(it) for _ in range(k)]
    del it
    assert_same_masks(taken, whole[:k])
    state = json.loads(json.dumps(first.state_dict(batches=k)))
    resumed = dataset(pieces["windows"], batch_format="hf")
    resumed.load_state_dict(state)
    assert_same_masks(batches(resumed, 2), whole[k:])


def _rank_of_group(root: str, dp_rank: int, out: str) -> None:
    """One rank of a model-parallel group: its dataset (data-parallel rank `dp_rank` of 2) read with
    one loader worker; its batches saved to `out`."""
    ds = dataset(Path(root), batch_format="hf", dp_rank=dp_rank, dp_size=2)
    torch.save([masked_fields(b) for b in batches(ds, 1, epoch=2)], out)


def test_ranks_of_one_model_parallel_group_draw_the_same_masks(pieces, tmp_path):
    """Two processes of one tensor-parallel group (the same data-parallel rank) read the same
    masks, which are those of the same rank read here; the other group's ranks read other windows."""
    fork = multiprocessing.get_context("fork")
    runs = [(0, tmp_path / "tp0.pt"), (0, tmp_path / "tp1.pt"), (1, tmp_path / "other.pt")]
    procs = [fork.Process(target=_rank_of_group, args=(str(pieces["windows"]), r, str(p))) for r, p in runs]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(120)
        assert proc.exitcode == 0
    tp0, tp1, other = (torch.load(p) for _, p in runs)
    here = [
        masked_fields(b) for b in batches(dataset(pieces["windows"], batch_format="hf", dp_rank=0, dp_size=2), 0, 2)
    ]
    for a, b, c in zip(tp0, tp1, here):
        assert all(torch.equal(x, y) for x, y in zip(a, b)) and all(torch.equal(x, y) for x, y in zip(a, c))
    assert len(tp0) == len(here) > 0
    assert not torch.equal(tp0[0][0], other[0][0])


@pytest.fixture(scope="module")
def lambda_128(tmp_path_factory) -> Path:
    """The lambda genome in windows of 128 tokens, without tags (a model small enough to train fast)."""
    root = tmp_path_factory.mktemp("mlm_lambda") / "lambda"
    prepare([LAMBDA], root, PrepareOptions(seq_length=128, stride=120, split=(1, 0, 0), progress=False))
    return root


def test_bert_for_masked_lm_trains_from_mlm_batches(lambda_128):
    """A 2-layer `transformers` BertForMaskedLM (tiny config, no download) takes our hf batches as
    ``model(**batch)``: the masked-LM loss of the first 5 steps averages well above that of the
    last 5 (of 40) on the lambda genome."""
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=256,
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128,
        pad_token_id=PAD_ID,
    )
    model = BertForMaskedLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    ds = dataset(lambda_128, batch_format="hf", micro_batch_size=8)
    losses: list[float] = []
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: more threads only contend on a shared machine
    try:
        for batch in ds:
            loss = model(**batch).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) == 40:
                break
    finally:
        torch.set_num_threads(threads)
    assert len(losses) == 40
    assert np.mean(losses[-5:]) < 0.6 * np.mean(losses[:5]), losses


def test_map_dataset_serves_the_same_masks_for_an_index(pieces):
    """``GenomicMapDataset`` takes the options too: sample i has masks, the same in a fresh dataset."""
    options = {"objective": "mlm", "tokenizer": VOCAB, "batch_format": "hf", "seed": 3}
    first, again = (
        GenomicMapDataset(str(pieces["windows"]), **options),
        GenomicMapDataset(str(pieces["windows"]), **options),
    )
    for i in (0, 5):
        a, b = first[i], again[i]
        assert (a["labels"] != IGNORE_INDEX).any()
        assert torch.equal(a["input_ids"], b["input_ids"]) and torch.equal(a["labels"], b["labels"])


def test_mlm_without_a_mask_token_or_with_bad_options_is_refused(pieces):
    """The bytes default has no mask token; a probability outside (0, 1); span masking of a vocabulary
    that is not overlapping k-mers: each a clear OptionError before anything is read."""
    root = str(pieces["windows"])
    with pytest.raises(OptionError, match="needs a tokenizer with a mask token, and 'bytes' has none"):
        GenomicDataset(root, objective="mlm")
    with pytest.raises(OptionError, match=r"mlm_probability must be a number in \(0, 1\), got 1.5"):
        GenomicDataset(root, objective="mlm", tokenizer=VOCAB, mlm_probability=1.5)
    with pytest.raises(OptionError, match="mlm_span=True is DNABERT's masking of overlapping k-mers"):
        GenomicDataset(root, objective="mlm", tokenizer=VOCAB, mlm_span=True)
    with pytest.raises(OptionError, match="objective must be one of clm, mlm, got 'mlmm'"):
        GenomicDataset(root, objective="mlmm")
    with pytest.raises(OptionError, match="objective='mlm' predicts a token or not"):
        GenomicDataset(root, objective="mlm", tokenizer=VOCAB, soft_mask_weight=0.1)
    with pytest.raises(OptionError, match=r"tokenizer must be a name, a path to a tokenizer\.json"):
        GenomicDataset(root, objective="mlm", tokenizer=42)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--data.objective", "mlm"], "needs a tokenizer with a mask token, and 'bytes' has none"),
        (["--data.objective", "mlm", "--data.mlm_probability", "0"], "mlm_probability must be a number in (0, 1)"),
    ],
)
def test_cli_refuses_mlm_options_in_one_line(capsys, pieces, args, says):
    result = main_here(capsys, "fit", "--data.shards", pieces["windows"], *args, "--trainer.max_steps", "1")
    refused(result, says)
