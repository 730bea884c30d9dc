"""Degenerate bases and the loss: our label rules against Evo2's, and samples with too few real bases.

The input is the lambda genome cut into pieces with lineage tags (`conftest.lambda_pieces`: some
soft-masked), with N runs, IUPAC codes (R, Y, K, M, S, W, B, D, H, V, either case) and lower-case n
planted, plus pieces that are all or mostly N. The reference rule is written here from what
bionemo-recipes' genomic collator (``GenomicDataCollator``: labels are the input ids, the model
shifts them; ``uppercase_labels`` upper-cases them, then ``mask_degenerate_bases`` sets every label
that is not A/C/G/T/a/c/g/t, or is a control character ``@``/``#``, to -100) and Evo2's Megatron
dataset (``mask_phylogenetic_tags``: a ``|``-delimited lineage tag and its pipes out of the loss)
document, applied to the ids our loader gives the model.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import lambda_pieces, write_fasta

from bionemo_wds import GenomicDataset
from bionemo_wds.load.batch.hf import IGNORE_INDEX, finish
from bionemo_wds.load.batch.labels import LabelRules
from bionemo_wds.load.batch.model_inputs import model_inputs_gather, to_model_inputs
from bionemo_wds.load.batch.packed import packed_inputs_gather, packed_model_inputs, varlen_keys
from bionemo_wds.prepare import PrepareOptions, prepare

IUPAC = "RYKMSWBDHVrykmswbdhv"
PIPE = ord("|")
#: The recipe collator's trained tokens and control characters.
DNA_TOKENS = torch.tensor([ord(c) for c in "ACGTacgt"])
CONTROL = torch.tensor([ord("@"), ord("#")])


def degenerate_pieces(seq: str) -> tuple[dict[str, str], dict[str, str]]:
    """`lambda_pieces` with degenerate bases planted, and two pieces of Ns (all, and 80%)."""
    seqs, tags = lambda_pieces(seq)
    out = {}
    for i, (name, piece) in enumerate(seqs.items()):
        bases = list(piece)
        if i % 4 == 0:  # an N run
            bases[40:110] = "N" * len(bases[40:110])
        elif i % 4 == 1:  # IUPAC codes every 13 bases, both cases
            for j in range(5, len(bases), 13):
                bases[j] = IUPAC[(i + j) % len(IUPAC)]
        elif i % 4 == 2:  # lower-case n and an IUPAC pair
            bases[20:50] = "n" * len(bases[20:50])
            bases[60:62] = "ry"
        out[name] = "".join(bases)
    out["gap"], tags["gap"] = "N" * 300, tags[next(iter(tags))]
    mostly = list("N" * 400)
    mostly[::5] = "ACGTA" * (len(mostly[::5]) // 5)
    out["mostly_n"], tags["mostly_n"] = "".join(mostly), tags[next(iter(tags))]
    return out, tags


@pytest.fixture(scope="module")
def datasets(tmp_path_factory, lambda_seq) -> dict[str, Path]:
    """The pieces prepared with lineage tags, in both layouts (all in train)."""
    seqs, tags = degenerate_pieces(lambda_seq)
    base = tmp_path_factory.mktemp("degenerate")
    fasta = write_fasta(base / "pieces.fa", seqs, tags)
    out = {}
    for layout in ("windows", "sequences"):
        out[layout] = base / layout
        stride = 200 if layout == "windows" else None  # the sequence layout is cut at load
        opts = PrepareOptions(
            seq_length=384, stride=stride, tags="lineage", split=(1, 0, 0), layout=layout, workers=1, progress=False
        )
        prepare([fasta], out[layout], opts)
    return out


def evo2_labels(input_ids: torch.Tensor, uppercase: bool) -> torch.Tensor:
    """The reference (module docstring): the labels a recipe's collator and Evo2's tag mask leave of
    `input_ids`, not shifted (column 0 is never a target: the model shifts)."""
    labels = input_ids.clone()
    for row in range(len(labels)):  # Evo2: each |...| tag, pipes included, out of the loss
        pipes = (input_ids[row] == PIPE).nonzero().flatten().tolist()
        for start, end in zip(pipes[::2], pipes[1::2]):
            labels[row, start : end + 1] = IGNORE_INDEX
    if uppercase:
        lower = (labels >= ord("a")) & (labels <= ord("z"))
        labels = torch.where(lower, labels - 32, labels)
    not_dna = ~torch.isin(labels, DNA_TOKENS) | torch.isin(labels, CONTROL)
    labels[not_dna] = IGNORE_INDEX
    labels[:, 0] = IGNORE_INDEX
    return labels


def passes(root: Path, **options) -> list[dict[str, torch.Tensor]]:
    ds = GenomicDataset(str(root), "train", micro_batch_size=8, rc_prob=0.5, seed=3, **options)
    return list(ds)


@pytest.mark.parametrize(
    ("fold_case", "uppercase", "tags"),
    [(False, False, True), (False, True, True), (False, True, False), (True, False, False)],
)
def test_our_rule_is_evo2s_on_n_runs_iupac_codes_lower_case_and_tags(datasets, fold_case, uppercase, tags):
    """Every training window of an epoch: the ``hf`` labels equal the reference, and the default
    batch trains exactly those labels (``loss_mask`` > 0 one column before, the same label). With
    tags the rows of a batch differ in tag length (the per-row layout and the rules after it);
    without, the whole-batch layout applies the rules itself."""
    options = {"fold_case": fold_case, "uppercase_labels": uppercase, "control_tags": tags}
    hf = passes(datasets["windows"], batch_format="hf", **options)
    megatron = passes(datasets["windows"], **options)
    seen = {"N": 0, "iupac": 0, "lower": 0, "tags": 0}
    for h, m in zip(hf, megatron, strict=True):
        ids = h["input_ids"]
        assert torch.equal(ids, m["tokens"])
        ref = evo2_labels(ids, uppercase)
        assert torch.equal(h["labels"], ref)
        trained = m["loss_mask"][:, :-1] > 0
        assert torch.equal(trained, ref[:, 1:] != IGNORE_INDEX)
        assert torch.equal(m["labels"][:, :-1][trained], ref[:, 1:][trained])
        seen["N"] += int((ids == ord("N")).sum() + (ids == ord("n")).sum())
        seen["iupac"] += int(torch.isin(ids, torch.tensor([ord(c) for c in IUPAC])).sum())
        seen["lower"] += int(torch.isin(ids[ref != IGNORE_INDEX], torch.tensor([ord(c) for c in "acgt"])).sum())
        seen["tags"] += int((ids == PIPE).sum())
    assert seen["N"] > 500 and seen["iupac"] > 100 and (seen["tags"] > 100) == tags
    assert (seen["lower"] > 500) == (not fold_case)  # soft-masked bases trained (lower case in the tokens)


@pytest.mark.parametrize(("layout", "tags"), [("windows", False), ("sequences", False), ("sequences", True)])
@pytest.mark.parametrize(
    ("fold_case", "uppercase", "weight", "fmt"),
    [
        (True, False, None, "megatron"),
        (False, True, 0.1, "megatron"),
        (False, True, 0.0, "hf"),
        (True, False, None, "hf"),
    ],
)
def test_the_rules_laid_out_on_a_cpu_are_the_rules_applied_after(
    datasets, layout, tags, fold_case, uppercase, weight, fmt
):
    """The CPU builders' own form of the rules (windows without tags: the whole-batch layout; packed,
    with tags or without) equals the layout without rules with `LabelRules.apply` and
    `hf.from_megatron` after it, as an accelerator runs them."""
    rules = LabelRules(uppercase_labels=uppercase)
    options = {"control_tags": tags, "rc_prob": 0.5, "seed": 2, "model_inputs": False}
    if layout == "sequences":
        options |= {"pack": True, "seq_length": 384}
    ds = GenomicDataset(str(datasets[layout]), "train", micro_batch_size=8, **options)
    dropped = 0
    for compact in ds:
        if layout == "sequences":
            laid = packed_model_inputs(compact, fold_case, weight, rules, fmt)
            after = finish(packed_inputs_gather(compact, fold_case, weight), rules, fmt == "hf", packed=True)
            after |= varlen_keys(after, compact) if fmt == "hf" else {}
        else:
            laid = to_model_inputs(compact, 384, False, fold_case, weight, rules, fmt)
            after = model_inputs_gather(compact, 384, False, fold_case, weight, rules, fmt == "hf")
        for key, value in after.items():
            assert torch.equal(torch.as_tensor(laid[key]), torch.as_tensor(value)), key
        dropped += int((laid["labels"] == IGNORE_INDEX).sum()) if fmt == "hf" else int((laid["loss_mask"] == 0).sum())
    assert dropped


def test_without_the_mask_degenerate_bases_are_trained(datasets):
    """``mask_degenerate_bases=False`` is the loss of before: a label N weighs 1."""
    (batch,) = [b for b in passes(datasets["windows"], mask_degenerate_bases=False)][:1]
    n_labels = (batch["labels"] == ord("N")) & (batch["loss_mask"] > 0)
    assert n_labels.any()
    masked = passes(datasets["windows"])[0]
    assert not ((masked["labels"] == ord("N")) & (masked["loss_mask"] > 0)).any()


def real_fraction(tokens: np.ndarray) -> float:
    return float(np.isin(tokens, np.frombuffer(b"ACGTacgt", np.uint8)).mean())


def test_windows_with_too_few_real_bases_train_nothing_and_keep_their_place(datasets):
    """min_real_fraction 0.5: the windows of the gap (all N) and of the mostly-N piece have every
    label out of the loss; every other window keeps its loss mask; the batches, their count and
    their windows are those of the run without it."""
    root = datasets["windows"]
    ds = GenomicDataset(str(root), "train", micro_batch_size=8, seed=3, model_inputs=False, min_real_fraction=0.5)
    plain = GenomicDataset(str(root), "train", micro_batch_size=8, seed=3, model_inputs=False)
    compacts = list(ds)
    assert len(compacts) == len(plain) == len(list(plain))
    left_out = kept = 0
    for compact in compacts:
        bases, lengths = compact["bases"].numpy(), compact["lengths"].numpy()
        reference = plain.model_inputs(dict(compact))["loss_mask"]
        mask = ds.model_inputs(dict(compact))["loss_mask"]
        for row, n in enumerate(lengths.tolist()):
            if real_fraction(bases[row, :n]) < 0.5:
                assert not mask[row].any(), compact["keys"][row]
                left_out += 1
            else:
                assert torch.equal(mask[row], reference[row])
                kept += 1
    assert left_out >= 2 and kept > 100


def test_a_packed_document_with_too_few_real_bases_is_left_out_alone(datasets):
    """Packed: the mostly-N documents lose their loss, the other documents of the same rows keep theirs."""
    options = {"pack": True, "seq_length": 384, "mask_degenerate_bases": False}
    plain = passes(datasets["sequences"], **options)
    strict = passes(datasets["sequences"], min_real_fraction=0.5, **options)
    mixed_rows = 0
    for p, s in zip(plain, strict, strict=True):
        assert torch.equal(p["tokens"], s["tokens"])
        docs = torch.cumsum(p["position_ids"] == 0, dim=1)
        for row in range(len(docs)):
            fates = set()
            for doc in docs[row].unique().tolist():
                cols = (docs[row] == doc) & (p["loss_mask"][row] > 0)
                if not cols.any():
                    continue
                labels = p["labels"][row][cols].numpy()
                short = real_fraction(labels) < 0.5
                want = torch.zeros(int(cols.sum())) if short else p["loss_mask"][row][cols]
                assert torch.equal(s["loss_mask"][row][cols], want)
                fates.add(short)
            mixed_rows += fates == {True, False}
    assert mixed_rows >= 1


@pytest.mark.parametrize("bad", [-0.1, 1.5, "half", True])
def test_a_bad_fraction_is_refused(datasets, bad):
    with pytest.raises(ValueError, match="min_real_fraction"):
        GenomicDataset(str(datasets["windows"]), "train", min_real_fraction=bad)


def test_upper_case_labels_with_folded_case_warn_that_they_change_nothing(datasets):
    """fold_case=True gives the model upper-case ids, and the labels are those ids: said once, when
    the dataset opens; with fold_case=False nothing is said."""
    with pytest.warns(UserWarning, match="uppercase_labels=True has no effect"):
        GenomicDataset(str(datasets["windows"]), "train", uppercase_labels=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GenomicDataset(str(datasets["windows"]), "train", uppercase_labels=True, fold_case=False)
