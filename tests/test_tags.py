"""Control tags the way each source writes them (`--tags`), and the lineage parser both sides share.

FASTA files are cut from the real lambda phage genome, with headers as Evo2 writes them (a piped
``|d__...;s__Genus species|`` lineage), as GTDB writes them (a bare ``d__...;p__...``), or
without any; every tag read back from the shards must be what the rule gives its sequence.
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import shard_windows
from hypothesis import given
from hypothesis import strategies as st

from bionemo_wds.cli.main import main
from bionemo_wds.core.lineage import (
    DROPPED,
    RANKS,
    drop_ranks,
    dropout_length,
    find_lineage,
    format_lineage,
    parse_lineage,
)
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import read_manifest
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.tags import tag_for, tag_rule_problem

SEQ_LENGTH, STRIDE = 1024, 800
OPTS = dict(seq_length=SEQ_LENGTH, stride=STRIDE, split=(1, 0, 0), progress=False, workers=1)

ECOLI = (
    "d__Bacteria;p__Pseudomonadota;c__Gammaproteobacteria;o__Enterobacterales;f__Enterobacteriaceae;"
    "g__Escherichia;s__Escherichia coli"
)
LAMBDA_LINEAGE = (
    "d__Viruses;p__Uroviricota;c__Caudoviricetes;o__Caudovirales;f__Siphoviridae;g__Lambdavirus;"
    "s__Escherichia virus Lambda"
)
#: name -> header description; `EXPECTED_LINEAGE` the tag each gets under --tags lineage.
HEADERS = {
    "evo2": f"phage lambda |{LAMBDA_LINEAGE}| length=9000",  # Evo2's piped form, spaces in the species
    "gtdb": f"{ECOLI}",  # a bare GTDB lineage, species of two words
    "short": "|d__B;p__Ab;c__Cy|",  # values shorter than None: dropout makes it longer
    "plain": "no lineage in this header",
}
EXPECTED_LINEAGE = {"evo2": f"|{LAMBDA_LINEAGE}|", "gtdb": f"|{ECOLI}|", "short": "|d__B;p__Ab;c__Cy|", "plain": ""}


def write_fasta(path: Path, records: dict[str, str], seq: str) -> Path:
    """One 9 kb piece of `seq` per record, under header ``>name description``."""
    with open(path, "w") as fh:
        for i, (name, description) in enumerate(records.items()):
            piece = seq[i * 9000 : (i + 1) * 9000]
            fh.write(f">{name} {description}".rstrip() + "\n")
            fh.writelines(piece[j : j + 60] + "\n" for j in range(0, len(piece), 60))
    return path


def tags_by_seq(out: Path) -> dict[str, str]:
    """seq_id -> the tag of its windows, read back from the shards (one tag per sequence)."""
    found: dict[str, set[str]] = {}
    for rows in shard_windows(out).values():
        for seq_id, _, _, _, tag in rows:
            found.setdefault(seq_id, set()).add(tag)
    assert all(len(tags) == 1 for tags in found.values()), found
    return {seq_id: tags.pop() for seq_id, tags in found.items()}


@pytest.fixture()
def headers_fa(tmp_path, lambda_seq) -> Path:
    return write_fasta(tmp_path / "tagged.fa", HEADERS, lambda_seq)


# --- lineage.py ----------------------------------------------------------------------------------

value = st.text(st.characters(min_codepoint=32, max_codepoint=126, blacklist_characters=";|"), max_size=12)
lineages = st.integers(1, len(RANKS)).flatmap(
    lambda n: st.lists(value, min_size=n, max_size=n).map(lambda vs: list(zip(RANKS, vs)))
)


@given(lineages)
def test_parse_format_round_trip(ranks):
    tag = format_lineage(ranks)
    assert parse_lineage(tag) == ranks
    assert format_lineage(parse_lineage(tag) or []) == tag


@given(lineages, st.lists(st.booleans(), min_size=7, max_size=7))
def test_dropped_lineage_fits_its_dropout_length(ranks, keep):
    tag = format_lineage(ranks)
    dropped = drop_ranks(tag, keep)
    assert parse_lineage(dropped) == [(r, v if k else DROPPED) for (r, v), k in zip(ranks, keep)]
    assert len(tag) <= dropout_length(tag) and len(dropped) <= dropout_length(tag)
    worst = drop_ranks(tag, [len(v) >= len(DROPPED) for _, v in ranks])  # every short value dropped
    assert len(worst) == dropout_length(tag)


def test_dropout_length_and_drop_ranks_by_example():
    assert dropout_length("|d__B;p__Ab;c__Cy|") == len("|d__None;p__None;c__None|")
    assert dropout_length("|d__Bacteria;p__Pseudomonadota|") == len("|d__Bacteria;p__Pseudomonadota|")
    assert dropout_length("<ctrl_bcr>") == len("<ctrl_bcr>") and dropout_length("") == 0
    assert drop_ranks("|d__Bacteria;p__Ab;c__Cy|", [True, False, True]) == "|d__Bacteria;p__None;c__Cy|"
    assert drop_ranks("|d__Bacteria;p__Ab;c__Cy|", [False]) == "|d__None;p__Ab;c__Cy|"  # ranks beyond keep stay
    with pytest.raises(ValueError, match="not a lineage tag"):
        drop_ranks("<ctrl_bcr>", [False])


@pytest.mark.parametrize(
    "header, expected",
    [
        (f"seq1 |{ECOLI}|", f"|{ECOLI}|"),
        (f"seq1 phage |{LAMBDA_LINEAGE}| length=9000", f"|{LAMBDA_LINEAGE}|"),
        (f"gi|9626243|ref|NC_001416.1| |{LAMBDA_LINEAGE};|", f"|{LAMBDA_LINEAGE}|"),  # pipes in the name, trailing ;
        ("seq1 |d__Bacteria;p__None;c__None|", "|d__Bacteria;p__None;c__None|"),  # Evo2's dropped ranks
        (f"GB_GCA_000008085.1 {ECOLI}", f"|{ECOLI}|"),  # bare GTDB, two-word species
        (f"GB_GCA_000008085.1 {ECOLI} [assembly 2]", f"|{ECOLI}|"),
        (f"seq1 tax={ECOLI}", f"|{ECOLI}|"),
        ("seq1 d__Bacteria;p__Bacillota;c__Bacilli", "|d__Bacteria;p__Bacillota;c__Bacilli|"),  # down to the class
        ("seq1 d__Bacteria;p__P;c__C;o__O;f__F;g__G;s__ len=5", "|d__Bacteria;p__P;c__C;o__O;f__F;g__G;s__|"),
        ("seq1 d__Bacteria;p__P;c__C;o__O;f__F;g__G;s__G len=5", "|d__Bacteria;p__P;c__C;o__O;f__F;g__G;s__G|"),
        ("NODE_1_length_500_cov_3.2", None),
        ("seq1 d__Bacteria;c__Bacilli", None),  # ranks out of order
        ("seq1 |p__Bacillota;c__Bacilli|", None),  # no domain
        ("seq1 xd__Bacteria;p__Bacillota", None),  # d__ inside a word
    ],
)
def test_find_lineage(header, expected):
    assert find_lineage(header) == expected


# --- --tags lineage on FASTA --------------------------------------------------------------------


def test_lineage_tags_from_evo2_and_gtdb_headers_travel_with_every_window(tmp_path, headers_fa):
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match=re.escape("--tags lineage gave no tag to 1 of 4 sequences (first: 'plain')")):
        prepare([headers_fa], out, PrepareOptions(**OPTS, tags="lineage"))
    assert tags_by_seq(out) == EXPECTED_LINEAGE
    manifest = read_manifest(out)
    params = manifest.params
    room = max(dropout_length(t) for t in EXPECTED_LINEAGE.values())
    assert params.max_tag_bytes == room == max(len(f"|{LAMBDA_LINEAGE}|"), len(f"|{ECOLI}|"))
    assert params.window_length == SEQ_LENGTH - 3 - room
    assert params.source["tags"] == {"rule": "lineage", "untagged_sequences": 1}


def test_lineage_windows_leave_room_for_dropped_ranks(tmp_path, lambda_seq):
    fa = write_fasta(tmp_path / "short.fa", {"a": "|d__B;p__Ab;c__Cy|", "b": "d__Bac;p__Bacillota"}, lambda_seq)
    out = tmp_path / "out"
    prepare([fa], out, PrepareOptions(**OPTS, tags="lineage"))
    params = read_manifest(out).params
    assert params.max_tag_bytes == len("|d__None;p__None;c__None|") > len("|d__Bac;p__Bacillota|")
    assert params.window_length == SEQ_LENGTH - 3 - len("|d__None;p__None;c__None|")
    assert {len(b) for rows in shard_windows(out).values() for _, _, _, b, _ in rows} >= {params.window_length}


def test_a_rule_that_tags_nothing_warns_and_strict_tags_refuses(tmp_path, lambda_seq, capsys):
    fa = write_fasta(tmp_path / "none.fa", {"x1": "", "x2": "plain words"}, lambda_seq)
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match=re.escape("--tags lineage gave no tag to 2 of 2 sequences (first: 'x1')")):
        prepare([fa], out, PrepareOptions(**OPTS, tags="lineage"))
    assert tags_by_seq(out) == {"x1": "", "x2": ""}
    assert read_manifest(out).params.source["tags"]["untagged_sequences"] == 2
    strict = tmp_path / "strict"
    with pytest.raises(BadInputError, match=r"--tags lineage gave no tag to 2 of 2 sequences \(first: 'x1'\)"):
        prepare([fa], strict, PrepareOptions(**OPTS, tags="lineage", strict_tags=True))
    assert not strict.exists()


def test_strict_tags_through_the_cli_exits_2_and_writes_nothing(tmp_path, headers_fa, capsys):
    out = tmp_path / "out"
    argv = ["prepare", str(headers_fa), "--out", str(out), "-q", "--seq-length", "1024", "--stride", "800"]
    assert main([*argv, "--split", "1,0,0", "--tags", "lineage", "--strict-tags"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--tags lineage" in err[0] and "'plain'" in err[0] and "--strict-tags" in err[0]
    assert not out.exists()


@pytest.mark.slow
def test_the_cli_prints_the_untagged_warning_as_one_line(tmp_path, headers_fa):
    """Through the real command (a subprocess, so Python's own warning display is what prints): one
    line naming the command, the rule and the count, not a Python warning with its source line."""
    out = tmp_path / "out"
    argv = ["prepare", str(headers_fa), "--out", str(out), "-q", "--seq-length", "1024", "--stride", "800"]
    cmd = [sys.executable, "-m", "bionemo_wds.cli", *argv, "--split", "1,0,0", "--tags", "lineage"]
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    warned = [line for line in done.stderr.splitlines() if "warning" in line.lower()]
    assert len(warned) == 1, done.stderr
    assert warned[0].startswith("bionemo-wds prepare: warning: --tags lineage gave no tag to")
    assert "UserWarning" not in done.stderr


def test_a_fully_tagged_rule_neither_warns_nor_fails_with_strict_tags(tmp_path, headers_fa, recwarn):
    out = tmp_path / "out"
    prepare([headers_fa], out, PrepareOptions(**OPTS, tags="description", strict_tags=True))
    assert tags_by_seq(out) == HEADERS
    assert read_manifest(out).params.source["tags"] == {"rule": "description", "untagged_sequences": 0}
    assert not [w for w in recwarn if "gave no tag" in str(w.message)]


# --- --tags regex: and tsv: ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "rule, expected",
    [
        (r"regex:g__(\w+)", {"evo2": "Lambdavirus", "gtdb": "Escherichia", "short": "", "plain": ""}),
        (r"regex:^(\w+) ", {"evo2": "evo2", "gtdb": "gtdb", "short": "short", "plain": "plain"}),  # the name
        (r"regex:length=\d+", {"evo2": "length=9000", "gtdb": "", "short": "", "plain": ""}),  # no group: whole match
        (
            r"regex:s__([^|;]+)",
            {"evo2": "Escherichia virus Lambda", "gtdb": "Escherichia coli", "short": "", "plain": ""},
        ),
        (r"regex:(x)?lineage", {"evo2": "", "gtdb": "", "short": "", "plain": ""}),  # group not taking part: no tag
    ],
)
def test_regex_tags_from_the_header_line(tmp_path, headers_fa, rule, expected):
    out = tmp_path / "out"
    untagged = sum(1 for t in expected.values() if not t)
    if untagged:
        with pytest.warns(UserWarning, match=f"gave no tag to {untagged} of 4 sequences"):
            prepare([headers_fa], out, PrepareOptions(**OPTS, tags=rule))
    else:
        prepare([headers_fa], out, PrepareOptions(**OPTS, tags=rule))
    assert tags_by_seq(out) == expected
    assert read_manifest(out).params.max_tag_bytes == max(len(t) for t in expected.values())
    assert tag_for(f"evo2 {HEADERS['evo2']}", rule) == expected["evo2"]


@pytest.mark.parametrize("rule", ["regex:(", "regex:", "tsv:", "lineages", "regex:[a-"])
def test_bad_rules_are_refused_naming_the_option(tmp_path, headers_fa, rule, capsys):
    assert tag_rule_problem(rule) is not None
    with pytest.raises(BadInputError, match="--tags"):
        PrepareOptions(tags=rule).check()
    out = tmp_path / "out"
    assert main(["prepare", str(headers_fa), "--out", str(out), "-q", "--tags", rule]) == 2
    err = capsys.readouterr().err
    assert "--tags" in err and (rule in err or "regular expression" in err)
    assert not out.exists()


def test_tags_that_are_not_printable_ascii_are_refused_naming_the_sequence(tmp_path, lambda_seq, capsys):
    fa = write_fasta(tmp_path / "u.fa", {"ok": "tag=plain", "odd": "tag=café"}, lambda_seq)
    with pytest.raises(BadInputError, match="control tag of sequence 'odd'"):
        prepare([fa], tmp_path / "out", PrepareOptions(**OPTS, tags=r"regex:tag=(\S+)"))
    table = tmp_path / "t.tsv"
    table.write_text("ok\tfine\nodd\ttab\x07bell\n")
    with pytest.raises(BadInputError, match="control tag of sequence 'odd'"):
        prepare([fa], tmp_path / "out2", PrepareOptions(**OPTS, tags=f"tsv:{table}"))


def test_tsv_tags(tmp_path, headers_fa):
    table = tmp_path / "tags.tsv"
    table.write_text("# seq_id<TAB>tag\n\nevo2\t<phage>\ngtdb\t<ecoli>\n  \nshort\t<short>\nevo2\t<phage>\nother\tx\n")
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match=r"--tags tsv:\S+ gave no tag to 1 of 4 sequences \(first: 'plain'\)"):
        prepare([headers_fa], out, PrepareOptions(**OPTS, tags=f"tsv:{table}"))
    assert tags_by_seq(out) == {"evo2": "<phage>", "gtdb": "<ecoli>", "short": "<short>", "plain": ""}
    request = read_manifest(out).request
    assert request["tag_file"]["path"] == str(table.resolve())
    # a changed table is another request: refused without --overwrite
    table.write_text("evo2\t<phage>\ngtdb\t<ecoli>\nshort\t<short>\nplain\t<plain>\n")
    with pytest.raises(BadInputError, match="tag_file"):
        prepare([headers_fa], out, PrepareOptions(**OPTS, tags=f"tsv:{table}"))
    prepare([headers_fa], out, PrepareOptions(**OPTS, tags=f"tsv:{table}", overwrite=True, strict_tags=True))
    assert tags_by_seq(out)["plain"] == "<plain>"


@pytest.mark.parametrize(
    "text, message",
    [
        ("evo2\t<phage>\ngtdb\n", "line 2: expected seq_id<TAB>tag, got 'gtdb'"),
        ("evo2\t<phage>\n\n# x\nevo2\t<other>\n", "line 4: sequence 'evo2' has two tags ('<phage>' and '<other>')"),
        ("\tlonely\n", "line 1: expected seq_id<TAB>tag"),
    ],
)
def test_bad_tsv_lines_are_refused_naming_file_and_line(tmp_path, headers_fa, capsys, text, message):
    table = tmp_path / "bad.tsv"
    table.write_text(text)
    out = tmp_path / "out"
    assert main(["prepare", str(headers_fa), "--out", str(out), "-q", "--tags", f"tsv:{table}"]) == 2
    err = capsys.readouterr().err
    assert f"--tags tsv:{table} {message}" in err
    assert not out.exists()


def test_missing_tsv_is_refused(tmp_path, headers_fa, capsys):
    assert main(["prepare", str(headers_fa), "--out", str(tmp_path / "o"), "-q", "--tags", "tsv:nope.tsv"]) == 2
    assert "--tags tsv:nope.tsv: nope.tsv does not exist" in capsys.readouterr().err


# --- other sources --------------------------------------------------------------------------------


@pytest.fixture()
def eden_dbs(tmp_path, lambda_seq) -> Path:
    """Two sample databases of the sharded-Eden schema, four lambda pieces."""
    contigs = {
        "BCR__ECT-S1__CT1-1": lambda_seq[:5000],
        "BCR__ECT-S1__CT1-2": lambda_seq[5000:9000],
        "EUK__ECT-S2__CT1-1": lambda_seq[9000:15000],
        "EUK__ECT-S2__CT1-2": lambda_seq[15000:20000],
    }
    for contig, seq in contigs.items():
        sample = contig.split("__")[1].split("-", 1)[1]
        path = tmp_path / "dbs" / sample / f"glm_dataset_{sample}.sqlite"
        path.parent.mkdir(parents=True, exist_ok=True)
        with sqlite3.connect(path) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS sequences (contig_id TEXT PRIMARY KEY, nt_sequence TEXT NOT NULL)")
            conn.execute("INSERT INTO sequences VALUES (?, ?)", (contig, seq))
        conn.close()
    return tmp_path / "dbs"


def eden_argv(dbs: Path, out: Path, *extra: str) -> list[str]:
    return ["prepare", "--source", "sharded-eden", str(dbs), "--out", str(out), "-q", "--split", "1,0,0", *extra]


def test_sharded_eden_regex_on_the_contig_id_and_tsv(tmp_path, eden_dbs):
    out = tmp_path / "regex"
    with pytest.warns(UserWarning, match="gave no tag to 2 of 4 sequences"):
        assert main(eden_argv(eden_dbs, out, "--tags", r"regex:__(CT\d-2)$")) == 0
    assert tags_by_seq(out) == {
        "BCR__ECT-S1__CT1-1": "",
        "BCR__ECT-S1__CT1-2": "CT1-2",
        "EUK__ECT-S2__CT1-1": "",
        "EUK__ECT-S2__CT1-2": "CT1-2",
    }
    assert read_manifest(out).params.source["tags"] == {"rule": r"regex:__(CT\d-2)$", "untagged_sequences": 2}
    table = tmp_path / "t.tsv"
    table.write_text("".join(f"{c}\t<{c[:3].lower()}>\n" for c in tags_by_seq(out)))
    out2 = tmp_path / "tsv"
    assert main(eden_argv(eden_dbs, out2, "--tags", f"tsv:{table}", "--strict-tags")) == 0
    assert set(tags_by_seq(out2).values()) == {"<bcr>", "<euk>"}


@pytest.mark.parametrize("rule", ["lineage", "description"])
def test_sharded_eden_refuses_header_rules(tmp_path, eden_dbs, capsys, rule):
    assert main(eden_argv(eden_dbs, tmp_path / "o", "--tags", rule)) == 2
    err = capsys.readouterr().err
    assert f"--tags {rule} reads FASTA header lines" in err and "regex:PATTERN" in err


def test_hdf5_refuses_every_tag_rule(tmp_path):
    h5py = pytest.importorskip("h5py")
    h5 = tmp_path / "x.h5"
    with h5py.File(h5, "w") as f:
        f["x"] = [[65, 67, 71, 84] * 10] * 4
    for rule in ("regex:A", "tsv:x.tsv", "lineage"):
        with pytest.raises(BadInputError, match=f"--tags {re.escape(rule)} does not apply to --source hdf5"):
            prepare([h5], tmp_path / "o", PrepareOptions(source="hdf5", x_key="x", tags=rule, progress=False))


def test_help_describes_every_rule_and_the_new_options(capsys):
    with pytest.raises(SystemExit):
        main(["prepare", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for word in ("regex:PATTERN", "tsv:FILE", "lineage", "--strict-tags", "--case {keep,upper}", "stay lower case"):
        assert word in text, word
