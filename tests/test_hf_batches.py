"""`batch_format="hf"`: batches a Hugging Face `transformers` causal LM takes as ``model(**batch)``.

Models are built from small configs (no weights downloaded): a 2-layer Llama trains from our
loaders packed and unpacked, gives each document of a packed sample the loss it has alone, and its
own loss is the shifted cross-entropy of the default batch's ``loss_mask`` (the pitfall of handing a
`transformers` model our shifted labels is shown too). A tokenizer file built with `tokenizers`
(byte-level: a character's id is its code, as bionemo's nucleotide tokenizer) gives our ids.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from tokenizers import Regex, Tokenizer, models, pre_tokenizers, processors
from transformers import AutoModelForCausalLM, DataCollatorWithFlattening, LlamaConfig, PreTrainedTokenizerFast

from bionemo_wds import GenomicDataset, GenomicWebDataModule
from bionemo_wds.core.tokenizer import BOS_ID, EOS_ID, PAD_ID, SEP_ID, UNK_ID
from bionemo_wds.load.batch.hf import IGNORE_INDEX
from bionemo_wds.load.batch.packed import flat_cu_seqlens
from bionemo_wds.prepare import PrepareOptions, prepare

SEQ_LENGTH = 512


@pytest.fixture(scope="module")
def pieces(lambda_lineage_fa, tmp_path_factory) -> dict[str, Path]:
    """The lambda pieces (lineage tags, some soft-masked) in both layouts, all in train."""
    fasta, _, _ = lambda_lineage_fa
    base = tmp_path_factory.mktemp("hf")
    out = {"windows": base / "windows", "sequences": base / "sequences"}
    for layout, root in out.items():
        stride = 300 if layout == "windows" else None  # the sequence layout is cut at load
        opts = PrepareOptions(
            seq_length=SEQ_LENGTH, stride=stride, tags="lineage", split=(1, 0, 0), layout=layout, progress=False
        )
        prepare([fasta], root, opts)
    return out


def tiny_llama(attention: str = "sdpa", seed: int = 0) -> torch.nn.Module:
    """A 2-layer Llama over our 256 byte-level ids, randomly initialised from `seed`."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=SEQ_LENGTH,
        pad_token_id=PAD_ID,
        bos_token_id=BOS_ID,
        eos_token_id=EOS_ID,
    )
    return AutoModelForCausalLM.from_config(config, attn_implementation=attention)


def first_batch(root: Path, batch_format: str, **options) -> dict:
    ds = GenomicDataset(str(root), "train", micro_batch_size=4, seed=1, batch_format=batch_format, **options)
    return next(iter(ds))


@pytest.mark.parametrize("pack", [False, True])
def test_hf_batch_is_the_default_batch_for_a_model_that_shifts(pieces, pack):
    """Same ids and positions; ``labels[c]`` is the default batch's label of column c - 1 where that
    column is trained, else -100; attention_mask (unpacked) marks everything but padding; packed, the
    flattened varlen keys are those of `flat_cu_seqlens`."""
    options = {"pack": True, "seq_length": SEQ_LENGTH} if pack else {}
    root = pieces["sequences" if pack else "windows"]
    hf, ref = first_batch(root, "hf", **options), first_batch(root, "megatron", **options)
    keys = ["input_ids", "labels", "position_ids"]
    varlen = ["cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k", "use_cache"]
    keys += varlen if pack else ["attention_mask"]
    assert sorted(hf) == sorted(keys)
    assert torch.equal(hf["input_ids"], ref["tokens"]) and torch.equal(hf["position_ids"], ref["position_ids"])
    trained = ref["loss_mask"][:, :-1] > 0
    assert torch.equal(hf["labels"][:, 1:], torch.where(trained, ref["labels"][:, :-1], IGNORE_INDEX))
    assert (hf["labels"][:, 0] == IGNORE_INDEX).all()
    if pack:
        cu, longest = flat_cu_seqlens(ref)
        assert torch.equal(hf["cu_seq_lens_q"], cu) and hf["cu_seq_lens_k"] is hf["cu_seq_lens_q"]
        assert hf["max_length_q"] == hf["max_length_k"] == longest and isinstance(longest, int)
        assert (ref["seq_lens"] > 0).sum(dim=1).max() > 1  # rows of several documents
        assert hf["use_cache"] is False  # else transformers makes a cache, and attends across documents
    else:
        assert torch.equal(hf["attention_mask"], (ref["tokens"] != PAD_ID).long())


def test_packed_keys_are_what_transformers_flattening_collator_makes(pieces):
    """Each document of each row (and each row's padding) handed to `transformers`'
    ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)`` as one example gives our batch,
    flattened: the same ids, labels, positions, cu_seq_lens and max_length."""
    hf = first_batch(pieces["sequences"], "hf", pack=True, seq_length=SEQ_LENGTH)
    features = []
    cu = hf["cu_seq_lens_q"].tolist()
    ids, labels = hf["input_ids"].reshape(-1), hf["labels"].reshape(-1)
    for start, end in itertools.pairwise(cu):
        features.append({"input_ids": ids[start:end].tolist(), "labels": labels[start:end].tolist()})
    flat = DataCollatorWithFlattening(return_flash_attn_kwargs=True)(features, return_tensors="pt")
    assert torch.equal(flat["input_ids"][0], ids) and torch.equal(flat["labels"][0], labels)
    assert torch.equal(flat["position_ids"][0], hf["position_ids"].reshape(-1))
    assert flat["cu_seq_lens_q"].tolist() == cu and flat["max_length_q"] == hf["max_length_q"]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_each_packed_document_gets_the_loss_it_has_alone(pieces, attention):
    """``model(**batch)`` over packed rows: each document's loss (from the packed logits) equals the
    loss of that document forwarded alone; with an all-ones ``attention_mask`` added (documents
    attending to each other) it does not."""
    model = tiny_llama(attention).eval()
    batch = first_batch(pieces["sequences"], "hf", pack=True, seq_length=SEQ_LENGTH)

    def per_document(logits: torch.Tensor) -> list[torch.Tensor]:
        losses = []
        cu = batch["cu_seq_lens_q"].tolist()
        flat_logits, flat_labels = logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1)
        for start, end in itertools.pairwise(cu):
            target = flat_labels[start + 1 : end]
            if (target != IGNORE_INDEX).any():
                losses.append(F.cross_entropy(flat_logits[start : end - 1], target, ignore_index=IGNORE_INDEX))
        return losses

    with torch.no_grad():
        packed = per_document(model(**batch).logits)
        alone = []
        cu = batch["cu_seq_lens_q"].tolist()
        ids, labels = batch["input_ids"].reshape(-1), batch["labels"].reshape(-1)
        for start, end in itertools.pairwise(cu):
            if (labels[start + 1 : end] != IGNORE_INDEX).any():
                out = model(input_ids=ids[None, start:end], labels=labels[None, start:end])
                alone.append(out.loss)
        crossed = per_document(model(**batch, attention_mask=torch.ones_like(batch["input_ids"])).logits)
    rows = int((batch["labels"] != IGNORE_INDEX).any(dim=1).sum())
    assert len(packed) == len(alone) > rows  # several documents in a row
    torch.testing.assert_close(torch.stack(packed), torch.stack(alone), rtol=1e-5, atol=1e-5)
    assert not torch.allclose(torch.stack(crossed), torch.stack(alone), atol=1e-3)


def test_the_models_loss_is_the_shifted_cross_entropy_of_the_loss_mask(pieces):
    """Unpacked: ``model(**batch).loss`` is the cross-entropy of logits[:, :-1] against labels[:, 1:]
    (written out here), which is the default batch's loss_mask-weighted loss; our default (shifted)
    labels handed to the model would train each position on the token two ahead."""
    model = tiny_llama().eval()
    hf = first_batch(pieces["windows"], "hf")
    ref = first_batch(pieces["windows"], "megatron")
    with torch.no_grad():
        out = model(**hf)
        logits = out.logits
        by_hand = F.cross_entropy(logits[:, :-1].flatten(0, 1), hf["labels"][:, 1:].flatten(), ignore_index=-100)
        per_token = F.cross_entropy(logits.flatten(0, 1), ref["labels"].flatten(), reduction="none")
        masked = (per_token * ref["loss_mask"].flatten()).sum() / ref["loss_mask"].sum()
        pitfall = model(input_ids=ref["tokens"], labels=ref["labels"]).loss
    torch.testing.assert_close(out.loss, by_hand)
    torch.testing.assert_close(out.loss, masked)
    assert abs(float(pitfall) - float(out.loss)) > 1e-3


def byte_tokenizer_file(path: Path) -> Path:
    """A `tokenizers` tokenizer whose id of a character is its code (our specials at 0-4) and which
    lays out ``BOS tag SEP bases EOS`` for a (tag, bases) pair, saved as a tokenizer file."""
    specials = {"<EOS>": EOS_ID, "<PAD>": PAD_ID, "<BOS>": BOS_ID, "<SEP>": SEP_ID, "<UNK>": UNK_ID}
    vocab = {chr(i): i for i in range(len(specials), 256)} | specials
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<UNK>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="<BOS> $A <EOS>",
        pair="<BOS> $A <SEP> $B:1 <EOS>",
        special_tokens=[(name, specials[name]) for name in ("<BOS>", "<SEP>", "<EOS>")],
    )
    tokenizer.save(str(path))
    return path


def test_a_byte_level_tokenizer_file_gives_our_input_ids(pieces, lambda_lineage_fa, tmp_path):
    """Every window of a pass, tagged and soft-masked (``fold_case=False``: the ids as stored):
    our ``input_ids`` up to the padding are the tokenizer's ids of (its tag, its FASTA slice)."""
    _, seqs, tags = lambda_lineage_fa
    tokenizer = PreTrainedTokenizerFast(tokenizer_file=str(byte_tokenizer_file(tmp_path / "tokenizer.json")))
    ds = GenomicDataset(
        str(pieces["windows"]),
        "train",
        micro_batch_size=8,
        rc_prob=0.0,
        fold_case=False,
        model_inputs=False,
        batch_format="hf",
    )
    rows = lower = 0
    for compact in ds:
        hf = ds.model_inputs(dict(compact))
        for i, seq_id in enumerate(compact["seq_id"]):
            start, n = int(compact["start"][i]), int(compact["lengths"][i])
            bases = seqs[seq_id][start : start + n]
            want = tokenizer(tags[seq_id], bases)["input_ids"]
            used = int(hf["attention_mask"][i].sum())
            assert hf["input_ids"][i, :used].tolist() == want, seq_id
            rows, lower = rows + 1, lower + (bases != bases.upper())
    assert rows > 50 and lower > 5


class HFModule(L.LightningModule):
    """A `transformers` causal LM trained on ``model(**batch)``: its loss per step, and whether every
    weight got a gradient."""

    def __init__(self):
        super().__init__()
        self.model = tiny_llama()
        self.losses: list[float] = []
        self.all_grads = True

    def training_step(self, batch, batch_idx):
        loss = self.model(**batch).loss
        self.losses.append(float(loss.detach()))
        return loss

    def on_after_backward(self):
        self.all_grads &= all(p.grad is not None and p.grad.abs().sum() > 0 for p in self.model.parameters())

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


@pytest.mark.slow
@pytest.mark.parametrize("pack", [False, True])
def test_a_transformers_model_trains_from_the_data_module(pieces, pack):
    """`Trainer.fit` with ``batch_format="hf"``: the batches reach ``model(**batch)`` through the
    data module's ``on_after_batch_transfer``; the loss is finite and falls, and every weight learns."""
    options = {"pack": True, "seq_length": SEQ_LENGTH} if pack else {}
    root = pieces["sequences" if pack else "windows"]
    dm = GenomicWebDataModule(str(root), micro_batch_size=4, batch_format="hf", num_workers=0, **options)
    module = HFModule()
    trainer = L.Trainer(
        max_steps=8,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=dm)
    losses = torch.tensor(module.losses)
    assert len(losses) == 8 and torch.isfinite(losses).all() and module.all_grads
    assert losses[-3:].mean() < losses[:3].mean() - 0.3
