"""Loading with a tokenizer (``tokenizer=``): seq_length counts tokens, and every loader property holds.

One sequence-layout dataset of short Klebsiella contigs (one with an N run, one soft-masked stretch)
is read with NT's 6-mers, DNABERT-6, Caduceus's characters and a BPE trained on the genome: every
window's tokens equal its bases (on the strand drawn) tokenized by the reference rule, each planned
window once per epoch, the batches the same for 0 and 2 loader workers, packed samples hold every
base once (in tokens, or counted in ``left_out``), a resume continues the epoch, the map-style
dataset, a blend and provenance work as with bytes.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import LAMBDA, main_here, read_fasta, refused, write_fasta
from test_cli_fit import hparams, small
from test_tokenizers import KLEB, char_reference, dnabert_reference, nt_reference, train_bpe
from tokenizers import Tokenizer
from torch.utils.data import DataLoader

from bionemo_wds import GenomicDataset, GenomicWebDataModule
from bionemo_wds.errors import OptionError
from bionemo_wds.load.map_dataset import GenomicMapDataset
from bionemo_wds.load.tokenize import resolve_tokenizer
from bionemo_wds.prepare import PrepareOptions, prepare

SEED = 5
SEQ_LENGTH = 256
COMPLEMENT = str.maketrans("ACGTNacgtn", "TGCANtgcan")


@pytest.fixture(scope="module")
def fasta(tmp_path_factory) -> Path:
    contigs = dict(sorted(KLEB.items(), key=lambda kv: len(kv[1]))[10:28])
    names = list(contigs)
    seq = contigs[names[-1]]
    contigs[names[-1]] = seq[:900] + "N" * 30 + seq[900:2000] + seq[2000:2400].lower() + seq[2400:]
    return write_fasta(tmp_path_factory.mktemp("tokfa") / "contigs.fa", contigs)


@pytest.fixture(scope="module")
def root(fasta, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("tokds") / "data"
    opts = PrepareOptions(seed=SEED, layout="sequences", split=(1.0, 0.0, 0.0), workers=1, progress=False, case="keep")
    prepare([str(fasta)], str(out), opts)
    return out


@pytest.fixture(scope="module")
def bpe(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tokbpe") / "tokenizer.json"
    train_bpe(sorted(KLEB.values(), key=len)[-1][:300_000].upper()).save(str(path))
    return str(path)


def tokenizer_of(name: str, bpe: str) -> str:
    return bpe if name == "bpe" else name


def reference(name: str, bases: str, bpe: str) -> list[int]:
    """The framed ids of `bases` by the reference rule (the library's own encode for BPE)."""
    if name == "nt":
        return nt_reference(bases)
    if name == "dnabert6":
        return dnabert_reference(bases, 6)
    if name == "caduceus":
        return char_reference(bases)
    return library(bpe).encode(bases.upper()).ids


@functools.cache
def library(path: str) -> Tokenizer:
    return Tokenizer.from_file(path)


def documents(batch: dict, i: int) -> list[tuple[str, int, int, bool, int]]:
    """(seq_id, start, length, rc, tokens) of each document of row i."""
    keys = [k for k in str(batch["keys"][i]).split(";") if k]
    out = []
    for j, key in enumerate(keys):
        seq_id, span = key.rsplit(":", 1)
        start, length = (int(x) for x in span.split("+"))
        if "doc_rc" in batch:
            rc, size = bool(batch["doc_rc"][i][j]), int(batch["doc_tokens"][i][j])
        else:
            rc, size = bool(batch["rc"][i]), int((np.asarray(batch["tokens"][i]) != resolve_pad(batch)).sum())
        out.append((seq_id, start, length, rc, size))
    return out


def resolve_pad(batch: dict) -> int:
    return int(batch["_pad"])


def check_batches(batches: list[dict], name: str, seqs: dict[str, str], bpe: str) -> dict[str, list[tuple[int, int]]]:
    """Every document's tokens equal its bases tokenized (a row that left bases out: a prefix of them,
    the bases left out counted); returns the spans of bases each sequence's documents cover."""
    tok = resolve_tokenizer(tokenizer_of(name, bpe))
    covered: dict[str, list[tuple[int, int]]] = {}
    for batch in batches:
        batch["_pad"] = tok.pad_id
        for i in range(len(batch["keys"])):
            pos, spelled = 0, 0
            for seq_id, start, length, rc, size in documents(batch, i):
                bases = seqs[seq_id][start : start + length]
                bases = bases.translate(COMPLEMENT)[::-1] if rc else bases
                want = reference(name, bases, bpe)
                got = np.asarray(batch["tokens"][i][pos : pos + size]).tolist()
                if int(batch["left_out"][i]) == 0:
                    assert got == want, (name, seq_id, start, rc)
                    spelled += length
                else:
                    body = got[len(tok.prefix) : size - len(tok.suffix)]
                    assert body == want[len(tok.prefix) : len(tok.prefix) + len(body)]
                    ends = tok.spans(np.frombuffer(bases.encode(), np.uint8)).ends
                    spelled += int(ends[len(body) - 1]) if body else 0
                covered.setdefault(seq_id, []).append((start, start + length))
                pos += size
            assert spelled + int(batch["left_out"][i]) == int(batch["lengths"][i])  # no base silently lost
    return covered


def compact(root: Path, name: str, bpe: str, workers: int = 0, **kw) -> list[dict]:
    ds = GenomicDataset(
        str(root),
        "train",
        micro_batch_size=4,
        model_inputs=False,
        seq_length=SEQ_LENGTH,
        seed=SEED,
        tokenizer=tokenizer_of(name, bpe),
        **kw,
    )
    return list(DataLoader(ds, batch_size=None, num_workers=workers))


@pytest.mark.parametrize("name", ["nt", "dnabert6", "caduceus", "bpe"])
def test_every_window_is_its_bases_tokenized_once_per_epoch(root, fasta, bpe, name):
    seqs = read_fasta(fasta)
    batches = compact(root, name, bpe)
    covered = check_batches(batches, name, seqs, bpe)
    keys = [k for b in batches for k in b["keys"] if k]
    assert len(keys) == len(set(keys))  # each planned window once
    gaps = 0  # an exact epoch leaves out fewer windows than a batch holds (the last partial batch)
    for seq_id, seq in seqs.items():  # every base of every sequence is in a window
        spans = sorted(covered.get(seq_id, [(0, 0)]))
        gaps += (spans[0][0] > 0) + (spans[-1][1] < len(seq)) + sum(b[0] > a[1] for a, b in itertools.pairwise(spans))
    assert gaps < 4
    if name != "bpe":  # fixed-ratio tokenizers: a full window of A/C/G/T fills seq_length exactly
        tok = resolve_tokenizer(name)
        full = [
            int((np.asarray(b["tokens"][i]) != tok.pad_id).sum())
            for b in batches
            for i in range(len(b["keys"]))
            if "N" not in seqs[b["seq_id"][i]] and int(b["lengths"][i]) == max(int(x) for x in b["lengths"])
        ]
        assert full and max(full) == SEQ_LENGTH


@pytest.mark.parametrize("name", ["nt", "bpe"])
def test_packed_samples_hold_every_base_once(root, fasta, bpe, name):
    seqs = read_fasta(fasta)
    batches = compact(root, name, bpe, pack=True)
    covered = check_batches(batches, name, seqs, bpe)
    for seq_id, seq in seqs.items():
        spans = sorted(covered[seq_id])
        assert spans[0][0] == 0 and spans[-1][1] == len(seq)
        assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # no base twice, none skipped


@pytest.mark.parametrize(("name", "pack"), [("nt", False), ("bpe", True)])
def test_batches_do_not_depend_on_the_worker_count(root, bpe, name, pack):
    alone, two = compact(root, name, bpe, pack=pack), compact(root, name, bpe, workers=2, pack=pack)
    assert len(alone) == len(two)
    for a, b in zip(alone, two):
        assert a["keys"] == b["keys"]
        assert torch.equal(a["tokens"], b["tokens"]) and a["tokens"].dtype == b["tokens"].dtype


def test_a_resume_continues_the_epoch(root, bpe):
    def dataset() -> GenomicDataset:
        return GenomicDataset(str(root), "train", micro_batch_size=4, seq_length=SEQ_LENGTH, seed=SEED, tokenizer="nt")

    whole = list(dataset())
    first = dataset()
    taken = [b for _, b in zip(range(3), first)]
    state = first.state_dict(batches=len(taken))
    again = dataset()
    again.load_state_dict(state)
    rest = list(again)
    assert len(rest) == len(whole) - 3
    for a, b in zip(whole[3:], rest):
        assert torch.equal(a["tokens"], b["tokens"]) and torch.equal(a["loss_mask"], b["loss_mask"])


def test_the_map_dataset_serves_the_iterable_samples(root):
    options = {"seq_length": SEQ_LENGTH, "seed": SEED, "tokenizer": "nt"}
    by_index = GenomicMapDataset(str(root), "train", **options)
    iterable = GenomicDataset(str(root), "train", micro_batch_size=1, dp_rank=0, dp_size=1, **options)
    for i, batch in zip(range(6), iterable):
        sample = by_index[i]
        assert torch.equal(sample["tokens"], batch["tokens"][0]) and sample["keys"] == batch["keys"][0]


def test_a_blend_and_provenance_work_with_a_tokenizer(root, tmp_path):
    phage = tmp_path / "lambda"
    opts = PrepareOptions(seed=SEED, layout="sequences", split=(1.0, 0.0, 0.0), workers=1, progress=False)
    prepare([str(LAMBDA)], str(phage), opts)
    ds = GenomicDataset(
        datasets=[{"path": str(root), "weight": 1}, {"path": str(phage), "weight": 1}],
        micro_batch_size=4,
        seq_length=SEQ_LENGTH,
        seed=SEED,
        tokenizer="dnabert6",
    )
    batches = list(ds)
    assert sum(len(b["keys"]) for b in batches) >= sum(ds.quotas) - 3
    assert set(ds.source_counts[0]) == {"data", "lambda"} and all(ds.source_counts[0].values())
    records = ds.provenance(batches[0])
    b = batches[0]
    assert [(r.seq_id, r.start, r.end - r.start, r.strand == "-") for r in records] == [
        (b["seq_id"][i], int(b["start"][i]), int(b["lengths"][i]), bool(b["rc"][i])) for i in range(len(records))
    ]


def test_the_data_module_serves_token_batches(root):
    dm = GenomicWebDataModule(str(root), micro_batch_size=4, seq_length=SEQ_LENGTH, tokenizer="nt", num_workers=0)
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    inputs = dm.model_inputs(batch)
    assert batch["tokens"].dtype == torch.int16 and inputs["tokens"].dtype == torch.int64
    assert inputs["tokens"].shape == (4, SEQ_LENGTH) and int(inputs["tokens"][0, 0]) == 3  # <cls>


def test_lower_case_ids_and_control_tags_are_refused_with_a_tokenizer(root):
    with pytest.raises(OptionError, match=r"fold_case=False .* only tokenizer='bytes'"):
        GenomicDataset(str(root), tokenizer="nt", fold_case=False)
    with pytest.raises(OptionError, match="unknown tokenizer 'n6'"):
        GenomicDataset(str(root), tokenizer="n6")


def test_control_tags_are_refused_with_a_tokenizer(lambda_lineage_fa, tmp_path):
    fasta, _, _ = lambda_lineage_fa
    tagged = tmp_path / "tagged"
    opts = PrepareOptions(seq_length=256, tags="lineage", split=(1.0, 0.0, 0.0), workers=1, progress=False)
    prepare([str(fasta)], str(tagged), opts)
    with pytest.raises(OptionError, match=r"has control tags, which tokenizer 'nt' cannot spell .* control_tags=False"):
        GenomicDataset(str(tagged), tokenizer="nt")
    assert next(iter(GenomicDataset(str(tagged), tokenizer="nt", control_tags=False)))["tokens"].shape == (8, 256)


def test_the_command_line_refuses_an_unknown_tokenizer_in_one_line(root, capsys):
    run = main_here(capsys, "fit", "--data.shards", str(root), "--data.tokenizer", "ntt", "--trainer.max_steps", "1")
    refused(run, "unknown tokenizer 'ntt'; did you mean nt")


@pytest.mark.slow
def test_fit_trains_on_nt_tokens_from_the_command_line(kleb_1024, tmp_path, capsys):
    """The demo config with ``--data.tokenizer nt``: the model gets NT's 4,107 ids as its vocabulary."""
    logs = tmp_path / "logs"
    args = [*small(kleb_1024, logs, "--data.tokenizer", "nt", "--model.d_model", "32", "--model.n_layers", "1")]
    run = main_here(capsys, *args)
    assert run.returncode == 0, run.stderr
    assert hparams(logs)["vocab_size"] == 4107


@pytest.mark.parametrize(("name", "pack"), [("nt", False), ("dnabert6", True), ("caduceus", False), ("bpe", True)])
def test_masked_lm_predicts_the_tokenizers_own_ids(root, bpe, name, pack):
    """objective="mlm" over a tokenizer's rows: a label is the unmasked id (what the causal batch of the
    same seed holds), never a special; the masks the same for 0 and 2 loader workers."""
    tok = resolve_tokenizer(tokenizer_of(name, bpe))
    common = {"micro_batch_size": 4, "seq_length": SEQ_LENGTH, "seed": SEED, "tokenizer": tokenizer_of(name, bpe)}
    plain = list(GenomicDataset(str(root), "train", pack=pack, **common))
    masked_ds = GenomicDataset(str(root), "train", pack=pack, objective="mlm", batch_format="hf", **common)
    masked = list(masked_ds)
    again = list(DataLoader(masked_ds, batch_size=None, num_workers=2))
    specials = torch.tensor(sorted(tok.special_ids))
    chosen = 0
    for p, m, a in zip(plain, masked, again):
        predicted = m["labels"] != -100
        assert torch.equal(m["labels"][predicted], p["tokens"][predicted])
        assert not torch.isin(m["labels"][predicted], specials).any()
        assert torch.equal(m["input_ids"], a["input_ids"]) and torch.equal(m["labels"], a["labels"])
        chosen += int(predicted.sum())
    assert chosen > 0


def test_masked_lm_needs_a_tokenizer_with_a_mask_token(root):
    with pytest.raises(OptionError, match="needs a tokenizer with a mask token, and 'bytes' has none"):
        GenomicDataset(str(root), objective="mlm")


@pytest.mark.slow
def test_esm_for_masked_lm_trains_on_nt_tokens(root):
    """Nucleotide Transformer's architecture (`transformers`' EsmForMaskedLM, a small config with NT's
    4,107 ids and its pad and mask ids) trains from our NT masked-LM batches: the loss falls. (The
    command line's fit of TinyDNALM on NT tokens is `test_fit_trains_on_nt_tokens_from_the_command_line`.)"""
    from transformers import EsmConfig, EsmForMaskedLM

    tok = resolve_tokenizer("nt")
    torch.manual_seed(0)
    config = EsmConfig(
        vocab_size=tok.vocab_size,
        pad_token_id=tok.pad_id,
        mask_token_id=tok.mask_id,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=130,
        position_embedding_type="absolute",
        token_dropout=False,
    )
    model = EsmForMaskedLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-2)
    ds = GenomicDataset(
        str(root),
        "train",
        micro_batch_size=4,
        seq_length=128,
        seed=SEED,
        tokenizer="nt",
        objective="mlm",
        batch_format="hf",
        control_tags=False,
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small: one thread is fastest on a shared machine
    losses = []
    try:
        for epoch in range(3):
            ds.set_epoch(epoch)
            for batch in ds:
                loss = model(**batch).loss
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(float(loss))
    finally:
        torch.set_num_threads(threads)
    assert len(losses) >= 20
    # uniform over 4,107 ids is ln 4107 = 8.32 nats, and the 6-mers' own frequencies leave little below
    # it for a model this small to reach in a few dozen steps: a fall of 0.05 is learning, not noise
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.05, losses


def test_a_base_without_a_token_stops_fit_in_one_line(tmp_path, capsys, lambda_seq):
    """A base the vocabulary cannot spell is found when its batch is built, in a loader worker: the
    command line still says it in one line (the base, the sample, where), exit 2."""
    # an R in both sequences, so the first batch read hits one whichever split the seeded rule gives it
    seqs = {f"withR_{i}": lambda_seq[i : i + 3000] + "R" + lambda_seq[i + 3000 : i + 6000] for i in (0, 6000)}
    fasta = write_fasta(tmp_path / "r.fa", seqs)
    data = tmp_path / "data"
    opts = PrepareOptions(seed=SEED, layout="sequences", split=(0.5, 0.5, 0.0), workers=1, progress=False)
    prepare([str(fasta)], str(data), opts)
    args = small(data, tmp_path / "logs", "--data.tokenizer", "nt", "--trainer.val_check_interval", "2")
    args[args.index("--data.seq_length") + 1] = "256"
    args[args.index("--data.num_workers") + 1] = "1"  # found in a loader worker
    run = main_here(capsys, *args, "--data.cache_in_memory", "[]")
    refused(run, "tokenizer 'nt' has no token for base 'R', first at base", "of sample withR_")
