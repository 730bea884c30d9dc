"""`prepare --group-by similarity:T` end to end: near-identical copies (1% substitutions) of Klebsiella
contigs planted in a second input land in their originals' split, a distant copy (20%) does not join
its original's cluster, the manifest records the clusters; the same bytes for one worker, a process
pool of two and a Dask LocalCluster of two; bad rules and a missing sourmash exit 2 naming what to do."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import KLEBSIELLA, read_fasta, split_seq_ids, tree_bytes, write_fasta

from bionemo_wds.cli import main
from bionemo_wds.format import read_manifest
from bionemo_wds.homology.similarity import clusters, near_identical_pairs
from bionemo_wds.homology.sketch import Sketches, SketchParams, sketch_hashes
from bionemo_wds.prepare import similarity_groups

pytest.importorskip("sourmash")

RULE = "similarity:0.95"
#: Planted near-identical copies (1% substitutions) of this many Klebsiella contigs.
NEAR_COPIES = 6


def mutate(seq: str, rate: float, seed: int) -> str:
    """`seq` with each base replaced by another one with probability `rate` (seeded)."""
    rng = np.random.default_rng(seed)
    alphabet = np.frombuffer(b"ACGT", np.uint8)
    index = np.searchsorted(alphabet, np.frombuffer(seq.upper().encode(), np.uint8))
    change = rng.random(len(index)) < rate
    index[change] = (index[change] + rng.integers(1, 4, int(change.sum()))) % 4
    return alphabet[index].tobytes().decode()


def kleb_sketches() -> Sketches:
    params = SketchParams()
    seqs = read_fasta(KLEBSIELLA)
    return Sketches.build(
        params, list(seqs), [len(s) for s in seqs.values()], [sketch_hashes([s], params) for s in seqs.values()]
    )


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> dict:
    """A second FASTA with 1% copies of `NEAR_COPIES` contigs that are alone in their cluster (20 to
    150 kb) and a 20% copy of another; with the Klebsiella assembly's own clusters and pairs."""
    seqs = read_fasta(KLEBSIELLA)
    sketches = kleb_sketches()
    labels = clusters(sketches, 0.95)
    alone = [
        name
        for i, name in enumerate(sketches.names)
        if (labels == labels[i]).sum() == 1 and 20_000 <= len(seqs[name]) <= 150_000
    ]
    near, far = alone[:NEAR_COPIES], alone[NEAR_COPIES]
    copies = {f"near_{name}": mutate(seqs[name], 0.01, seed=i) for i, name in enumerate(near)}
    copies[f"far_{far}"] = mutate(seqs[far], 0.20, seed=99)
    path = write_fasta(tmp_path_factory.mktemp("planted") / "planted.fa", copies)
    return {
        "fasta": path,
        "near": near,
        "far": far,
        "kleb_clusters": len(np.unique(labels)),
        "kleb_pairs": len(near_identical_pairs(sketches, 0.95).query),
    }


def prepare_args(out: Path, planted_fa: Path, *extra: str, rule: str = RULE) -> list[str]:
    return [
        "prepare",
        str(KLEBSIELLA),
        str(planted_fa),
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
        "--quiet",
        *extra,
    ]


@pytest.fixture(scope="module")
def one_worker(tmp_path_factory, planted) -> Path:
    out = tmp_path_factory.mktemp("one") / "out"
    assert main(prepare_args(out, planted["fasta"], "--workers", "1")) == 0
    return out


def split_of(out: Path) -> dict[str, str]:
    return {seq_id: split for split in read_manifest(out).splits for seq_id in split_seq_ids(out, split)}


def test_near_identical_copies_land_in_their_originals_split(one_worker, planted):
    where = split_of(one_worker)
    assert len(where) == 119 + NEAR_COPIES + 1
    for name in planted["near"]:
        assert where[f"near_{name}"] == where[name], name
    # the copies' originals are spread over the splits as the split chose, not all in one by rule
    manifest = read_manifest(one_worker)
    notes = manifest.params.source["group_by"]
    assert notes["rule"] == RULE and notes["ungrouped_sequences"] == 0
    # every 1% copy joins its original's cluster; the 20% copy is a cluster of its own
    assert notes["groups"] == planted["kleb_clusters"] + 1
    similarity = notes["similarity"]
    assert similarity["near_identical_pairs"] == planted["kleb_pairs"] + NEAR_COPIES
    assert similarity["threshold"] == 0.95 and similarity["ksize"] == 21 and similarity["scaled"] == 100
    assert "containment ANI" in similarity["measure"]
    assert similarity["multi_member_clusters"] >= NEAR_COPIES
    assert manifest.params.group_by == RULE


def test_the_grouped_split_keeps_the_requested_fractions(one_worker):
    splits = read_manifest(one_worker).splits
    total = sum(info.n_bases for info in splits.values())
    share = {name: info.n_bases / total for name, info in splits.items()}
    assert share["train"] == pytest.approx(0.8, abs=0.06), share
    assert share["val"] == pytest.approx(0.1, abs=0.04), share
    assert share["test"] == pytest.approx(0.1, abs=0.04), share


@pytest.mark.slow
def test_one_worker_a_pool_and_dask_write_the_same_bytes(tmp_path, one_worker, planted, monkeypatch, dask_scheduler):
    monkeypatch.setattr(similarity_groups, "TASK_BASES", 1_000_000)  # several sketch tasks
    made: list[int] = []
    tasks_of = similarity_groups.tasks_of

    def counted(*args, **kwargs):
        tasks = tasks_of(*args, **kwargs)
        made.append(len(tasks))
        return tasks

    monkeypatch.setattr(similarity_groups, "tasks_of", counted)
    pool = tmp_path / "pool"
    assert main(prepare_args(pool, planted["fasta"], "--workers", "2")) == 0
    assert tree_bytes(pool) == tree_bytes(one_worker)
    dask = tmp_path / "dask"
    on_cluster = ("--executor", "dask", "--scheduler", dask_scheduler, "--workers", "2")
    assert main(prepare_args(dask, planted["fasta"], *on_cluster)) == 0
    assert tree_bytes(dask) == tree_bytes(one_worker)
    assert len(made) == 2 and min(made) > 4


THRESHOLD = "similarity:T needs a threshold T from 0.5 to 1 (an estimated ANI)"
KSIZE = "similarity:T,k=K needs an odd k-mer size K from 7 to 31"


@pytest.mark.parametrize(
    ("rule", "message"),
    [
        ("similarity:", THRESHOLD),
        ("similarity:abc", THRESHOLD),
        ("similarity:1.5", THRESHOLD),
        ("similarity:0.95,k=22", KSIZE),
        ("similarity:0.95,k=41", KSIZE),
        ("similarity:0.95,scaled=0", "similarity:T,scaled=S needs S from 1 to 1000000 (one k-mer in S kept)"),
        ("similarity:0.95,foo=1", "similarity:T takes only k=K and scaled=S after the threshold, not 'foo=1'"),
    ],
)
def test_bad_similarity_rules_exit_2_before_anything_is_written(tmp_path, capsys, planted, rule, message):
    out = tmp_path / "out"
    assert main(prepare_args(out, planted["fasta"], rule=rule)) == 2
    assert capsys.readouterr().err == f"bionemo-wds prepare: error: --group-by {message}, got {rule!r}\n"
    assert not out.exists()


def test_without_sourmash_the_error_names_the_extra(tmp_path, capsys, planted, monkeypatch):
    monkeypatch.setitem(sys.modules, "sourmash", None)  # `import sourmash` raises ImportError
    out = tmp_path / "out"
    assert main(prepare_args(out, planted["fasta"])) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "needs sourmash, which is not installed: pip install 'bionemo-wds[homology]'" in err
    assert not out.exists()
    assert not Path(f"{out}.lock").exists()
