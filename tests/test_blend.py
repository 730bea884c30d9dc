"""A blend specification: the data-module form, Evo2's YAML, split names, weights and every refusal."""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bionemo_wds.errors import BadInputError
from bionemo_wds.load.blend_file import BlendEntry, BlendError, entries_for, parse_datasets, read_blend, shares

EXAMPLE = Path(__file__).resolve().parents[1] / "configs" / "blend_example.yaml"


def write(tmp_path: Path, text: str, name: str = "blend.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- the data-module form ---------------------------------------------------------------------------


def test_datasets_form_keeps_paths_and_defaults_split_and_name():
    entries = parse_datasets(
        [
            {"path": "data/ecoli", "weight": 3},
            {"path": "s3://bucket/runs/lambda/", "weight": 0.5, "split": "validation", "name": "phage"},
            {"path": "/abs/klebsiella", "weight": 1.0, "split": "test"},
        ]
    )
    assert entries == [
        BlendEntry("data/ecoli", 3.0, "train", "ecoli"),
        BlendEntry("s3://bucket/runs/lambda/", 0.5, "val", "phage"),
        BlendEntry("/abs/klebsiella", 1.0, "test", "klebsiella"),
    ]
    assert isinstance(entries[0].weight, float)
    assert parse_datasets([{"path": "https://host/run", "weight": 1}])[0].name == "run"


def test_a_pathlike_path_is_kept_as_its_string(tmp_path: Path):
    assert parse_datasets([{"path": tmp_path / "ecoli", "weight": 1}])[0].path == str(tmp_path / "ecoli")


@pytest.mark.parametrize(
    ("datasets", "message"),
    [
        ([], "empty"),
        ("data/ecoli", "must be a list"),
        ({"path": "data/ecoli", "weight": 1}, "must be a list"),
        (["data/ecoli"], r"datasets\[0\]: must be a mapping"),
        ([{"path": "a", "weight": 1}, {"path": "b", "wieght": 1}], r"datasets\[1\]: unknown key\(s\) 'wieght'"),
        ([{"weight": 1}], r"datasets\[0\]: missing key\(s\) 'path'"),
        ([{"path": "a"}], r"datasets\[0\]: missing key\(s\) 'weight'"),
        ([{"path": "", "weight": 1}], r"datasets\[0\] \(''\): path must be a non-empty string"),
        ([{"path": "  ", "weight": 1}], "path must be a non-empty string"),
        ([{"path": 7, "weight": 1}], "path must be a non-empty string"),
        ([{"path": "a", "weight": 1}, {"path": "b", "weight": 0}], r"datasets\[1\] \('b'\): .*never be read"),
        ([{"path": "a", "weight": -1}], r"datasets\[0\] \('a'\): weight must be a finite number > 0"),
        ([{"path": "a", "weight": math.nan}], "finite number > 0"),
        ([{"path": "a", "weight": math.inf}], "finite number > 0"),
        ([{"path": "a", "weight": "0.5"}], "weight must be a number"),
        ([{"path": "a", "weight": True}], "weight must be a number"),
        ([{"path": "a", "weight": 1, "split": "training"}], r"datasets\[0\] \('a'\): split 'training' is not one of"),
        ([{"path": "a", "weight": 1, "split": "Val"}], "split 'Val'"),
        ([{"path": "a", "weight": 1, "name": 3}], "name must be a string"),
        (
            [{"path": "a", "weight": 1}, {"path": "a", "weight": 2, "split": "train"}],
            r"datasets\[1\] \('a'\) repeats datasets\[0\] \('a'\)",
        ),
    ],
)
def test_datasets_form_refusals_name_the_entry(datasets, message):
    with pytest.raises(ValueError, match=message):
        parse_datasets(datasets)


def test_refusals_are_bad_input_for_the_cli():
    with pytest.raises(BadInputError):
        parse_datasets([])
    assert issubclass(BlendError, ValueError)


def test_the_same_dataset_may_appear_in_different_splits():
    entries = parse_datasets([{"path": "a", "weight": 1}, {"path": "a", "weight": 1, "split": "val"}])
    assert [e.split for e in entries] == ["train", "val"]


def test_entries_are_checked_when_built_directly():
    assert BlendEntry("a", 1, "validation").split == "val"
    with pytest.raises(ValueError, match="finite number > 0"):
        BlendEntry("a", 0.0)


# --- Evo2's YAML ----------------------------------------------------------------------------------

EVO2 = """\
- dataset_prefix: /data/gtdb_v220/gtdb_v220_imgpr_merged_data_train_text_CharLevelTokenizer_document
  dataset_split: train
  dataset_weight: 0.18
- dataset_prefix: s3://bucket/imgvr/imgvr_untagged_train
  dataset_split: train
  dataset_weight: 0.01
- dataset_prefix: /data/gtdb_v220/gtdb_valid
  dataset_split: validation
  dataset_weight: 0.5
- dataset_prefix: /data/gtdb_v220/gtdb_test
  dataset_split: test
  dataset_weight: 1
"""


def test_evo2_yaml(tmp_path: Path):
    entries = read_blend(write(tmp_path, EVO2))
    assert entries == [
        BlendEntry(
            "/data/gtdb_v220/gtdb_v220_imgpr_merged_data_train_text_CharLevelTokenizer_document",
            0.18,
            "train",
            "gtdb_v220_imgpr_merged_data_train_text_CharLevelTokenizer_document",
        ),
        BlendEntry("s3://bucket/imgvr/imgvr_untagged_train", 0.01, "train", "imgvr_untagged_train"),
        BlendEntry("/data/gtdb_v220/gtdb_valid", 0.5, "val", "gtdb_valid"),
        BlendEntry("/data/gtdb_v220/gtdb_test", 1.0, "test", "gtdb_test"),
    ]
    assert [e.name for e in entries_for(entries, "validation")] == ["gtdb_valid"]
    assert entries_for(entries, "val") == entries_for(entries, "validation")
    assert [e.name for e in entries_for(entries, "train")] == [entries[0].name, "imgvr_untagged_train"]
    assert entries_for(parse_datasets([{"path": "a", "weight": 1}]), "test") == []


def test_evo2_val_is_accepted_as_well(tmp_path: Path):
    entries = read_blend(write(tmp_path, "- {dataset_prefix: /d/x, dataset_split: val, dataset_weight: 2}\n"))
    assert entries == [BlendEntry("/d/x", 2.0, "val", "x")]


def test_dataset_path_is_joined_onto_a_relative_prefix(tmp_path: Path):
    text = """\
- {dataset_prefix: ecoli, dataset_path: /mnt/prepared, dataset_split: train, dataset_weight: 1}
- {dataset_prefix: lambda, dataset_path: s3://bucket/prepared/, dataset_split: train, dataset_weight: 1}
- {dataset_prefix: /abs/klebsiella, dataset_path: /mnt/prepared, dataset_split: train, dataset_weight: 1}
- {dataset_prefix: s3://other/run, dataset_path: /mnt/prepared, dataset_split: train, dataset_weight: 1}
- {dataset_prefix: ecoli, dataset_path: relative/base, dataset_split: val, dataset_weight: 1}
- {dataset_prefix: ecoli, dataset_path: null, dataset_split: test, dataset_weight: 1}
"""
    paths = [e.path for e in read_blend(write(tmp_path, text))]
    assert paths == [
        "/mnt/prepared/ecoli",
        "s3://bucket/prepared/lambda",
        "/abs/klebsiella",  # an absolute prefix wins over dataset_path, as in Evo2
        "s3://other/run",
        str(tmp_path / "relative" / "base" / "ecoli"),
        str(tmp_path / "ecoli"),
    ]


def test_relative_prefixes_resolve_against_the_yaml_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "configs").mkdir()
    path = write(tmp_path / "configs", "- {dataset_prefix: ../data/ecoli, dataset_split: train, dataset_weight: 1}\n")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert read_blend(os.path.relpath(path)) == [BlendEntry(str(tmp_path / "data" / "ecoli"), 1.0, "train", "ecoli")]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "is empty"),
        ("[]\n", "is an empty list"),
        ("dataset_prefix: a\ndataset_split: train\n", "must be a YAML list of entries.*not a dict"),
        ("- a\n- b\n", r"entry 1 \(line 1\): must be a mapping"),
        (
            "- {dataset_prefix: /a, dataset_split: train, dataset_weight: 1}\n"
            "- dataset_prefix: /b\n  dataset_split: train\n  dataset_wieght: 1\n",
            r"entry 2 \(line 2\): unknown key\(s\) 'dataset_wieght'",
        ),
        ("- {dataset_prefix: /a, dataset_split: train}\n", r"entry 1 \(line 1\): missing key\(s\) 'dataset_weight'"),
        ("- {dataset_split: train, dataset_weight: 1}\n", r"entry 1 \(line 1\): missing key\(s\) 'dataset_prefix'"),
        ("- {dataset_prefix: /a, dataset_weight: 1}\n", r"missing key\(s\) 'dataset_split'"),
        ("- {dataset_prefix: /a, dataset_split: train, dataset_weight: 1, name: x}\n", r"unknown key\(s\) 'name'"),
        ("- {dataset_prefix: /a, dataset_split: train, dataset_weight: 0}\n", r"entry 1 \(line 1\) \('/a'\): .*never"),
        ("- {dataset_prefix: /a, dataset_split: train, dataset_weight: -0.1}\n", "finite number > 0"),
        ("- {dataset_prefix: /a, dataset_split: train, dataset_weight: .nan}\n", "finite number > 0"),
        ("- {dataset_prefix: /a, dataset_split: train, dataset_weight: .inf}\n", "finite number > 0"),
        ("- {dataset_prefix: /a, dataset_split: train, dataset_weight: '0.5'}\n", "weight must be a number"),
        ("- {dataset_prefix: /a, dataset_split: valid, dataset_weight: 1}\n", "split 'valid' is not one of"),
        ("- {dataset_prefix: '', dataset_split: train, dataset_weight: 1}\n", "dataset_prefix must be a non-empty"),
        ("- {dataset_prefix: 5, dataset_split: train, dataset_weight: 1}\n", "dataset_prefix must be a non-empty"),
        ("- {dataset_prefix: a, dataset_path: '', dataset_split: train, dataset_weight: 1}\n", "dataset_path must be"),
        ("- {dataset_prefix: a, dataset_split: train\n", r"is not valid YAML \(line 2, column 1\): .*flow mapping"),
        ("- {dataset_prefix: /a, dataset_split: train, dataset_weight: 1}\n- a: b: c\n", r"YAML \(line 2, column 7\)"),
        ("- !!python/object:os.system x\n", "is not valid YAML.*constructor"),
        ("- dataset_prefix: a\n  dataset_split: [train\n", "is not valid YAML"),
        (
            "- {dataset_prefix: /a, dataset_split: train, dataset_weight: 1}\n"
            "- {dataset_prefix: /a/, dataset_split: train, dataset_weight: 1}\n",
            r"entry 2 \(line 2\) \('/a/'\) repeats .*entry 1",
        ),
    ],
)
def test_evo2_refusals_name_the_file_and_entry(tmp_path: Path, text: str, message: str):
    path = write(tmp_path, text)
    with pytest.raises(ValueError, match=message) as caught:
        read_blend(path)
    assert str(path) in str(caught.value)


def test_unreadable_or_missing_file_is_named(tmp_path: Path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ValueError, match=re.escape(f"cannot read blend file {missing}")):
        read_blend(missing)
    with pytest.raises(ValueError, match="cannot read blend file"):
        read_blend(tmp_path)  # a directory
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ValueError, match=re.escape(f"cannot read blend file {binary}")):
        read_blend(binary)


def test_the_example_config_parses():
    entries = read_blend(EXAMPLE)
    data = EXAMPLE.parent / "data"
    train = entries_for(entries, "train")
    assert [(e.path, e.name) for e in train] == [
        (str(data / "klebsiella"), "klebsiella"),
        (str(data / "lambda"), "lambda"),
        (str(data / "ecoli"), "ecoli"),
    ]
    assert shares(train) == pytest.approx([0.6, 0.3, 0.1])
    assert [e.name for e in entries_for(entries, "val")] == ["klebsiella", "lambda", "ecoli"]
    assert shares(entries_for(entries, "val")) == pytest.approx([1 / 3] * 3)
    assert entries_for(entries, "test") == []


# --- shares ---------------------------------------------------------------------------------------


def test_shares_need_not_sum_to_one_to_start_with():
    entries = parse_datasets([{"path": "a", "weight": 2}, {"path": "b", "weight": 6}])
    assert shares(entries) == [0.25, 0.75]


def test_shares_refuse_nothing_and_mixed_splits():
    with pytest.raises(ValueError, match="no entries"):
        shares([])
    mixed = parse_datasets([{"path": "a", "weight": 1}, {"path": "b", "weight": 1, "split": "val"}])
    with pytest.raises(ValueError, match=r"several splits.*entries_for"):
        shares(mixed)


def test_shares_of_huge_weights_do_not_overflow():
    entries = [BlendEntry("a", 1e308), BlendEntry("b", 1e308), BlendEntry("c", 5e307)]
    assert shares(entries) == pytest.approx([0.4, 0.4, 0.2])


@given(st.lists(st.floats(min_value=1e-6, max_value=1e6), min_size=1, max_size=60))
def test_shares_sum_to_one_and_keep_the_ratios(weights: list[float]):
    entries = [BlendEntry(f"data/d{i}", w) for i, w in enumerate(weights)]
    got = shares(entries)
    assert len(got) == len(weights)
    assert abs(math.fsum(got) - 1.0) <= 1e-9
    assert all(s > 0 for s in got)
    for i in range(len(weights)):
        assert got[i] / got[0] == pytest.approx(weights[i] / weights[0], rel=1e-9)
