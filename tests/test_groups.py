"""`--group-by` (`prepare/groups.py`) and the grouped split (`splits.grouped_split`).

Each rule on realistic ids (sharded-Eden contig ids, the SPAdes contig names of the bundled
Klebsiella assembly, a TSV table, an MMseqs2 cluster table); `grouped_split` by property tests; and
end to end through `bionemo-wds prepare --group-by` on the 119-contig Klebsiella assembly, reading
the manifest's per-split `seq_ids`.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from conftest import KLEBSIELLA, LAMBDA, read_fasta, split_seq_ids
from hypothesis import given, settings
from hypothesis import strategies as st

from bionemo_wds.cli.main import main
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import read_manifest
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.groups import (
    apply_groups,
    group_names,
    group_rule_problem,
    read_group_tsv,
    sample_id,
)
from bionemo_wds.prepare.splits import SPLIT_NAMES, grouped_split, stratified_split

EDEN_IDS = [
    "BCR__ECT-SAMPLE1__CT1-1",
    "BCR__ECT-SAMPLE1__CT1-2",
    "BCR__ECT-SAMPLE1__CT7-13",
    "EUK__ECT-SAMPLE2__CT1-1",
    "ARC__ECT-SAMPLE10-2__CT3-4",
    "BCR__ECT-SAMPLE10-2__CT3-5",
]


@pytest.fixture(scope="module")
def kleb_ids(klebsiella_seqs) -> list[str]:
    ids = list(klebsiella_seqs)
    assert len(ids) == 119 and ids[0] == "NODE_21_length_101449_cov_1.08169_ID_5337"
    return ids


def node(seq_id: str) -> int:
    return int(seq_id.split("_")[1])


def catalog(names: list[str], lengths: list[int] | None = None, seq: list[int] | None = None) -> Catalog:
    """A catalog of `names` without a source (grouping reads no bases)."""
    lengths = lengths if lengths is not None else [1000] * len(names)
    return Catalog(
        None,  # type: ignore[arg-type]
        list(names),
        [""] * len(names),
        np.asarray(lengths, dtype=np.int64),
        None if seq is None else np.asarray(seq, dtype=np.int64),
    )


def members(cat: Catalog) -> dict[str, set[str]]:
    """group name -> the ids of its rows."""
    assert cat.groups is not None and cat.group_names is not None
    out: dict[str, set[str]] = {}
    for name, g in zip(cat.names, cat.groups.tolist()):
        out.setdefault(cat.group_names[g], set()).add(name)
    return out


# ---------------------------------------------------------------------------------------------
# the rules


def test_sample_id_of_sharded_eden_contig_ids():
    assert [sample_id(i) for i in EDEN_IDS] == ["SAMPLE1", "SAMPLE1", "SAMPLE1", "SAMPLE2", "SAMPLE10.2", "SAMPLE10.2"]
    assert sample_id("NODE_21_length_101449_cov_1.08169_ID_5337") is None
    assert sample_id("BCR__SAMPLE1__CT1") is None  # no '-' in the sample field: no sample id


def test_sample_id_rule_groups_contigs_of_one_sample():
    with pytest.warns(UserWarning, match="leaves 1 of 7 sequences ungrouped"):
        cat = apply_groups(catalog([*EDEN_IDS, "unrelated_contig"]), "sample-id")
    assert members(cat) == {
        "SAMPLE1": set(EDEN_IDS[:3]),
        "SAMPLE2": {EDEN_IDS[3]},
        "SAMPLE10.2": set(EDEN_IDS[4:]),
        "unrelated_contig": {"unrelated_contig"},  # ungrouped: a group of its own
    }
    assert cat.notes["group_by"] == {"rule": "sample-id", "groups": 4, "ungrouped_sequences": 1}


def test_regex_rule_takes_the_first_group_or_the_whole_match(kleb_ids):
    by_digit = dict(zip(kleb_ids, group_names(kleb_ids, r"regex:^NODE_\d*(\d)_")))
    assert all(by_digit[i] == str(node(i) % 10) for i in kleb_ids)
    whole = group_names(["NODE_21_length_101449_cov_1.08169_ID_5337", "x"], r"regex:cov_\d+")
    assert whole == ["cov_1", None]
    # search, not match: the pattern may sit anywhere in the id
    assert group_names(["NODE_3_length_9_cov_2.5_ID_77"], r"regex:ID_(\d+)") == ["77"]


def test_regex_rule_on_the_klebsiella_contigs_makes_ten_groups(kleb_ids):
    cat = apply_groups(catalog(kleb_ids), r"regex:^NODE_\d*(\d)_")
    groups = members(cat)
    assert sorted(groups) == [str(d) for d in range(10)]
    assert all(node(i) % 10 == int(g) for g, ids in groups.items() for i in ids)
    assert cat.notes["group_by"] == {"rule": r"regex:^NODE_\d*(\d)_", "groups": 10, "ungrouped_sequences": 0}


def test_tsv_rule(tmp_path, kleb_ids):
    table = tmp_path / "groups.tsv"
    lines = ["# seq_id<TAB>group", ""] + [f"{i}\tgenome_{node(i) % 4}" for i in kleb_ids]
    table.write_text("\r\n".join(lines) + "\r\n")  # CRLF and comments are fine
    assert read_group_tsv(str(table)) == {i: f"genome_{node(i) % 4}" for i in kleb_ids}
    cat = apply_groups(catalog(kleb_ids), f"tsv:{table}")
    assert {g: len(ids) for g, ids in members(cat).items()} == {
        f"genome_{r}": sum(node(i) % 4 == r for i in kleb_ids) for r in range(4)
    }


def test_mmseqs_rule_groups_each_member_with_its_representative(tmp_path, kleb_ids):
    reps = kleb_ids[:5]
    clusters = {rep: [rep] for rep in reps}
    for n, i in enumerate(kleb_ids[5:]):
        clusters[reps[n % 5]].append(i)
    table = tmp_path / "clu_cluster.tsv"  # `mmseqs createtsv` output: representative<TAB>member, rep first
    table.write_text("".join(f"{rep}\t{m}\n" for rep, ms in clusters.items() for m in ms))
    cat = apply_groups(catalog(kleb_ids), f"mmseqs:{table}")
    assert members(cat) == {rep: set(ms) for rep, ms in clusters.items()}
    assert cat.notes["group_by"]["groups"] == 5


def test_mmseqs_member_in_two_clusters_and_malformed_lines_are_named(tmp_path):
    table = tmp_path / "clu.tsv"
    table.write_text("r1\tr1\nr1\tm1\nr2\tr2\nr2\tm1\n")
    with pytest.raises(BadInputError, match=r"clu.tsv line 4: sequence 'm1' is in two groups \('r1' and 'r2'\)"):
        read_group_tsv(str(table), member_first=False)
    table.write_text("r1\tr1\nr1 m1\n")
    with pytest.raises(BadInputError, match=r"mmseqs:.*clu.tsv line 2: expected representative<TAB>member"):
        read_group_tsv(str(table), member_first=False)
    table.write_text("a\tg\n\tg\n")
    with pytest.raises(BadInputError, match=r"tsv:.*clu.tsv line 2: expected seq_id<TAB>group"):
        read_group_tsv(str(table))


@pytest.mark.parametrize(
    ("rule", "problem"),
    [
        ("sample-id", None),
        ("regex:^NODE_(\\d+)", None),
        ("tsv:x.tsv", None),
        ("mmseqs:x.tsv", None),
        ("regex:(", "invalid regular expression"),
        ("regex:", "must be one of"),
        ("tsv:", "must be one of"),
        ("sample_id", "must be one of"),
        ("genome", "must be one of"),
    ],
)
def test_group_rule_problem(rule, problem):
    got = group_rule_problem(rule)
    assert got is None if problem is None else problem in got


def test_a_rule_that_places_no_sequence_is_an_error(kleb_ids):
    with pytest.raises(BadInputError, match=r"--group-by sample-id places none of the 119 sequences.*NODE_21_"):
        apply_groups(catalog(kleb_ids), "sample-id")


def test_ungrouped_sequences_are_counted_and_each_is_its_own_group(tmp_path, kleb_ids):
    table = tmp_path / "partial.tsv"
    left_out = kleb_ids[::20]  # 6 of them
    table.write_text("".join(f"{i}\tG{node(i) % 3}\n" for i in kleb_ids if i not in left_out))
    with pytest.warns(UserWarning, match=r"leaves 6 of 119 sequences ungrouped"):
        cat = apply_groups(catalog(kleb_ids), f"tsv:{table}")
    groups = members(cat)
    assert len(groups) == 3 + 6
    assert all(groups[i] == {i} for i in left_out)
    assert cat.notes["group_by"] == {"rule": f"tsv:{table}", "groups": 9, "ungrouped_sequences": 6}


def test_an_ungrouped_id_that_equals_a_group_name_stays_apart():
    """A sequence named like a group the rule made is not put into that group."""
    with pytest.warns(UserWarning, match="leaves 1 of 3"):
        cat = apply_groups(catalog(["A_1", "A_2", "A"]), r"regex:^(A)_")
    assert cat.groups.tolist() == [0, 0, 1]
    assert cat.notes["group_by"] == {"rule": r"regex:^(A)_", "groups": 2, "ungrouped_sequences": 1}


def test_pieces_are_grouped_by_their_sequence_and_by_the_rule():
    # rows 0-2 are pieces of sequence 0, rows 3-4 of sequence 1 (as `scan` cuts them)
    names = ["s0", "s0", "s0", "s1", "s1", "s2"]
    cat = apply_groups(catalog(names, seq=[0, 0, 0, 1, 1, 2]), None)
    assert members(cat) == {"s0": {"s0"}, "s1": {"s1"}, "s2": {"s2"}}
    assert cat.groups.tolist() == [0, 0, 0, 1, 1, 2]
    assert "group_by" not in cat.notes
    with pytest.warns(UserWarning, match="leaves 1 of 3 sequences"):  # sequences, not 6 pieces
        ruled = apply_groups(catalog(names, seq=[0, 0, 0, 1, 1, 2]), r"regex:s([01])")
    assert ruled.groups.tolist() == [0, 0, 0, 1, 1, 2]
    assert ruled.notes["group_by"] == {"rule": r"regex:s([01])", "groups": 3, "ungrouped_sequences": 1}


def test_without_rule_or_pieces_no_groups_are_set():
    cat = apply_groups(catalog(["a", "b", "c"]), None)
    assert cat.groups is None and "group_by" not in cat.notes


# ---------------------------------------------------------------------------------------------
# grouped_split


@st.composite
def grouped_rows(draw):
    n_groups = draw(st.integers(1, 40))
    n_rows = draw(st.integers(n_groups, 120))
    labels = list(range(n_groups)) + draw(
        st.lists(st.integers(0, n_groups - 1), min_size=n_rows - n_groups, max_size=n_rows - n_groups)
    )
    labels = draw(st.permutations(labels))
    lengths = draw(
        st.lists(st.one_of(st.integers(1, 9_999), st.integers(10_000, 200_000)), min_size=n_rows, max_size=n_rows)
    )
    ratios = draw(
        st.sampled_from([(0.8, 0.1, 0.1), (1, 1, 1), (0.9, 0.1, 0), (0.5, 0, 0.5), (1, 0, 0), (0.98, 0.01, 0.01)])
    )
    return np.asarray(labels, dtype=np.int64), np.asarray(lengths, dtype=np.int64), ratios


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(grouped_rows(), st.integers(0, 2**31))
def test_grouped_split_keeps_each_group_in_one_split(rows, seed):
    groups, lengths, ratios = rows
    wanted = [i for i, r in enumerate(ratios) if r > 0]
    n_groups = len(np.unique(groups))
    if n_groups < len(wanted):
        with pytest.raises(BadInputError):
            grouped_split(groups, lengths, ratios, seed)
        return
    split = grouped_split(groups, lengths, ratios, seed)
    assert split.shape == groups.shape
    for g in np.unique(groups):
        assert len(np.unique(split[groups == g])) == 1
    for i in range(len(SPLIT_NAMES)):
        assert (split == i).any() == (i in wanted), (i, ratios)
    assert np.array_equal(split, grouped_split(groups, lengths, ratios, seed))


@settings(max_examples=100, deadline=None)
@given(grouped_rows(), st.integers(0, 2**31))
def test_grouped_split_ignores_group_numbering_gaps_and_singletons_equal_stratified(rows, seed):
    groups, lengths, ratios = rows
    if len(np.unique(groups)) < sum(r > 0 for r in ratios):
        return
    # renumbering the groups with gaps changes nothing
    assert np.array_equal(
        grouped_split(groups * 3 + 5, lengths, ratios, seed), grouped_split(groups, lengths, ratios, seed)
    )
    # every row its own group: the plain stratified split
    alone = np.arange(len(lengths))
    assert np.array_equal(grouped_split(alone, lengths, ratios, seed), stratified_split(lengths, ratios, seed))


def test_grouped_split_depends_on_the_seed():
    groups = np.repeat(np.arange(60), 3)
    lengths = np.full(len(groups), 5000)
    splits = {grouped_split(groups, lengths, (0.8, 0.1, 0.1), seed).tobytes() for seed in range(5)}
    assert len(splits) > 1


def test_too_few_groups_for_the_splits_says_groups(kleb_ids):
    cat = apply_groups(catalog(kleb_ids), r"regex:^(NODE)_")
    with pytest.raises(BadInputError, match="group"):
        grouped_split(cat.groups, cat.lengths, (0.8, 0.1, 0.1), 0)


# ---------------------------------------------------------------------------------------------
# end to end on the Klebsiella assembly


def prepare_args(out: Path, rule: str, *extra: str, fasta: Path = KLEBSIELLA) -> list[str]:
    return [
        "prepare",
        str(fasta),
        "--out",
        str(out),
        "--seq-length",
        "2048",
        "--stride",
        "2000",
        "--samples-per-shard",
        "500",
        "--group-by",
        rule,
        "--workers",
        "2",
        "--quiet",
        *extra,
    ]


def splits_of(root: Path) -> dict[str, str]:
    """seq_id -> its split, from the sequence table's names per split (each id in one split only)."""
    out: dict[str, str] = {}
    for split, info in read_manifest(root).splits.items():
        names = split_seq_ids(root, split)
        assert len(names) == info.n_sequences
        for seq_id in names:
            assert seq_id not in out, seq_id
            out[seq_id] = split
    return out


def assert_groups_whole(root: Path, group_of: dict[str, str]) -> None:
    where: dict[str, set[str]] = {}
    for seq_id, split in splits_of(root).items():
        where.setdefault(group_of[seq_id], set()).add(split)
    assert all(len(s) == 1 for s in where.values()), where


RULE = r"regex:^NODE_\d*(\d)_"


def test_regex_groups_never_span_two_splits(tmp_path, kleb_ids):
    out = tmp_path / "out"
    assert main(prepare_args(out, RULE)) == 0
    manifest = read_manifest(out)
    assert set(splits_of(out)) == set(kleb_ids)
    assert_groups_whole(out, {i: str(node(i) % 10) for i in kleb_ids})
    assert set(manifest.splits) == {"train", "val", "test"}
    assert manifest.params.group_by == RULE
    assert manifest.request["group_by"] == RULE
    assert manifest.params.source["group_by"] == {"rule": RULE, "groups": 10, "ungrouped_sequences": 0}
    # the split differs from the ungrouped one: contigs ending in one digit go together
    val_digits = {node(i) % 10 for i in split_seq_ids(out, "val")}
    assert len(val_digits) < 10


def test_tsv_groups_never_span_two_splits_and_ungrouped_are_counted(tmp_path, kleb_ids):
    table = tmp_path / "genomes.tsv"
    left_out = [i for i in kleb_ids if node(i) % 17 == 0]  # 7 contigs
    group_of = {i: f"genome{node(i) % 10}" for i in kleb_ids}
    table.write_text("".join(f"{i}\t{group_of[i]}\n" for i in kleb_ids if i not in left_out))
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match=rf"--group-by tsv:{re.escape(str(table))} leaves 7 of 119 sequences"):
        assert main(prepare_args(out, f"tsv:{table}")) == 0
    manifest = read_manifest(out)
    assert_groups_whole(out, {i: group_of[i] if i not in left_out else i for i in kleb_ids})
    assert manifest.params.source["group_by"] == {
        "rule": f"tsv:{table}",
        "groups": 10 + 7,
        "ungrouped_sequences": 7,
    }
    assert manifest.request["group_file"]["path"] == str(table.resolve())


def test_mmseqs_clusters_never_span_two_splits(tmp_path, kleb_ids):
    table = tmp_path / "clu_cluster.tsv"
    reps = {}
    for i in kleb_ids:
        reps.setdefault(node(i) % 12, i)  # the first contig of each residue represents the cluster
    rep_of = {i: reps[node(i) % 12] for i in kleb_ids}
    table.write_text("".join(f"{rep_of[i]}\t{i}\n" for i in sorted(kleb_ids, key=lambda i: rep_of[i])))
    out = tmp_path / "out"
    assert main(prepare_args(out, f"mmseqs:{table}")) == 0
    manifest = read_manifest(out)
    assert_groups_whole(out, rep_of)
    assert manifest.params.source["group_by"]["groups"] == 12


def test_group_by_with_split_lists_is_refused(tmp_path, kleb_ids, capsys):
    train, val = tmp_path / "train.txt", tmp_path / "val.txt"
    train.write_text("\n".join(kleb_ids[:60]) + "\n")
    val.write_text("\n".join(kleb_ids[60:]) + "\n")
    out = tmp_path / "out"
    code = main(prepare_args(out, RULE, "--split-list", f"train={train}", "--split-list", f"val={val}"))
    assert code == 2
    err = capsys.readouterr().err
    assert f"--group-by {RULE} and --split-list both decide the split" in err
    assert not out.exists()


def test_a_rule_that_matches_nothing_exits_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(prepare_args(out, "regex:^contig_(\\d+)")) == 2
    err = capsys.readouterr().err
    assert "--group-by regex:^contig_(\\d+) places none of the 119 sequences" in err
    assert "NODE_21_length_101449_cov_1.08169_ID_5337" in err
    assert not out.exists()
    assert not Path(f"{out}.lock").exists()


def test_a_rule_that_matches_nothing_leaves_an_existing_output_intact(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    assert main(prepare_args(out, "sample-id")) == 2
    assert "--group-by sample-id places none of the 119 sequences" in capsys.readouterr().err
    assert list(out.iterdir()) == []


def test_a_malformed_tsv_line_exits_2_naming_file_and_line(tmp_path, capsys, kleb_ids):
    table = tmp_path / "bad.tsv"
    lines = [f"{i}\tg{node(i) % 10}" for i in kleb_ids[:10]]
    lines[4] = lines[4].replace("\t", " ")  # line 5: a space, not a tab
    table.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert main(prepare_args(out, f"tsv:{table}")) == 2
    err = capsys.readouterr().err
    assert f"--group-by tsv:{table} line 5: expected seq_id<TAB>group" in err
    assert kleb_ids[4] in err
    assert not out.exists()


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        (
            "genome",
            "--group-by must be one of sample-id, regex:PATTERN, tsv:FILE, mmseqs:FILE, similarity:T, got 'genome'",
        ),
        ("regex:(", "--group-by has an invalid regular expression"),
        ("tsv:/nonexistent/groups.tsv", "/nonexistent/groups.tsv does not exist"),
    ],
)
def test_bad_rules_exit_2_before_anything_is_written(tmp_path, capsys, rule, message):
    out = tmp_path / "out"
    assert main(prepare_args(out, rule)) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_too_few_groups_for_the_splits_exits_2(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(prepare_args(out, "regex:^(NODE)_")) == 2
    assert "cannot fill 3 splits" in capsys.readouterr().err
    assert not out.exists()
    # with the empty splits' ratios at 0 one group is fine
    assert main(prepare_args(out, "regex:^(NODE)_", "--split", "1,0,0")) == 0
    assert set(read_manifest(out).splits) == {"train"}


def test_pieces_cut_at_n_follow_their_sequence_into_its_group(tmp_path):
    """--split-at-n with --group-by tsv: the pieces of a sequence go where its group goes."""
    (lam,) = read_fasta(LAMBDA).values()
    seqs = {}
    for n in range(12):
        part = list(lam[n * 4000 : n * 4000 + 4000])
        part[1000:1050] = "N" * 50
        part[2500:2520] = "n" * 20
        seqs[f"lam_{n}"] = "".join(part)
    fasta = tmp_path / "lam.fa"
    fasta.write_text("".join(f">{k}\n{v}\n" for k, v in seqs.items()))
    table = tmp_path / "groups.tsv"
    group_of = {k: f"g{int(k.split('_')[1]) % 4}" for k in seqs}
    table.write_text("".join(f"{k}\t{g}\n" for k, g in group_of.items()))
    out = tmp_path / "out"
    args = prepare_args(
        out, f"tsv:{table}", "--split-at-n", "10", "--seq-length", "512", "--stride", "500", fasta=fasta
    )
    assert main(args) == 0
    manifest = read_manifest(out)
    assert_groups_whole(out, group_of)
    assert manifest.params.source["split_at_n"] == {"min_run": 10, "pieces": 36, "sequences_cut": 12}
    assert manifest.params.source["group_by"] == {"rule": f"tsv:{table}", "groups": 4, "ungrouped_sequences": 0}
    assert sum(info.n_sequences for info in manifest.splits.values()) == 12
