"""Lineage tag dropout (Evo2's random_lineage_dropout): rate, seeding by (seed, epoch, key), resume,
training only, and tags never in the loss.

The dataset is the real lambda genome cut into ~130 records, each with an Evo2 lineage header
(`conftest.lambda_pieces`), prepared with ``tags="lineage"``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from bionemo_wds import GenomicIterableDataset
from bionemo_wds.compat.stages import dropped_tag
from bionemo_wds.core.lineage import DROPPED, RANKS, parse_lineage
from bionemo_wds.core.seeds import tag_salt
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.prepare import PrepareOptions, prepare

P = 0.3
SEQ_LENGTH = 384


@pytest.fixture(scope="module")
def tagged(lambda_lineage_fa, tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """(root, seq_id -> lineage tag) of the lambda pieces prepared with lineage tags."""
    fasta, _, tags = lambda_lineage_fa
    out = tmp_path_factory.mktemp("tag_dropout") / "out"
    opts = PrepareOptions(seq_length=SEQ_LENGTH, stride=150, tags="lineage", samples_per_shard=64, progress=False)
    prepare([fasta], out, opts)
    return out, tags


def module(root: Path, **kw) -> GenomicWebDataModule:
    dm = GenomicWebDataModule(str(root), **{"micro_batch_size": 8, "seed": 11, "tag_dropout": P, **kw})
    dm.setup("fit")
    return dm


def row_tags(batch) -> dict[str, str]:
    """key -> the control tag of each real (non-filler) row of a compact batch."""
    out = {}
    for i, key in enumerate(batch["keys"]):
        if key:
            out[key] = batch["tags"][i, : int(batch["tag_lengths"][i])].numpy().tobytes().decode("ascii")
    return out


def epoch_tags(dm: GenomicWebDataModule, epoch: int = 0) -> dict[str, str]:
    dm.set_epoch(epoch)
    return {k: t for b in dm.train_dataloader() for k, t in row_tags(b).items()}


def count_drops(tags: dict[str, str], original: dict[str, str]) -> tuple[int, int]:
    """(ranks replaced by None, ranks) over windows; every rank not replaced must be the original's."""
    dropped = total = 0
    for key, tag in tags.items():
        ranks, orig = parse_lineage(tag), parse_lineage(original[key.rsplit("/", 1)[0]])
        assert ranks is not None and orig is not None and [r for r, _ in ranks] == [r for r, _ in orig], key
        for (_, value), (_, before) in zip(ranks, orig):
            if value != before:
                assert value == DROPPED, (key, tag)
                dropped += 1
        total += len(orig)
    return dropped, total


def within_binomial(k: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    return abs(k - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


def test_dropout_rate_is_binomial_around_p(tagged):
    """Over an epoch's windows, the share of ranks turned into None is p within 5 binomial sigmas."""
    root, original = tagged
    tags = epoch_tags(module(root))
    dropped, total = count_drops(tags, original)
    assert total > 1000
    assert within_binomial(dropped, total, P), (dropped, total)
    # per rank too (each rank independently)
    for index, rank in enumerate(RANKS[:6]):
        per = [
            (parse_lineage(t)[index][1], parse_lineage(original[k.rsplit("/", 1)[0]])[index][1])
            for k, t in tags.items()
        ]
        n_dropped = sum(v == DROPPED and v != o for v, o in per)
        assert within_binomial(n_dropped, len(per), P), (rank, n_dropped, len(per))


def test_zero_dropout_keeps_every_tag(tagged):
    """tag_dropout=0 (the default) delivers the prepared tags unchanged."""
    root, original = tagged
    tags = epoch_tags(module(root, tag_dropout=0.0))
    assert tags and all(t == original[k.rsplit("/", 1)[0]] for k, t in tags.items())


def test_same_seed_same_drops_other_epoch_or_seed_other_drops(tagged):
    """A second module with the same seed gives identical tags per key; epoch 1 or another seed differ."""
    root, _ = tagged
    first = epoch_tags(module(root))
    assert epoch_tags(module(root, num_workers=2)) == first
    for other in (epoch_tags(module(root), epoch=1), epoch_tags(module(root, seed=12))):
        common = set(other) & set(first)  # an exact epoch leaves out a few windows, others per epoch
        assert len(common) > 200
        changed = sum(other[k] != first[k] for k in common)
        # P(a 7-rank tag is the same in two independent draws) = (1 - 2 p (1 - p))^7 ~ 0.02
        assert changed > 0.8 * len(common)


def test_tags_stay_out_of_the_loss(tagged):
    """With dropout the model inputs carry the dropped tag between BOS and SEP, weighted 0 in loss_mask."""
    root, _ = tagged
    dm = module(root, soft_mask_weight=0.1)
    dm.set_epoch(0)
    rows = 0
    for b in dm.train_dataloader():
        inputs = dm.model_inputs(b)
        for i in range(len(b["keys"])):
            t, n = int(b["tag_lengths"][i]), int(b["lengths"][i])
            p = t + 2
            assert inputs["tokens"][i, 1 : 1 + t].tolist() == b["tags"][i, :t].tolist()
            assert int(inputs["tokens"][i, p - 1]) == 3  # SEP
            mask = inputs["loss_mask"][i]
            assert not mask[: p - 1].any() and not mask[p - 1 + n :].any()
            assert (mask[p - 1 : p - 1 + n] > 0).all()
            rows += 1
    assert rows > 200


def test_validation_tags_are_never_dropped(tagged):
    """Even at tag_dropout=1 val windows keep their prepared tags (while every train rank is None)."""
    root, original = tagged
    dm = module(root, tag_dropout=1.0)
    val = {k: t for b in dm.val_dataloader() for k, t in row_tags(b).items()}
    assert len(val) > 10
    assert all(t == original[k.rsplit("/", 1)[0]] for k, t in val.items())
    train = epoch_tags(dm)
    assert all(all(v == DROPPED for _, v in parse_lineage(t)) for t in train.values())


def test_resume_mid_epoch_reproduces_the_rest_of_the_epochs_tags(tagged):
    """state_dict after k batches, loaded into a new module: the remaining batches carry the same tags."""
    root, _ = tagged
    full = module(root)
    full.set_epoch(2)
    whole = [row_tags(b) for b in full.train_dataloader()]
    first = module(root)
    first.set_epoch(2)
    it = iter(first.train_dataloader())
    taken = [row_tags(next(it)) for _ in range(5)]
    state = first.state_dict()
    assert state["epoch"] == 2
    again = module(root, num_workers=2)
    again.load_state_dict(state)
    rest = [row_tags(b) for b in again.train_dataloader()]
    assert taken + rest == whole
    assert len(rest) == len(whole) - 5 > 0


# --- dropped_tag -----------------------------------------------------------------------------------

LINEAGE = b"|d__Bacteria;p__Pseudomonadota;c__Gammaproteobacteria;o__Enterobacterales;f__Enterobacteriaceae;g__Escherichia;s__Escherichia coli|"  # noqa: E501
KEYS = [f"contig{i}/{w}" for i in range(40) for w in range(25)]


def test_dropped_tag_edges():
    """p=0 keeps any tag; p=1 turns every lineage rank into None and drops other tags whole; b'' stays b''."""
    salt = tag_salt(42, 0)
    for key in KEYS[:50]:
        assert dropped_tag(LINEAGE, key, 0.0, salt) == LINEAGE
        assert dropped_tag(b"<ctrl_7>", key, 0.0, salt) == b"<ctrl_7>"
        assert dropped_tag(LINEAGE, key, 1.0, salt) == b"|d__None;p__None;c__None;o__None;f__None;g__None;s__None|"
        assert dropped_tag(b"<ctrl_7>", key, 1.0, salt) == b""
        assert dropped_tag(b"", key, 1.0, salt) == b""
    # a shorter lineage keeps its depth
    assert dropped_tag(b"|d__Bacteria;p__Bacillota|", "k/0", 1.0, salt) == b"|d__None;p__None|"


def test_non_lineage_tags_are_dropped_whole_at_rate_p():
    """A tag that is no lineage is either kept or emptied, about p of the time."""
    salt = tag_salt(1, 3)
    out = [dropped_tag(b"<ctrl_chr2>", k, P, salt) for k in KEYS]
    assert set(out) == {b"", b"<ctrl_chr2>"}
    assert within_binomial(out.count(b""), len(out), P)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(KEYS), st.integers(0, 2**64 - 1), st.sampled_from([0.1, P, 0.5, 0.9]))
def test_dropped_tag_is_a_pure_function_of_key_and_salt(key, salt, p):
    """Same (tag, key, p, salt) -> same result; ranks kept are the original's, dropped ones None."""
    once = dropped_tag(LINEAGE, key, p, salt)
    assert once == dropped_tag(LINEAGE, key, p, salt)
    ranks, orig = parse_lineage(once.decode()), parse_lineage(LINEAGE.decode())
    assert [r for r, _ in ranks] == [r for r, _ in orig]
    assert all(v in (o, DROPPED) for (_, v), (_, o) in zip(ranks, orig))


def test_dropped_tag_depends_on_key_and_salt():
    """Different keys and different salts (epochs) draw different drops."""
    a = [dropped_tag(LINEAGE, k, P, tag_salt(42, 0)) for k in KEYS]
    b = [dropped_tag(LINEAGE, k, P, tag_salt(42, 1)) for k in KEYS]
    assert len(set(a)) > 20
    assert sum(x != y for x, y in zip(a, b)) > 0.8 * len(KEYS)


@pytest.mark.parametrize("workers", [0, 2])
def test_iterable_dataset_drops_the_same_tags(tagged, workers):
    """GenomicIterableDataset with tag_dropout gives every window the data module's tag (same seed and epoch)."""
    root, _ = tagged
    expected = epoch_tags(module(root), epoch=1)
    ds = GenomicIterableDataset(str(root), "train", 8, seed=11, tag_dropout=P, model_inputs=False)
    ds.set_epoch(1)
    got = {k: t for b in DataLoader(ds, batch_size=None, num_workers=workers) for k, t in row_tags(b).items()}
    assert got == expected
