"""Tokenizers at load (`load.tokenize`): ids equal each family's published rule, written here again
independently (NT's non-overlapping 6-mers split at N, DNABERT's overlapping k-mers, HyenaDNA's and
Caduceus's characters), a Hugging Face BPE file's ids equal the library's own ``encode``, and the
bad input of the option (unknown name, a missing or broken file, a base without a token) is refused
in one line."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest
import torch
from conftest import KLEBSIELLA, read_fasta
from tokenizers import Tokenizer, models, processors, trainers

from bionemo_wds.errors import OptionError, SourceError
from bionemo_wds.load.batch.labels import LabelRules
from bionemo_wds.load.batch.token_inputs import token_model_inputs
from bionemo_wds.load.batch.tokens import TokenDoc, tokenized_batch
from bionemo_wds.load.tokenize import resolve_tokenizer

#: A stretch of real sequence with what the rules treat specially: N runs, a leftover, lower case.
KLEB = read_fasta(KLEBSIELLA)
SAMPLE = sorted(KLEB.values(), key=len)[40][:2000]
TRICKY = SAMPLE[:601] + "N" + SAMPLE[601:900] + "NNN" + SAMPLE[900:1333] + "N" + SAMPLE[1333:1400].lower() + "AC"


def train_bpe(text: str, vocab_size: int = 4096) -> Tokenizer:
    """DNABERT-2's recipe, small: BPE trained on the genome in 1 kb lines, [CLS] .. [SEP] around a sequence."""
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=list("ACGTN"), show_progress=False
    )
    tok.train_from_iterator((text[i : i + 1000] for i in range(0, len(text), 1000)), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    return tok


@pytest.fixture(scope="module")
def bpe_file(tmp_path_factory) -> str:
    text = "".join(sorted(KLEB.values(), key=len)[-1][:300_000]).upper()
    path = tmp_path_factory.mktemp("bpe") / "tokenizer.json"
    train_bpe(text).save(str(path))
    return str(path)


def nt_reference(seq: str) -> list[int]:
    """NucleotidesKmersTokenizer.tokenize (k=6) with <cls> first, and compute_dcnuc_tokens_to_ids's ids."""
    vocab = ["<unk>", "<pad>", "<mask>", "<cls>", *("".join(p) for p in product("ATCG", repeat=6))]
    vocab += ["A", "T", "C", "G", "N", "<eos>", "<bos>"]
    ids = {t: i for i, t in enumerate(vocab)}
    tokens = ["<cls>"]
    pieces = seq.upper().split("N")
    for i, piece in enumerate(pieces):
        whole = len(piece) // 6 * 6
        tokens += [piece[j : j + 6] for j in range(0, whole, 6)] + list(piece[whole:])
        if i < len(pieces) - 1:
            tokens.append("N")
    return [ids[t] for t in tokens]


def dnabert_reference(seq: str, k: int) -> list[int]:
    """DNABERT's seq2kmer and vocab.txt: [CLS] k-mers [SEP], a k-mer not in the vocabulary [UNK]."""
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *("".join(p) for p in product("ATCG", repeat=k))]
    ids = {t: i for i, t in enumerate(vocab)}
    seq = seq.upper()
    return [2] + [ids.get(seq[i : i + k], 1) for i in range(len(seq) - k + 1)] + [3]


def char_reference(seq: str) -> list[int]:
    """HyenaDNA's / Caduceus's characters from 7, [SEP] after."""
    return [{"A": 7, "C": 8, "G": 9, "T": 10, "N": 11}[c] for c in seq.upper()] + [1]


def framed(name: str, seq: str) -> list[int]:
    tok = resolve_tokenizer(name)
    ids = tok.encode(np.frombuffer(seq.encode(), dtype=np.uint8)).tolist()
    return list(tok.prefix) + ids + list(tok.suffix)


@pytest.mark.parametrize(
    "seq", [TRICKY, SAMPLE, SAMPLE[:601], SAMPLE[:5], "NNNN", SAMPLE[:12] + "N", "N" + SAMPLE[:13]]
)
def test_nt_ids_equal_the_published_rule(seq):
    assert framed("nt", seq) == nt_reference(seq)


@pytest.mark.parametrize("k", [3, 4, 5, 6])
def test_dnabert_ids_equal_the_published_rule(k):
    assert framed(f"dnabert{k}", TRICKY) == dnabert_reference(TRICKY, k)


@pytest.mark.parametrize("name", ["hyenadna", "caduceus"])
def test_character_ids_equal_the_published_vocabulary(name):
    assert framed(name, TRICKY) == char_reference(TRICKY)


def test_bpe_ids_equal_the_library(bpe_file):
    lib = Tokenizer.from_file(bpe_file)
    tok = resolve_tokenizer(bpe_file)
    upper = TRICKY.upper()
    assert (
        tok.encode(np.frombuffer(TRICKY.encode(), dtype=np.uint8)).tolist()
        == lib.encode(upper, add_special_tokens=False).ids
    )
    assert framed(bpe_file, TRICKY) == lib.encode(upper).ids  # the file's own [CLS] .. [SEP]
    assert (tok.vocab_size, tok.pad_id, tok.mask_id, tok.prefix, tok.suffix) == (4096, 0, 4, (2,), (3,))
    assert (
        resolve_tokenizer(lib).encode(np.frombuffer(b"ACGTACGT", np.uint8)).tolist()
        == lib.encode("ACGTACGT", add_special_tokens=False).ids
    )


@pytest.mark.parametrize(
    ("name", "vocab", "mask", "dtype"),
    [
        ("nt", 4107, 2, np.int16),
        ("dnabert6", 4101, 4, np.int16),
        ("dnabert3", 69, 4, np.uint8),
        ("caduceus", 12, 3, np.uint8),
    ],
)
def test_vocabulary_sizes_specials_and_compact_dtype(name, vocab, mask, dtype):
    tok = resolve_tokenizer(name)
    assert (tok.vocab_size, tok.mask_id, tok.id_dtype) == (vocab, mask, np.dtype(dtype))
    assert tok.pad_id in tok.special_ids and tok.mask_id in tok.special_ids
    batch = tokenized_batch(
        [[TokenDoc(np.frombuffer(SAMPLE[:60].encode(), np.uint8), False, "s:0+60")]], tok, 64, False
    )
    assert batch["tokens"].dtype == dtype
    assert (tok.kmer, tok.overlapping) == {"nt": (6, False), "dnabert6": (6, True), "dnabert3": (3, True)}.get(
        name, (None, False)
    )


def test_reverse_complement_flips_the_bases_then_tokenizes():
    tok = resolve_tokenizer("nt")
    seq = SAMPLE[:200]
    rc = seq[::-1].translate(str.maketrans("ACGT", "TGCA"))
    batch = tokenized_batch([[TokenDoc(np.frombuffer(seq.encode(), np.uint8), True, "s:0+200")]], tok, 64, False)
    expected = nt_reference(rc)
    assert batch["tokens"][0, : len(expected)].tolist() == expected


def test_soft_masked_and_degenerate_bases_weigh_every_token_that_spells_them():
    tok = resolve_tokenizer("dnabert3")
    seq = "ACGTAC" + "gt" + "ACGTAC" + "N" + "ACGT"  # lower case at 6..7, N at 14
    batch = tokenized_batch([[TokenDoc(np.frombuffer(seq.encode(), np.uint8), False, "s:0+19")]], tok, 24, False)
    out = token_model_inputs(batch, tok, 0.25, LabelRules(), "megatron")
    # token t (column t + 1 after [CLS]) spells bases t .. t + 2; loss_mask[c] weighs the label at c + 1
    weights = out["loss_mask"][0, : len(seq) - 2].tolist()
    for t, w in enumerate(weights):
        spelled = seq[t : t + 3]
        want = 0.0 if "N" in spelled else 0.25 if any(c.islower() for c in spelled) else 1.0
        assert w == want, (t, spelled)
    assert out["loss_mask"][0, len(seq) - 2 :].sum() == 0  # [SEP] and padding are never trained
    kept = token_model_inputs(batch, tok, None, LabelRules(mask_degenerate_bases=False), "megatron")["loss_mask"]
    # a k-mer holding N is DNABERT's [UNK], a special: never trained, whatever the rules
    assert kept[0, : len(seq) - 2].tolist() == [0.0 if "N" in seq[t : t + 3] else 1.0 for t in range(len(seq) - 2)]


def test_hf_format_labels_are_the_trained_ids():
    tok = resolve_tokenizer("nt")
    seq = SAMPLE[:100] + "N" + SAMPLE[100:130]
    batch = tokenized_batch([[TokenDoc(np.frombuffer(seq.encode(), np.uint8), False, "s:0+131")]], tok, 48, False)
    out = token_model_inputs(batch, tok, None, LabelRules(), "hf")
    ids = torch.tensor(nt_reference(seq))
    trained = ids >= 4
    trained &= ids != 4104  # N: degenerate, out of the loss
    assert out["labels"][0, : len(ids)].tolist() == torch.where(trained, ids, -100).tolist()
    assert out["attention_mask"][0].tolist() == [1] * len(ids) + [0] * (48 - len(ids))


def test_an_unknown_name_is_refused_with_a_suggestion():
    with pytest.raises(OptionError, match=r"unknown tokenizer 'dnabert7'; did you mean dnabert6"):
        resolve_tokenizer("dnabert7")
    with pytest.raises(OptionError, match=r"did you mean caduceus"):
        resolve_tokenizer("caduseus")


def test_a_missing_or_broken_tokenizer_file_is_refused(tmp_path):
    with pytest.raises(OptionError, match="does not exist"):
        resolve_tokenizer(str(tmp_path / "nope.json"))
    bad = tmp_path / "tokenizer.json"
    bad.write_text('{"not": "a tokenizer"}')
    with pytest.raises(OptionError, match="is not a Hugging Face tokenizer file"):
        resolve_tokenizer(str(bad))
    with pytest.raises(OptionError, match="is not a Hugging Face tokenizer file"):
        resolve_tokenizer(str(tmp_path))  # a directory: its tokenizer.json


@pytest.mark.parametrize("name", ["nt", "dnabert6", "caduceus"])
def test_a_base_without_a_token_is_named_with_where_it_is(name):
    tok = resolve_tokenizer(name)
    with pytest.raises(SourceError, match=r"no token for base 'R', first at base 7 of sample s:0\+12"):
        tok.spans(np.frombuffer(b"ACGTACGRACGT", np.uint8), "sample s:0+12")


def test_a_bpe_without_a_token_for_a_base_is_refused(bpe_file):
    tok = resolve_tokenizer(bpe_file)
    with pytest.raises(SourceError, match=r"no token for base 'R', first at base 4"):
        tok.spans(np.frombuffer(b"ACGTRACGT", np.uint8), "sample x")


@pytest.mark.parametrize("fmt", ["megatron", "hf"])
@pytest.mark.parametrize("packed", [False, True])
def test_the_tensor_form_for_accelerators_equals_the_cpu_form(fmt, packed):
    """`token_inputs_gather` (what an accelerator runs) and `token_inputs_cpu` make the same batch."""
    from bionemo_wds.load.batch.token_inputs import token_inputs_cpu, token_inputs_gather

    tok = resolve_tokenizer("nt")
    docs = [
        TokenDoc(np.frombuffer(s.encode(), np.uint8), rc, f"s:{i}")
        for i, (s, rc) in enumerate(
            [(TRICKY[:700], False), (TRICKY[1300:], True), (SAMPLE[:90], False), ("NNNN" + SAMPLE[:50], True)]
        )
    ]
    rows = [docs[:2], docs[2:]] if packed else [[d] for d in docs]
    batch = tokenized_batch(rows, tok, 160, packed)
    assert "token_flags" in batch
    rules = LabelRules(min_real_fraction=0.6)
    cpu = token_inputs_cpu(dict(batch), tok, 0.5 if fmt == "megatron" else 0, rules, fmt, True)
    tensors = {k: torch.as_tensor(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()}
    gather = token_inputs_gather(tensors, tok, 0.5 if fmt == "megatron" else 0, rules, fmt, True)
    assert set(cpu) == set(gather)
    for key, value in cpu.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, gather[key]), key


def soft_or_degenerate(seq: str, start: int, end: int) -> int:
    """The flags of a token spelling ``seq[start:end]`` by the documented rule (1: any base lower
    case, 2: any base not A/C/G/T)."""
    spelled = seq[start:end]
    return (any(c.islower() for c in spelled)) | (any(c.upper() not in "ACGT" for c in spelled) << 1)


@pytest.mark.parametrize("name", ["nt", "dnabert6", "dnabert3", "caduceus", "bpe"])
def test_a_batch_tokenized_at_once_equals_each_document_by_its_rule(name, bpe_file):
    """The whole batch's bases are tokenized in one pass (`Tokenizer.tokenize`): every packed document,
    on its strand, equals its own reference ids (short ones, N runs, lower case, a document cut off by
    seq_length), and each token's flags the rule of the bases it spells."""
    tok = resolve_tokenizer(bpe_file if name == "bpe" else name)
    texts = [
        (TRICKY[:640], False),
        (SAMPLE[:4], True),
        ("", False),
        (TRICKY[1300:], True),
        ("NN" + SAMPLE[:31].lower() + "N", False),
        (SAMPLE[:900], False),
    ]
    docs = [TokenDoc(np.frombuffer(s.encode(), np.uint8), rc, f"s:{i}") for i, (s, rc) in enumerate(texts)]
    lib = Tokenizer.from_file(bpe_file)

    def reference(seq: str) -> list[int]:
        if name == "nt":
            return nt_reference(seq)
        if name.startswith("dnabert"):
            return dnabert_reference(seq, int(name[-1])) if len(seq) >= int(name[-1]) else [2, 3]
        if name == "caduceus":
            return char_reference(seq)
        return lib.encode(seq.upper()).ids

    def strand(doc: TokenDoc) -> str:
        seq = doc.bases.tobytes().decode()
        return seq[::-1].translate(str.maketrans("ACGTacgt", "TGCAtgca")) if doc.rc else seq

    need = [sum(len(reference(strand(d))) for d in row) for row in (docs[:3], docs[3:])]
    seq_length = max(need[0], need[1] - 10)  # the last document of the second row is cut off
    batch = tokenized_batch([docs[:3], docs[3:]], tok, seq_length, True)
    cut = False
    for r, row in enumerate([docs[:3], docs[3:]]):
        pos = 0
        for j, doc in enumerate(row):
            seq = strand(doc)
            want = reference(seq)
            size = int(batch["doc_tokens"][r, j])
            got = batch["tokens"][r, pos : pos + size].tolist()
            if size < len(want):  # cut off by seq_length: its first tokens, then the suffix
                cut = True
                assert got == want[: size - len(tok.suffix)] + list(tok.suffix) and size == seq_length - pos
            else:
                assert got == want, (name, r, j)
            if name != "bpe" and "token_flags" in batch:
                spans = tok.spans(np.frombuffer(seq.encode(), np.uint8))
                flags = [soft_or_degenerate(seq, s, e) for s, e in zip(spans.starts.tolist(), spans.ends.tolist())]
                inner = size - tok.n_specials
                p = pos + len(tok.prefix)
                assert batch["token_flags"][r, p : p + inner].tolist() == flags[:inner], (name, r, j)
            pos += size
    assert cut and "token_flags" in batch
    assert batch["lengths"].tolist() == [sum(len(s) for s, _ in texts[:3]), sum(len(s) for s, _ in texts[3:])]


def test_bpe_spans_without_library_offsets_equal_the_library_offsets(bpe_file):
    """A BPE whose tokens spell their own strings is encoded without offsets (``encode_batch_fast``):
    the bases each token spells, summed from token lengths, equal the library's own offsets."""
    lib = Tokenizer.from_file(bpe_file)
    tok = resolve_tokenizer(bpe_file)
    assert tok.spelled is not None
    for seq in (TRICKY, SAMPLE[:777].lower(), "A"):
        spans = tok.spans(np.frombuffer(seq.encode(), np.uint8))
        enc = lib.encode(seq.upper(), add_special_tokens=False)
        assert spans.ids.tolist() == enc.ids
        assert list(zip(spans.starts.tolist(), spans.ends.tolist())) == enc.offsets
