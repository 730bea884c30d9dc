"""`prepare --evo2-config`: bionemo's Evo2 preprocessing YAML, field by field (`prepare.evo2_config.FIELDS`).

A config naming every field (mapped ones set, the rest at their defaults) prepares through the CLI,
and the manifest shows the mapped options (split ratios, seed, case, the taxonomy_data tags on
every window); each field we refuse, at any other value than its default, is refused with one line
naming the file and the field, and nothing is written. The table the code reads is the table the
tests read: every field is covered by construction.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import KLEBSIELLA, LAMBDA, read_fasta, shard_windows

from bionemo_wds.errors import BadInputError
from bionemo_wds.format import read_manifest
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.evo2_config import (
    FIELDS,
    IGNORE,
    MAP,
    REFUSE,
    lineage_tag,
    mapping_markdown,
    read_evo2_config,
)
from bionemo_wds.prepare.tags import tagger

ROOT = Path(__file__).resolve().parents[1]
ERROR = "bionemo-wds prepare: error: "

KLEB_TAXON = {
    "domain": "Bacteria",
    "phylum": "Pseudomonadota",
    "clazz": "Gammaproteobacteria",
    "order": "Enterobacterales",
    "family": "Enterobacteriaceae",
    "genus": "Klebsiella",
    "species": "Klebsiella pneumoniae",
}
KLEB_TAG = (
    "|d__Bacteria;p__Pseudomonadota;c__Gammaproteobacteria;o__Enterobacterales;f__Enterobacteriaceae;"
    "g__Klebsiella;s__Klebsiella pneumoniae|"
)
#: An older config's `kingdom`, and ranks left out (Evo2 writes None for them).
NODE_1_TAXON = {"kingdom": "Bacteria", "genus": "Klebsiella", "species": None}
NODE_1_TAG = "|d__Bacteria;p__None;c__None;o__None;f__None;g__Klebsiella;s__None|"


def cli(*args: str | os.PathLike[str]) -> subprocess.CompletedProcess:
    """`bionemo-wds ARGS` in a fresh interpreter (the worktree's code first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "bionemo_wds.cli", *map(str, args)], env=env, capture_output=True, text=True
    )


def one_error_line(result: subprocess.CompletedProcess) -> str:
    """Exit code 2 and exactly one stderr line; returns the message."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(ERROR), result.stderr
    return lines[0][len(ERROR) :]


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def at_defaults() -> dict[str, Any]:
    """Every field of the table at its default value."""
    return {name: spec.default for name, spec in FIELDS.items()}


def entry(tmp_path: Path, **fields: Any) -> dict[str, Any]:
    """A minimal entry: the lambda genome into tmp_path/out, one split; `fields` added."""
    return {
        "datapaths": [str(LAMBDA)],
        "output_dir": str(tmp_path / "out"),
        "train_split": 1.0,
        "valid_split": 0.0,
        "test_split": 0.0,
        **fields,
    }


def other_than(default: Any) -> Any:
    """A value of the field's kind that is not its default."""
    if isinstance(default, bool):
        return not default
    if isinstance(default, (int, float)):
        return default + 1
    if isinstance(default, str):
        return default + "-other"
    if isinstance(default, dict):
        return {"a": "b"}
    return "other"


# --- the whole config through the CLI --------------------------------------------------------------


@pytest.mark.slow
def test_a_config_naming_every_field_prepares_each_entry_with_the_mapped_options(tmp_path):
    kleb = at_defaults() | {
        "datapaths": [str(KLEBSIELLA)],
        "output_dir": str(tmp_path),
        "output_prefix": "kleb",
        "train_split": 6,
        "valid_split": -3,  # Evo2 takes absolute values
        "test_split": 1,
        "seed": 7,
        "workers": 1,
        "force_uppercase": True,
        "chunksize": 8,  # accepted with a note
        "preproc_concurrency": 1000,
        "taxonomy_data": {"NODE_1_": NODE_1_TAXON, "NODE_": KLEB_TAXON},  # in order: the first found wins
    }
    lam = {
        "datapaths": [str(LAMBDA)],
        "output_dir": str(tmp_path),
        "output_prefix": "lambda",
        "train_split": 1,
        "valid_split": 0,
        "test_split": 0,
    }
    config = write_yaml(tmp_path / "preprocess.yaml", [kleb, lam])
    result = cli("prepare", "--evo2-config", config, "--seq-length", "1024", "-q")
    assert result.returncode == 0, result.stderr
    assert re.search(r"note: .*entry 1: chunksize is ignored", result.stdout)
    assert re.search(r"note: .*entry 1: preproc_concurrency is ignored", result.stdout)

    manifest = read_manifest(tmp_path / "kleb")
    request = manifest.request
    assert request["split"] == [6.0, 3.0, 1.0] and request["seed"] == 7
    assert request["tags"] == "substring" and request["tag_map"] == {"NODE_1_": NODE_1_TAG, "NODE_": KLEB_TAG}
    assert manifest.params.case == "upper" and manifest.params.seed == 7
    assert set(manifest.splits) == {"train", "val", "test"}
    names = list(read_fasta(KLEBSIELLA))
    tags = {seq_id: tag for rows in shard_windows(tmp_path / "kleb").values() for seq_id, _, _, _, tag in rows}
    assert set(tags) == set(names)
    assert {n for n, t in tags.items() if t == NODE_1_TAG} == {n for n in names if "NODE_1_" in n} != set()
    assert all(t == KLEB_TAG for n, t in tags.items() if "NODE_1_" not in n)

    lam_manifest = read_manifest(tmp_path / "lambda")
    assert lam_manifest.request["split"] == [1.0, 0.0, 0.0] and lam_manifest.params.tags == "none"
    assert lam_manifest.params.case == "keep" and lam_manifest.params.seq_length == 1024

    again = cli("prepare", "--evo2-config", config, "--seq-length", "1024", "-q")  # the same request: resumes
    assert again.returncode == 0 and again.stdout.count("already prepared with these options") == 2


@pytest.mark.slow
@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["in.fa"], "leave INPUTS out"),
        (["--out", "x"], "leave --out out"),
        (["--split", "1,0,0"], "sets --split"),
        (["--seed", "3"], "sets --seed"),
        (["--source", "hdf5"], "sets --source"),
    ],
)
def test_cli_refuses_what_the_file_already_gives(tmp_path, extra, says):
    config = write_yaml(tmp_path / "p.yaml", entry(tmp_path, seed=1))
    message = one_error_line(cli("prepare", "--evo2-config", config, *extra))
    assert says in message and str(config) in message
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_cli_refuses_a_field_naming_the_file_and_the_field_with_nothing_written(tmp_path):
    config = write_yaml(tmp_path / "p.yaml", [entry(tmp_path), entry(tmp_path, output_prefix="b", nnn_filter=True)])
    message = one_error_line(cli("prepare", "--evo2-config", config))
    assert message.startswith(f"--evo2-config {config} entry 2: nnn_filter True is refused")
    assert not (tmp_path / "out").exists()  # entry 1 was fine, but nothing starts before all are checked


# --- field by field, through the Python API --------------------------------------------------------


@pytest.mark.parametrize("name", [n for n, spec in FIELDS.items() if spec.action == REFUSE])
def test_each_refused_field_is_refused_at_another_value_naming_it(tmp_path, name):
    value = other_than(FIELDS[name].default)
    config = write_yaml(tmp_path / "p.yaml", entry(tmp_path, **{name: value}))
    with pytest.raises(BadInputError) as err:
        read_evo2_config(config)
    message = str(err.value)
    assert message == f"--evo2-config {config}: {name} {value!r} is refused: {FIELDS[name].what} (leave it out)"
    assert "\n" not in message


def test_every_field_at_its_default_is_accepted(tmp_path):
    config = write_yaml(tmp_path / "p.yaml", at_defaults() | {"datapaths": [str(LAMBDA)], "output_prefix": "o"})
    (run,) = read_evo2_config(config)
    assert run.inputs == [str(LAMBDA)] and run.out == "o" and not run.notes
    assert run.options == {
        "source": "fasta",
        "split": (0.7, 0.2, 0.1),
        "overwrite": False,
        "case": "keep",
    }  # Evo2's split defaults
    PrepareOptions(**run.options).check()
    nulls = write_yaml(
        tmp_path / "n.yaml",
        {"datapaths": [str(LAMBDA)], "output_dir": "d", "special_tokens": None, "taxonomy_data": None},
    )
    assert read_evo2_config(nulls)[0].out == "d"


def test_ignored_fields_take_any_value_with_a_note(tmp_path):
    ignored = {n: other_than(spec.default) for n, spec in FIELDS.items() if spec.action == IGNORE}
    assert ignored
    (run,) = read_evo2_config(write_yaml(tmp_path / "p.yaml", entry(tmp_path, **ignored)))
    assert [note.split(": ")[1] for note in run.notes] == [f"{n} is ignored" for n in ignored]


def test_mapped_fields_set_their_options(tmp_path):
    fields = entry(
        tmp_path,
        train_split=-2,
        valid_split=1,
        test_split=1,
        seed=0,
        workers=3,
        overwrite=True,
        force_uppercase=True,
        taxonomy_data={"NC_": NODE_1_TAXON},
    )
    (run,) = read_evo2_config(write_yaml(tmp_path / "p.yaml", fields))
    assert run.options == {
        "source": "fasta",
        "split": (2.0, 1.0, 1.0),
        "overwrite": True,
        "case": "upper",
        "seed": 0,
        "workers": 3,
        "tags": "substring",
        "tag_map": {"NC_": NODE_1_TAG},
    }
    assert {n for n, spec in FIELDS.items() if spec.action == MAP} == {*fields, "output_prefix"}


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (
            "random_reverse_compliment: 0.5\n",
            "unknown field 'random_reverse_compliment' (did you mean 'random_reverse_complement'?)",
        ),
        ("[unclosed\n", "cannot be read"),
        ("- 3\n", "expected a list of Evo2PreprocessingConfig mappings"),
        ("[]\n", "expected a list of Evo2PreprocessingConfig mappings"),
        ("datapaths: [missing.fa]\noutput_dir: o\n", "datapaths: missing.fa does not exist"),
        ("datapaths: []\noutput_dir: o\n", "datapaths is empty"),
        ("datapaths: {LAMBDA}\noutput_dir: o\n", "datapaths must be a list of FASTA paths"),
        ("datapaths: [{LAMBDA}]\n", "output_dir and output_prefix are both unset"),
        ("datapaths: [{LAMBDA}]\noutput_prefix: a/b\n", "output_prefix 'a/b' must be a plain name"),
        ("datapaths: [{LAMBDA}]\noutput_dir: o\ntrain_split: 0\nvalid_split: 0\ntest_split: 0\n", "all zero"),
        ("datapaths: [{LAMBDA}]\noutput_dir: o\nseed: -1\n", "seed must be an integer of at least 0"),
        ("datapaths: [{LAMBDA}]\noutput_dir: o\nworkers: 0\n", "workers must be an integer of at least 1"),
        ("datapaths: [{LAMBDA}]\noutput_dir: o\nforce_uppercase: 'yes'\n", "force_uppercase must be true or false"),
        (
            "datapaths: [{LAMBDA}]\noutput_dir: o\ntaxonomy_data: {{NC: {{genuss: X}}}}\n",
            "taxonomy_data.NC: unknown lineage field 'genuss' (did you mean 'genus'?)",
        ),
        ("datapaths: [{LAMBDA}]\noutput_dir: o\ntaxonomy_data: {{NC: {{genus: 'a;b'}}}}\n", "hold no '|' or ';'"),
        ("datapaths: [{LAMBDA}]\noutput_dir: o\ntaxonomy_data: {{NC: {{kingdom: A, domain: A}}}}\n", "same rank"),
        (
            "- {{datapaths: [{LAMBDA}], output_dir: o}}\n- {{datapaths: [{LAMBDA}], output_dir: o}}\n",
            "entries 1 and 2 both write o",
        ),
    ],
)
def test_bad_configs_are_one_line_naming_the_file(tmp_path, data, says):
    config = tmp_path / "p.yaml"
    config.write_text(data.format(LAMBDA=LAMBDA))
    with pytest.raises(BadInputError) as err:
        read_evo2_config(config)
    assert str(config) in str(err.value) and says in str(err.value) and "\n" not in str(err.value)


def test_a_missing_config_file_is_named(tmp_path):
    with pytest.raises(BadInputError, match=re.escape(f"--evo2-config {tmp_path / 'no.yaml'} cannot be read")):
        read_evo2_config(tmp_path / "no.yaml")


def test_lineage_tag_is_evo2s_string():
    assert lineage_tag(KLEB_TAXON, "x") == KLEB_TAG
    assert lineage_tag(NODE_1_TAXON, "x") == NODE_1_TAG
    assert lineage_tag({}, "x") == "|d__None;p__None;c__None;o__None;f__None;g__None;s__None|"


def test_the_docs_table_has_one_row_per_field():
    rows = mapping_markdown().splitlines()[2:]
    assert [row.split("`")[1] for row in rows] == list(FIELDS)
    assert all(row.count(" | ") == 3 for row in rows)  # pipes inside a cell are escaped


# --- --tags substring / --tag-map ------------------------------------------------------------------


def test_the_first_substring_in_table_order_wins():
    tag_of = tagger("substring", {"NODE_1_": "one", "NODE_": "any", "X": "x"})
    assert [tag_of(n) for n in ("NODE_1_length_5", "NODE_12_length_5", "Xa", "other")] == ["one", "any", "x", ""]


@pytest.mark.parametrize(
    "opts", [dict(tag_map={"NC": "t"}), dict(tags="substring"), dict(tags="lineage", tag_map={"NC": "t"})]
)
def test_tag_map_and_tags_substring_go_together(tmp_path, opts):
    with pytest.raises(BadInputError, match="--tag-map SUBSTRING=TAG and --tags substring go together"):
        prepare([LAMBDA], tmp_path / "out", PrepareOptions(split=(1, 0, 0), progress=False, **opts))
    assert not (tmp_path / "out").exists()


def test_tags_substring_tags_every_window_of_a_matching_sequence(tmp_path):
    out = tmp_path / "out"
    opts = PrepareOptions(
        seq_length=1024,
        split=(1, 0, 0),
        progress=False,
        workers=1,
        tags="substring",
        tag_map={"nothing": "no", "NC_0014": NODE_1_TAG},
    )
    prepare([LAMBDA], out, opts)
    tags = {tag for rows in shard_windows(out).values() for *_, tag in rows}
    assert tags == {NODE_1_TAG}
    assert read_manifest(out).request["tag_map"] == {"nothing": "no", "NC_0014": NODE_1_TAG}


def test_the_docs_carry_the_mapping_table():
    """docs/guide/megatron.md holds exactly the table `FIELDS` gives (regenerate it with `mapping_markdown`)."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "megatron.md").read_text()
    assert mapping_markdown() in page
