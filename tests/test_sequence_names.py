"""A split's sequence names are stored once: in the sequence table (format version 6), and datasets
of the versions before it, which named them in the manifest too (``seq_ids``), still read.

``tests/data/format_v4_windows`` and ``format_v5_sequences`` were written by `prepare` before
version 6 (tests/data/README.md says how): the 20 shortest Klebsiella contigs, both layouts.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import KLEBSIELLA, main_here, read_fasta, tree_bytes

from bionemo_wds import GenomicDataset
from bionemo_wds.errors import ManifestError
from bionemo_wds.format import FORMAT_VERSION, read_manifest
from bionemo_wds.format.manifest import dumps_manifest
from bionemo_wds.format.sequence_table import split_names
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.report import verify

DATA = Path(__file__).parent / "data"
#: The committed datasets of the versions before 6: (folder, version, layout).
OLDER = [("format_v4_windows", 4, "windows"), ("format_v5_sequences", 5, "sequences")]
#: How they were prepared (and how the version-6 twins below are).
#: What the committed datasets were prepared with; their split was the rule now named longest-first
#: (before the seeded rule), so today's run names it to give the same split
OPTIONS = {"seq_length": 256, "split": (0.6, 0.2, 0.2), "samples_per_shard": 16, "windows_per_record": 4}
OPTIONS |= {"split_rule": "longest-first"}


@pytest.fixture(scope="module")
def contigs() -> dict[str, str]:
    """The 20 shortest Klebsiella contigs, by node number (the committed datasets' input)."""
    kleb = read_fasta(KLEBSIELLA)
    names = sorted(sorted(kleb, key=lambda name: len(kleb[name]))[:20], key=lambda name: int(name.split("_")[1]))
    return {name: kleb[name] for name in names}


@pytest.fixture(scope="module")
def today(tmp_path_factory, contigs) -> dict[str, Path]:
    """The committed datasets' input prepared by this version, in both layouts."""
    tmp = tmp_path_factory.mktemp("names")
    fasta = tmp / "kleb_short.fa"
    fasta.write_text("".join(f">{name}\n{seq}\n" for name, seq in contigs.items()))
    out = {}
    for layout in ("windows", "sequences"):
        out[layout] = tmp / layout
        prepare([fasta], out[layout], PrepareOptions(**OPTIONS, layout=layout, workers=1, progress=False))
    return out


@pytest.fixture
def older(request, tmp_path) -> tuple[Path, int, str]:
    folder, version, layout = request.param
    root = tmp_path / folder
    shutil.copytree(DATA / folder, root)
    return root, version, layout


@pytest.mark.parametrize("layout", ["windows", "sequences"])
def test_version_6_names_the_sequences_in_the_table_alone(today, layout):
    """The manifest names no sequence; the table names them, the split the older version listed;
    only the manifest differs from what the older version wrote (its shards, indexes and table
    are byte for byte the same)."""
    root = today[layout]
    manifest = read_manifest(root)
    assert manifest.format_version == FORMAT_VERSION == 6 and manifest.params.layout == layout
    assert "seq_ids" not in (root / "manifest.json").read_text()
    assert all(info.seq_ids is None for info in manifest.splits.values())
    folder = next(folder for folder, _, kind in OLDER if kind == layout)
    old = read_manifest(DATA / folder)
    for split, info in manifest.splits.items():
        assert split_names(root, manifest, split) == old.splits[split].seq_ids, split
        assert len(old.splits[split].seq_ids or ()) == info.n_sequences
    new_files, old_files = tree_bytes(root), tree_bytes(DATA / folder)
    for files in (new_files, old_files):
        del files["manifest.json"]  # the table's last column, the input's path, differs: compare the rest
        files["sequences.tsv"] = b"\n".join(line.rpartition(b"\t")[0] for line in files["sequences.tsv"].split(b"\n"))
    assert new_files == old_files
    assert (root / "manifest.json").stat().st_size < (DATA / folder / "manifest.json").stat().st_size


@pytest.mark.parametrize("older", OLDER, indirect=True, ids=[folder for folder, _, _ in OLDER])
def test_an_older_dataset_still_loads_verifies_and_names_its_sequences(older, contigs, capsys):
    root, version, layout = older
    manifest = read_manifest(root)
    assert manifest.format_version == version and manifest.params.layout == layout
    for split, info in manifest.splits.items():
        assert info.seq_ids and split_names(root, manifest, split) == info.seq_ids
    report = verify(root, progress=False)
    assert report.ok, report.problems
    ds = GenomicDataset(str(root), "val", micro_batch_size=2, model_inputs=False, rc_prob=0.0, seed=1)
    seen = set()
    for batch in ds:
        for i, (name, start) in enumerate(zip(batch["seq_id"], np.asarray(batch["start"]).tolist())):
            if not name:
                continue
            bases = bytes(np.asarray(batch["bases"][i][: int(batch["lengths"][i])])).decode()
            assert bases == contigs[name][start : start + len(bases)], (name, start)
            seen.add(name)
    assert seen == set(manifest.splits["val"].seq_ids or ())
    shown = main_here(capsys, "inspect", root)
    assert shown.returncode == 0 and f"format v{version}" in shown.stdout


@pytest.mark.parametrize("older", OLDER[:1], indirect=True, ids=["format_v4_windows"])
def test_verify_names_seq_ids_that_disagree_with_the_table(older):
    """Where a dataset names its sequences twice (versions 3-5), verify checks one against the other."""
    root, _, _ = older
    obj = json.loads((root / "manifest.json").read_text())
    obj["splits"]["val"]["seq_ids"][0] = "not_in_the_table"
    (root / "manifest.json").write_text(dumps_manifest(obj))
    problems = verify(root, progress=False).problems
    assert any(
        "sequences.tsv" in p and "val rows name other sequences than the manifest's seq_ids" in p for p in problems
    )


def test_a_version_6_manifest_without_its_table_entry_is_refused(today, tmp_path):
    root = tmp_path / "no-table"
    shutil.copytree(today["windows"], root)
    obj = json.loads((root / "manifest.json").read_text())
    del obj["sequence_table"]
    (root / "manifest.json").write_text(dumps_manifest(obj))
    with pytest.raises(ManifestError, match=r"manifest\.json is damaged: it has no sequence_table"):
        read_manifest(root)
