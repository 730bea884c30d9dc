"""The split's seed (``--split-rule seeded``, `splits.stratified_split`): the seed chooses which
sequences go where, each split keeps the corpus's length mix, and a dataset split by the rule
before it (``longest-first``) keeps the split its manifest records when `prepare` runs into it again.

Planning by property tests and a chance-level overlap measure on synthetic lengths; then `prepare`
of the bundled 119-contig Klebsiella assembly with seeds 1, 2, 3 and one or two workers, and re-runs
of a dataset as the rule before wrote it.
"""

from __future__ import annotations

import itertools
import json
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
from conftest import KLEBSIELLA, main_here, read_fasta, refused, split_seq_ids, tool_module, tree_bytes, write_fasta
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.core.seeds import identity_keys
from bionemo_wds.format import read_manifest
from bionemo_wds.format.manifest import dumps_manifest
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.outdir import PLAN_NAME
from bionemo_wds.prepare.report import inspect_text
from bionemo_wds.prepare.splits import (
    SPLIT_NAMES,
    grouped_split,
    length_buckets,
    seeded_order,
    stratified_split,
)

RATIOS = (0.8, 0.1, 0.1)

# ---------------------------------------------------------------------------------------------
# planning


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300_000), min_size=3, max_size=150, unique=True),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_a_sequence_goes_where_its_id_draws_whatever_its_position(lengths, seed, data):
    """Keyed by (seed, id): the inputs in another order give every sequence the same split.
    (Distinct lengths: with equal ones, which sequence fills an empty split is the first found.)"""
    ids = [f"contig_{i}" for i in range(len(lengths))]
    order = data.draw(st.permutations(range(len(lengths))))
    lengths = np.asarray(lengths)
    first = stratified_split(lengths, RATIOS, seed, ids=ids)
    moved = stratified_split(lengths[order], RATIOS, seed, ids=[ids[i] for i in order])
    assert moved.tolist() == first[order].tolist()


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300_000), min_size=1, max_size=200),
    seed=st.integers(0, 2**32 - 1),
    size=st.integers(2, 40),
)
def test_strata_run_longest_first_each_in_its_seeded_key_order(lengths, seed, size):
    lengths = np.asarray(lengths)
    keys = identity_keys(seed, "split", [str(i) for i in range(len(lengths))])
    order = seeded_order(lengths, keys, size)
    assert sorted(order.tolist()) == list(range(len(lengths)))
    strata = [order[i : i + size] for i in range(0, len(order), size)]
    for longer, shorter in itertools.pairwise(strata):
        assert lengths[longer].min() >= lengths[shorter].max()
    for stratum in strata:
        assert (np.diff(keys[stratum].astype(np.float64)) >= 0).all()


@settings(max_examples=40, deadline=None)
@given(
    n_groups=st.integers(3, 60),
    seed=st.integers(0, 2**32 - 1),
    data=st.data(),
)
def test_a_group_goes_where_its_name_draws_and_never_straddles(n_groups, seed, data):
    """Groups keyed by name: renumbering them (names follow) changes no row's split; a group is whole."""
    rows = data.draw(st.lists(st.integers(0, n_groups - 1), min_size=n_groups, max_size=150))
    groups = np.asarray(list(range(n_groups)) + rows)
    lengths = np.asarray(data.draw(st.lists(st.integers(1, 200_000), min_size=len(groups), max_size=len(groups))))
    names = [f"genome_{g}" for g in range(n_groups)]
    split = grouped_split(groups, lengths, RATIOS, seed, names=names)
    for g in range(n_groups):
        assert len(set(split[groups == g].tolist())) == 1
    renumber = np.asarray(data.draw(st.permutations(range(n_groups))))
    renamed = [""] * n_groups
    for old, new in enumerate(renumber.tolist()):
        renamed[new] = names[old]
    totals = np.bincount(groups, weights=lengths)
    if len(set(totals.tolist())) == n_groups:  # else which equal group fills an empty split is the first found
        assert grouped_split(renumber[groups], lengths, RATIOS, seed, names=renamed).tolist() == split.tolist()


def split_seed_tool():
    """tools/split_seed.py, the measurement the prepare guide quotes."""
    return tool_module("split_seed")


def test_two_seeds_share_what_chance_gives():
    """2,000 contigs of log-uniform lengths (200 bp - 500 kb), 12 seeds: two seeds' val and test sets
    share about the share of all sequences such a set holds, as random draws would, and each split
    holds its ratio of every bucket's bases to within 0.01; the rule before shared nearly all (the
    seed only ordered sequences of equal length)."""
    tool = split_seed_tool()
    rng = np.random.default_rng(7)
    lengths = np.exp(rng.uniform(np.log(200), np.log(500_000), 2000)).astype(np.int64)
    ids = [f"contig_{i}" for i in range(len(lengths))]
    seeded = tool.measure(ids, lengths, RATIOS, range(12), "seeded")
    before = tool.measure(ids, lengths, RATIOS, range(12), "longest-first")
    for split in ("val", "test"):
        chance = seeded[f"{split}_chance"]
        assert 0.05 < chance < 0.15
        assert abs(seeded[f"{split}_shared"] - chance) < 0.03, seeded
        assert before[f"{split}_shared"] > 0.9, before
    assert seeded["worst_base_share"] < 0.01, seeded


def test_the_tool_reads_the_fasta_and_prints_both_rules(capsys):
    tool = split_seed_tool()
    ids, lengths = tool.fasta_lengths(KLEBSIELLA)
    assert len(ids) == 119 and lengths.sum() == sum(map(len, read_fasta(KLEBSIELLA).values()))
    tool.main([str(KLEBSIELLA), "--seeds", "3"])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "119 sequences, seeds 1-3, --split 0.8,0.1,0.1" and len(out) == 7
    assert out[1].startswith("seeded        val   two seeds share") and "(chance 0." in out[1]


# ---------------------------------------------------------------------------------------------
# prepare of the Klebsiella assembly


def quick(**kw) -> PrepareOptions:
    return PrepareOptions(progress=False, **kw)


@pytest.fixture(scope="module")
def kleb(tmp_path_factory) -> dict[tuple[int, int], Path]:
    """The assembly prepared with seeds 1, 2, 3 by one worker, and seed 1 by two: (seed, workers) -> out."""
    root = tmp_path_factory.mktemp("split_seed")
    runs = {}
    for seed, workers in ((1, 1), (2, 1), (3, 1), (1, 2)):
        out = root / f"seed{seed}_workers{workers}"
        prepare([KLEBSIELLA], out, quick(seed=seed, workers=workers))
        runs[seed, workers] = out
    return runs


def members(out: Path) -> dict[str, frozenset[str]]:
    return {split: frozenset(split_seq_ids(out, split)) for split in read_manifest(out).splits}


def test_seeds_1_2_3_give_different_val_and_test_sets(kleb):
    by_seed = [members(kleb[seed, 1]) for seed in (1, 2, 3)]
    for split in ("val", "test"):
        for a, b in itertools.combinations(by_seed, 2):
            assert len(a[split] & b[split]) <= len(a[split]) // 2, (split, sorted(a[split] & b[split]))
    assert all(read_manifest(kleb[seed, 1]).params.split_rule == "seeded" for seed in (1, 2, 3))
    assert "; split by the seeded rule, seed 2\n" in inspect_text(kleb[2, 1])


def test_each_split_keeps_the_corpus_length_mix(kleb):
    """Per length bucket, each split holds its ratio of the bucket's bases to within the bucket's
    longest sequence: the deficit rule gives a split at most one sequence beyond its share, and the
    strata, dealt longest first, leave the shortest sequences to even out the rest (200 seeds on this
    assembly stay within a quarter of it). And every split holds sequences of every bucket."""
    lengths = {name: len(seq) for name, seq in read_fasta(KLEBSIELLA).items()}
    names = list(lengths)
    length = np.asarray([lengths[n] for n in names])
    bucket = length_buckets(length)
    for seed in (1, 2, 3):
        where = {name: split for split, ids in members(kleb[seed, 1]).items() for name in ids}
        split = np.asarray([SPLIT_NAMES.index(where[n]) for n in names])
        for b in np.unique(bucket).tolist():
            in_b = bucket == b
            total, longest = length[in_b].sum(), length[in_b].max()
            for j, ratio in enumerate(RATIOS):
                share = length[in_b & (split == j)].sum() / total
                assert abs(share - ratio) <= longest / total, (seed, b, j, share)
                assert (in_b & (split == j)).any(), (seed, b, j)


def test_the_same_seed_gives_the_same_split_at_any_worker_count_or_input_order(kleb, tmp_path):
    assert members(kleb[1, 2]) == members(kleb[1, 1])
    assert (kleb[1, 2] / "sequences.tsv").read_bytes() == (kleb[1, 1] / "sequences.tsv").read_bytes()
    seqs = read_fasta(KLEBSIELLA)
    backwards = write_fasta(tmp_path / "backwards.fa", dict(reversed(seqs.items())))
    prepare([backwards], tmp_path / "out", quick(seed=1))
    assert members(tmp_path / "out") == members(kleb[1, 1])


# ---------------------------------------------------------------------------------------------
# a dataset split by the rule before `seeded`


def as_before_split_rule(out: Path) -> None:
    """Make `out` (prepared with --split-rule longest-first) what a version before --split-rule
    wrote: the same shards and split, a request and params that name no rule."""
    manifest = json.loads((out / "manifest.json").read_text())
    del manifest["request"]["split_rule"], manifest["params"]["split_rule"]
    (out / "manifest.json").write_text(dumps_manifest(manifest))


@pytest.fixture(scope="module")
def before(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("before") / "kleb"
    prepare([KLEBSIELLA], out, quick(seed=1, split_rule="longest-first"))
    as_before_split_rule(out)
    return out


def copy_of(dataset: Path, tmp_path: Path) -> Path:
    out = tmp_path / "kleb"
    shutil.copytree(dataset, out)
    return out


def test_a_rerun_keeps_the_recorded_split_and_says_how_to_change_it(before, tmp_path, capsys):
    out = copy_of(before, tmp_path)
    kept = tree_bytes(out)
    with pytest.warns(UserWarning) as warned:
        done = main_here(capsys, "prepare", KLEBSIELLA, "--out", out, "--seed", "1", "-q")
    assert done.returncode == 0, done.stderr
    assert tree_bytes(out) == kept
    (line,) = [str(w.message) for w in warned if "split" in str(w.message)]
    assert "\n" not in line and "longest-first" in line and "keeping its split" in line
    assert "--split-rule longest-first" in line and "--split-rule seeded --overwrite" in line
    # the rule named: no note, nothing changed
    with warnings.catch_warnings(record=True) as quiet:
        warnings.simplefilter("always")
        done = main_here(capsys, "prepare", KLEBSIELLA, "--out", out, "--seed", "1", "--split-rule", "longest-first")
    assert done.returncode == 0 and tree_bytes(out) == kept
    assert not [w for w in quiet if "split" in str(w.message)]


def test_the_new_rule_into_an_old_dataset_needs_overwrite(before, tmp_path, capsys):
    out = copy_of(before, tmp_path)
    argv = ["prepare", KLEBSIELLA, "--out", out, "--seed", "1", "-q", "--split-rule", "seeded"]
    refused(main_here(capsys, *argv), "split_rule: 'longest-first' -> 'seeded'", "--overwrite")
    assert main_here(capsys, *argv, "--overwrite").returncode == 0
    manifest = read_manifest(out)
    assert manifest.params.split_rule == "seeded" and manifest.request["split_rule"] == "seeded"
    assert members(out)["val"] != members(before)["val"]


def test_an_interrupted_old_run_resumes_with_its_own_split(before, tmp_path):
    """A run of the version before, killed after its plan and some shards: finished by the rule it began."""
    out = copy_of(before, tmp_path)
    manifest = json.loads((out / "manifest.json").read_text())
    (out / PLAN_NAME).write_text(json.dumps({"request": manifest["request"]}))
    (out / "manifest.json").unlink()
    (out / "sequences.tsv").unlink()
    (out / manifest["splits"]["val"]["shards"][0]["path"]).unlink()
    with pytest.warns(UserWarning, match="keeping its split"):
        result = prepare([KLEBSIELLA], out, quick(seed=1))
    assert result.status == "resumed" and result.shards_written == 1
    assert result.manifest.params.split_rule == "longest-first"
    assert "split by the" not in inspect_text(before)  # a manifest of before names no rule
    assert members(out) == members(before)
    shards = {k: v for k, v in tree_bytes(out).items() if k.endswith(".tar")}
    assert shards == {k: v for k, v in tree_bytes(before).items() if k.endswith(".tar")}


def test_another_change_to_an_old_dataset_is_refused_naming_both(before, tmp_path, capsys):
    out = copy_of(before, tmp_path)
    refused(
        main_here(capsys, "prepare", KLEBSIELLA, "--out", out, "--seed", "2", "-q"),
        "seed: 1 -> 2",
        "split_rule: 'longest-first' -> 'seeded'",
    )
