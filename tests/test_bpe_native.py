"""The exact BPE encoder in C (`bionemo_wds.load.tokenize.exact_bpe`): its ids equal the `tokenizers`
library's own (``encode_batch_fast``, ``encode``) on real genome windows and on random small BPEs
whose merges make one token from two pairs and list merges out of order; where it cannot be exact
the library runs; `HfTokenizer.tokenize` gives the same Tokens either way."""

from __future__ import annotations

import importlib.util
import itertools
import json
import pickle
import random
import shutil
import subprocess
import sysconfig
from pathlib import Path

import numpy as np
import pytest
from conftest import KLEBSIELLA, LAMBDA, read_fasta
from hypothesis import given, settings
from hypothesis import strategies as st
from test_tokenizers import train_bpe
from tokenizers import Tokenizer, models, pre_tokenizers

from bionemo_wds.load.tokenize import exact_bpe
from bionemo_wds.load.tokenize.exact_bpe import ExactBpe
from bionemo_wds.load.tokenize.hf_file import HfTokenizer

#: The tests of the encoder itself; the warning where it is missing is tested either way.
needs_native = pytest.mark.skipif(exact_bpe.bpe_native is None, reason="the C extension is not built")

KLEB = read_fasta(KLEBSIELLA)
COMPLEMENT = str.maketrans("ACGTN", "TGCAN")


@pytest.fixture(scope="module")
def genome() -> str:
    return "".join(sorted(KLEB.values(), key=len)[-1]).upper()


@pytest.fixture(scope="module")
def bpe(genome) -> Tokenizer:
    """A 4,096-id BPE trained on the genome's first 300 kb (DNABERT-2's recipe, as the benchmark's)."""
    return train_bpe(genome[:300_000])


def encode(encoder: ExactBpe, docs: list[str]) -> tuple[list[list[int]], list[list[tuple[int, int]]]] | None:
    """Each document's ids and (start, end) of its tokens, by the C encoder."""
    text = np.frombuffer("".join(docs).encode(), dtype=np.uint8)
    bounds = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    found = encoder.encode(text, bounds)
    if found is None:
        return None
    ids, starts, widths, counts = (a.tolist() for a in found)
    edges = np.concatenate([[0], np.cumsum(counts)]).tolist()
    spans = [
        (s - bounds[d], s - bounds[d] + w)
        for d, (a, b) in enumerate(itertools.pairwise(edges))
        for s, w in zip(starts[a:b], widths[a:b])
    ]
    return [ids[a:b] for a, b in itertools.pairwise(edges)], [spans[a:b] for a, b in itertools.pairwise(edges)]


@needs_native
def test_ids_equal_the_library_on_genome_windows(bpe, genome):
    """Windows of a real genome past the training bases, both strands, 0 to 12 kb, and a second
    genome the BPE never saw: the ids equal ``encode_batch_fast``'s, the spans ``encode_batch``'s offsets."""
    encoder, why = ExactBpe.of(bpe)
    assert encoder is not None, why
    rng = random.Random(0)
    lam = "".join(read_fasta(LAMBDA).values()).upper()
    docs = ["", "A", "N", "NNNN", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "ACGT" * 300]
    for source in (genome[300_000:], lam):
        for length in [1, 2, 3, 7, 64, 511, 2048, 8192, 8193, 12_000] + [rng.randrange(0, 9000) for _ in range(24)]:
            start = rng.randrange(0, len(source) - length)
            window = source[start : start + length]
            docs += [window, window.translate(COMPLEMENT)[::-1]]
    got = encode(encoder, docs)
    assert got is not None
    fast = bpe.encode_batch_fast(docs, add_special_tokens=False)
    assert got[0] == [enc.ids for enc in fast]
    assert got[1] == [enc.offsets for enc in bpe.encode_batch(docs, add_special_tokens=False)]
    assert [bpe.encode(d, add_special_tokens=False).ids for d in docs[:40]] == got[0][:40]


def random_bpe(seed: int, alphabet: str, merges: int) -> Tokenizer:
    """A BPE of random merges over `alphabet`: tokens of two existing ones, the same token often made
    by two pairs (``AC+A`` and ``A+CA``) and the merges listed in a shuffled order, so that a merge can
    make a pair whose rank is below its own (the merge loop's expired entries and late pairs)."""
    rng = random.Random(seed)
    vocab = {c: i for i, c in enumerate(alphabet)}
    pairs: list[tuple[str, str]] = []
    tokens = list(alphabet)
    for _ in range(merges):
        a, b = rng.choice(tokens), rng.choice(tokens)
        if len(a) + len(b) > 8 or (a, b) in pairs:
            continue
        pairs.append((a, b))
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
            tokens.append(a + b)
    cut = rng.randrange(len(pairs) + 1)  # keep some of the order of making, shuffle the rest
    tail = pairs[cut:]
    rng.shuffle(tail)
    return Tokenizer(models.BPE(vocab=vocab, merges=pairs[:cut] + tail))


@needs_native
@settings(max_examples=150, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    alphabet=st.sampled_from(["A", "AC", "ACG", "ACGT"]),
    merges=st.integers(0, 40),
    texts=st.lists(st.text(alphabet="ACGT", max_size=60), max_size=6),
    runs=st.lists(st.tuples(st.sampled_from("ACGT"), st.integers(1, 40)), max_size=8),
)
def test_ids_equal_the_library_on_random_bpes(seed, alphabet, merges, texts, runs):
    tok = random_bpe(seed, alphabet, merges)
    encoder, why = ExactBpe.of(tok)
    assert encoder is not None, why
    keep = set(alphabet)
    docs = ["".join(c for c in t if c in keep) for t in texts]
    docs.append("".join(c * n for c, n in runs if c in keep))
    got = encode(encoder, docs)
    assert got is not None
    assert got[0] == [enc.ids for enc in tok.encode_batch_fast(docs, add_special_tokens=False)]


@needs_native
def test_one_token_from_two_pairs_and_an_expired_entry():
    """``ACA`` from (AC, A) at rank 2 and (A, CA) at rank 3; ``CA`` (rank 1) loses to ``AC`` (rank 0)
    on ACA and then its queued entry has expired; a run of A merges from the left."""
    vocab = {"A": 0, "C": 1, "AC": 2, "CA": 3, "ACA": 4, "AA": 5, "AAA": 6}
    merges = [("A", "C"), ("C", "A"), ("AC", "A"), ("A", "CA"), ("A", "A"), ("AA", "A")]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    encoder, _ = ExactBpe.of(tok)
    assert encoder is not None
    docs = ["ACA", "CACA", "ACACA", "AAAAAAA", "CAAAC", "AACAAC"]
    got = encode(encoder, docs)
    assert got is not None and got[0] == [tok.encode(d).ids for d in docs]
    assert got[0][0] == [4]


@needs_native
def test_the_older_merges_format_gives_the_same_table(bpe):
    """Merges as ``"left right"`` lines (tokenizers before 0.20 wrote them so) read as the pairs do."""
    state = json.loads(bpe.to_str())
    state["model"]["merges"] = [" ".join(pair) for pair in state["model"]["merges"]]
    older, _ = ExactBpe.of(Tokenizer.from_str(json.dumps(state)))
    newer, _ = ExactBpe.of(bpe)
    assert older is not None and newer is not None
    assert older.new_ids.tolist() == newer.new_ids.tolist() and older.lefts.tolist() == newer.lefts.tolist()


def declining(bpe: Tokenizer) -> dict[str, Tokenizer]:
    """Tokenizers the C encoder must leave to the library, by why."""
    out = {}
    for name, change in [("dropout", {"dropout": 0.1}), ("ignore_merges", {"ignore_merges": True})]:
        state = json.loads(bpe.to_str())
        state["model"].update(change)
        out[name] = Tokenizer.from_str(json.dumps(state))
    state = json.loads(bpe.to_str())
    state["model"]["vocab"]["QQ"] = state["model"]["vocab"]["AC"]  # two strings, one id
    out["one_id_two_strings"] = Tokenizer.from_str(json.dumps(state))
    letters = Tokenizer.from_str(bpe.to_str())
    letters.add_tokens(["GATTACA"])
    out["added"] = letters
    truncating = Tokenizer.from_str(bpe.to_str())
    truncating.enable_truncation(100)
    out["truncation"] = truncating
    out["wordlevel"] = Tokenizer(models.WordLevel({"A": 0, "[UNK]": 1}, unk_token="[UNK]"))
    return out


@needs_native
def test_what_cannot_be_exact_is_left_to_the_library(bpe):
    for name, tok in declining(bpe).items():
        encoder, why = ExactBpe.of(tok)
        assert encoder is None and why, name
    encoder, _ = ExactBpe.of(bpe)
    assert encoder is not None
    assert encode(encoder, ["ACGT", "ACXGT"]) is None  # X has no token: the library's unknown token


@needs_native
@pytest.mark.parametrize("change", ["none", "pre_tokenizer", "added", "unknown"])
def test_hf_tokenizer_tokens_equal_the_library_path(bpe, genome, change):
    """`HfTokenizer.tokenize`: the same Tokens (ids, first, counts, starts, width) as the library path."""
    tok = Tokenizer.from_str(bpe.to_str())
    if change == "pre_tokenizer":
        tok.pre_tokenizer = pre_tokenizers.Split("N", "isolated")
    if change == "added":
        tok.add_tokens(["GATTACA"])
    hf = HfTokenizer(tok)
    assert (hf.exact is not None) == (change in ("none", "unknown"))
    rng = random.Random(1)
    docs = [
        genome[s : s + n] for s, n in ((rng.randrange(400_000, 600_000), rng.randrange(0, 3000)) for _ in range(12))
    ]
    docs += ["", "a", "ACGTNNNNacgtGATTACA"]
    if change == "unknown":
        docs.append("ACGTR")  # R: the unknown token; the library path names the base
    bases = np.frombuffer("".join(docs).encode(), dtype=np.uint8)
    bounds = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    wheres = [f"doc {i}" for i in range(len(docs))]
    library = HfTokenizer(tok)
    library.exact = None
    if change == "unknown":
        with pytest.raises(Exception, match="R"):
            hf.tokenize(bases, bounds, wheres)
        return
    got, want = hf.tokenize(bases, bounds, wheres), library.tokenize(bases, bounds, wheres)
    at = np.arange(len(want.ids))
    assert got.ids.tolist() == want.ids.tolist()
    assert got.first.tolist() == want.first.tolist() and got.counts.tolist() == want.counts.tolist()
    assert got.token_starts(at).tolist() == want.token_starts(at).tolist()
    assert got.token_ends(at).tolist() == want.token_ends(at).tolist()


@needs_native
def test_the_encoder_travels_to_spawned_workers(bpe):
    hf = HfTokenizer(bpe)
    assert hf.exact is not None
    hf.exact.encode(np.frombuffer(b"ACGT", np.uint8), np.array([0, 4]))
    copy = pickle.loads(pickle.dumps(hf))  # the table is rebuilt where it is used
    assert copy.exact is not None and copy.exact.table is None
    assert encode(copy.exact, ["ACGTACGT"]) == encode(hf.exact, ["ACGTACGT"])


def test_without_the_extension_the_library_encodes_and_a_warning_says_so(bpe, monkeypatch):
    monkeypatch.setattr(exact_bpe, "bpe_native", None)
    exact_bpe.warn_missing.cache_clear()
    with pytest.warns(RuntimeWarning, match="not built"):
        hf = HfTokenizer(bpe)
    assert hf.exact is None
    bases = np.frombuffer(b"ACGTTGCAGATTACA", np.uint8)
    assert (
        hf.tokenize(bases, np.array([0, len(bases)]), ["x"]).ids.tolist()
        == bpe.encode("ACGTTGCAGATTACA", add_special_tokens=False).ids
    )
    exact_bpe.warn_missing.cache_clear()


@needs_native
def test_lists_sorted_when_entries_arrive_out_of_order(bpe, genome, tmp_path):
    """A copy of the extension that sorts every rank's list (entries have so far always arrived in
    position order, so the sorting path would otherwise go untested) gives the same ids."""
    compiler = shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc")
    if compiler is None:
        pytest.skip("no C compiler")
    source = Path(exact_bpe.__file__).with_name("bpe_native.c")
    target = tmp_path / "bpe_native_sorting.so"
    flags = ["-O1", "-shared", "-fPIC", "-DBPE_NATIVE_SORT_ALWAYS", f"-I{sysconfig.get_paths()['include']}"]
    subprocess.run([compiler, *flags, str(source), "-o", str(target)], check=True)
    spec = importlib.util.spec_from_file_location("bpe_native", target)
    assert spec is not None and spec.loader is not None
    sorting = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(sorting)
    rng = random.Random(2)
    docs = [
        genome[s : s + n] for s, n in ((rng.randrange(300_000, 900_000), rng.randrange(0, 9000)) for _ in range(16))
    ]
    cases = [(bpe, docs)] + [(random_bpe(seed, "ACG", 40), ["ACGGACAGCA" * 30, "AAAAAAAAAAAGGG"]) for seed in range(20)]
    for tok, texts in cases:
        encoder, _ = ExactBpe.of(tok)
        assert encoder is not None
        encoder.table = sorting.build(encoder.char_ids, encoder.lefts, encoder.rights, encoder.new_ids)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(exact_bpe, "bpe_native", sorting)
            got = encode(encoder, texts)
        assert got is not None
        assert got[0] == [enc.ids for enc in tok.encode_batch_fast(texts, add_special_tokens=False)]
