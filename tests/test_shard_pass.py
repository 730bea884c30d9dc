"""`contains` and `leakage` read the shards as tasks (this process, a pool, Dask) and merge them into
exactly what one front-to-back pass gives: the reference below is that pass, as it was written
before the tasks (one process, `stored_documents`), on datasets cut so that sequences run across
many task boundaries, some in fragments shorter than a k-mer."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from conftest import LAMBDA, read_fasta, write_fasta

from bionemo_wds.core.distinct import distinct
from bionemo_wds.format import read_manifest
from bionemo_wds.format.stored_records import stored_documents
from bionemo_wds.homology import shard_pass
from bionemo_wds.homology.kmers import canonical_kmers
from bionemo_wds.homology.leakage import leakage
from bionemo_wds.homology.sketch import Sketches, SketchParams
from bionemo_wds.homology.sketch_cache import INDEX_PATH
from bionemo_wds.homology.stored import QueryKmers, read_splits
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.executors.tasks import TaskPlace
from bionemo_wds.storage.store import Store

pytest.importorskip("sourmash")
#: Every k-mer hashed (scaled 1), short k: any k-mer lost or invented at a task boundary shows.
PARAMS = SketchParams(ksize=15, scaled=1)
#: Lengths around the piece (61 bases at --seq-length 64): last pieces of 1, 5, 13 bases (under k - 1).
LENGTHS = [61 * 3 + 5, 61 * 2 + 13, 200, 9, 61 * 4, 700, 62, 61 * 5 + 1, 150, 333]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, Path]:
    """Pieces of lambda (one with Ns and lower case), prepared in both layouts, one window or piece per shard."""
    (lam,) = read_fasta(LAMBDA).values()
    tmp = tmp_path_factory.mktemp("shard_pass")
    seqs, at = {}, 0
    for i, n in enumerate(LENGTHS):
        seqs[f"s{i}"], at = lam[at : at + n], at + n
    seqs["s3"] = seqs["s3"].lower()
    seqs["s5"] = seqs["s5"][:300] + "NNNNN" + seqs["s5"][305:].lower()
    fasta = write_fasta(tmp / "pieces.fa", seqs)
    out = {}
    for layout in ("sequences", "windows"):
        out[layout] = tmp / layout
        opts = PrepareOptions(
            seq_length=64, split=(0.5, 0.5, 0.0), samples_per_shard=1, windows_per_record=1, layout=layout, workers=1
        )
        prepare([fasta], out[layout], opts)
    return out


def reference(root: Path, split: str, sequences: bool, queries: QueryKmers) -> tuple[Sketches, dict]:
    """The one-process pass `read_split` made before it ran as tasks."""
    import sourmash

    sketch, span, found = {}, {}, {}
    for seq_id, start, bases in stored_documents(Store(root), split, sequences, "", False):
        mh = sketch.get(seq_id)
        if mh is None:
            mh = sketch[seq_id] = sourmash.MinHash(n=0, ksize=PARAMS.ksize, scaled=PARAMS.scaled)
            span[seq_id] = [start, start + len(bases), 0]
        if len(bases) >= PARAMS.ksize:
            mh.add_sequence(bases.tobytes().decode("ascii", "replace"), force=True)
        where = span[seq_id]
        where[0], where[1] = min(where[0], start), max(where[1], start + len(bases))
        where[2] += len(bases)
        hits = queries.found_in(bases)
        if len(hits):
            found.setdefault(seq_id, []).append(hits)
    names = list(sketch)
    covered = [span[n][1] - span[n][0] if not sequences else span[n][2] for n in names]
    hashes = [np.sort(np.fromiter(sketch[n].hashes, dtype=np.uint64, count=len(sketch[n]))) for n in names]
    return Sketches.build(PARAMS, names, covered, hashes), {n: distinct(np.concatenate(p)) for n, p in found.items()}


@pytest.fixture(scope="module")
def queries() -> QueryKmers:
    (lam,) = read_fasta(LAMBDA).values()
    return QueryKmers.of([canonical_kmers(lam[:2000].encode(), PARAMS.ksize)], PARAMS.ksize)


def answers(root: Path, queries: QueryKmers, place: TaskPlace) -> list[tuple]:
    sequences = read_manifest(root).params.layout == "sequences"
    out = []
    for stored in read_splits(Store(root), ["train", "val"], sequences, PARAMS, queries, place, keep=False):
        s = stored.sketches
        found = sorted((name, codes.tolist()) for name, codes in stored.found.items())
        out.append((s.names, s.lengths.tolist(), s.hashes.tolist(), s.offsets.tolist(), found))
    return out


def expected(root: Path, queries: QueryKmers) -> list[tuple]:
    sequences = read_manifest(root).params.layout == "sequences"
    out = []
    for split in ("train", "val"):
        s, found = reference(root, split, sequences, queries)
        listed = sorted((name, codes.tolist()) for name, codes in found.items())
        out.append((s.names, s.lengths.tolist(), s.hashes.tolist(), s.offsets.tolist(), listed))
    return out


@pytest.mark.parametrize("layout", ["sequences", "windows"])
def test_tasks_in_this_process_give_the_one_pass_answer(datasets, queries, layout, monkeypatch):
    root = datasets[layout]
    want = expected(root, queries)
    assert answers(root, queries, TaskPlace()) == want  # a few tasks per split
    monkeypatch.setattr(shard_pass, "TASK_BYTES", 1)  # a task per shard: a boundary at every piece
    assert len(shard_pass.shard_ranges({"train": read_manifest(root).splits["train"].shards}, 1)) > 20
    assert answers(root, queries, TaskPlace()) == want


def test_the_join_adds_the_kmers_across_task_boundaries(datasets, queries, monkeypatch):
    """Without the k-mers across boundaries the answer differs: the check above can fail."""
    root = datasets["sequences"]
    monkeypatch.setattr(shard_pass, "TASK_BYTES", 1)
    monkeypatch.setattr(shard_pass, "add_across", lambda *args: None)
    assert answers(root, queries, TaskPlace()) != expected(root, queries)


def test_a_pool_gives_the_one_pass_answer(datasets, queries):
    root = datasets["sequences"]
    assert answers(root, queries, TaskPlace(workers=2)) == expected(root, queries)


@pytest.mark.slow
def test_dask_gives_the_one_pass_answer(datasets, queries, dask_scheduler):
    root = datasets["sequences"]
    place = TaskPlace("dask", 2, dask_scheduler)
    assert answers(root, queries, place) == expected(root, queries)


# --- sketches kept beside the dataset -----------------------------------------------------------------------


def counting_reads(monkeypatch) -> list:
    """Count the shard-reading tasks from here on."""
    calls: list = []
    real = shard_pass.read_range

    def read_range(context, task):
        calls.append(task)
        return real(context, task)

    monkeypatch.setattr(shard_pass, "read_range", read_range)
    return calls


def test_a_repeated_leakage_reads_no_shard(datasets, tmp_path, monkeypatch):
    root = tmp_path / "ds"
    shutil.copytree(datasets["windows"], root)
    params = SketchParams(ksize=15, scaled=10)
    calls = counting_reads(monkeypatch)
    first = asdict(leakage(str(root), params=params))
    assert calls and {task.split for task in calls} == {"train", "val"}
    listed = json.loads((root / INDEX_PATH).read_text())["sketches"]
    assert sorted(listed) == ["train-k15-s10", "val-k15-s10"]
    calls.clear()
    assert asdict(leakage(str(root), params=params)) == first and calls == []  # the kept sketches, no shard
    leakage(str(root), params=SketchParams(ksize=17, scaled=10))  # other parameters: read, and kept too
    assert calls and len(json.loads((root / INDEX_PATH).read_text())["sketches"]) == 4
    calls.clear()
    kept = root / listed["val-k15-s10"]["path"]
    kept.write_bytes(kept.read_bytes()[:-1] + b"x")  # damaged: read again, the same answer, kept anew
    assert asdict(leakage(str(root), params=params)) == first
    assert {task.split for task in calls} == {"val"}
    calls.clear()
    assert asdict(leakage(str(root), params=params)) == first and calls == []


def test_sketches_of_other_shards_are_not_used(datasets, tmp_path, monkeypatch):
    """Kept sketches name the shards they were made from (paths and sha256s): another dataset's, or
    this one prepared again with other shards, are read afresh; prepare --overwrite removes them."""
    root = tmp_path / "ds"
    shutil.copytree(datasets["windows"], root)
    params = SketchParams(ksize=15, scaled=10)
    leakage(str(root), params=params)
    shutil.copytree(datasets["sequences"], tmp_path / "other")
    shutil.copytree(root / "sketches", tmp_path / "other" / "sketches")
    calls = counting_reads(monkeypatch)
    leakage(str(tmp_path / "other"), params=params)
    assert {task.split for task in calls} == {"train", "val"}
    manifest = read_manifest(root)
    fasta = Path(manifest.request["inputs"][0]["path"])
    opts = PrepareOptions(seq_length=80, split=(0.5, 0.5, 0.0), workers=1, overwrite=True)
    prepare([fasta], root, opts)
    assert not (root / "sketches").exists()
