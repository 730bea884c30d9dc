"""tools/shuffle_quality.py --sorted-files: the recipe's buffer shuffle, the mixing figures on orders made by
hand, the corpus's shape, and the tool end to end at a tiny size (ours mixes lengths better than the
buffer over files sorted longest first)."""

from __future__ import annotations

import gzip
import json
import re

import numpy as np
import pytest

from benchmarks import sorted_files_shuffle as tool
from benchmarks.buffer_shuffle import buffer_shuffle, files_of_rank, recipe_order
from benchmarks.length_mix import (
    batch_distances,
    bucket_of,
    distinct_per_block,
    global_batches,
    length_edges,
    order_metrics,
    shares,
)
from benchmarks.sorted_corpus import write_sorted_corpus


def test_buffer_shuffle_yields_every_item_once_seeded_and_no_further_ahead_than_the_buffer() -> None:
    items = list(range(5000))
    out = list(buffer_shuffle(items, 300, seed=4))
    assert sorted(out) == items and out != items
    assert out == list(buffer_shuffle(iter(items), 300, seed=4))  # any iterable, the same order
    assert out != list(buffer_shuffle(items, 300, seed=5))
    # at output p only the first p + 301 items have been read: nothing comes from further ahead,
    # and the fill-then-swap rule yields slot contents, so early items can wait long
    ahead = np.array(out) - np.arange(len(out))
    assert ahead.max() <= 300 and ahead.max() > 250
    small = list(buffer_shuffle(range(50), 1000, seed=1))  # a buffer larger than the stream: shuffled whole
    assert sorted(small) == list(range(50)) and small != list(range(50))
    with pytest.raises(ValueError):
        list(buffer_shuffle(items, 0, seed=1))


def test_files_are_dealt_in_contiguous_blocks_or_strided_when_ranks_outnumber_them() -> None:
    assert [files_of_rank(10, r, 4) for r in range(4)] == [
        ([0, 1, 2], 1),
        ([3, 4, 5], 1),
        ([6, 7], 1),
        ([8, 9], 1),
    ]
    assert files_of_rank(2, 3, 5) == ([0, 1], 5)
    files = [np.arange(0, 100), np.arange(100, 200), np.arange(200, 300)]
    ranks = [recipe_order(files, r, 3, 10, seed=0) for r in range(3)]
    assert [set(r.tolist()) for r in ranks] == [set(f.tolist()) for f in files]
    strided = [recipe_order(files, r, 4, 10, seed=0) for r in range(4)]
    assert sorted(np.concatenate(strided).tolist()) == list(range(300))


def sorted_files(n_files: int = 8, per_file: int = 2000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(length, file) of every sample of `n_files` files, each sorted longest first."""
    rng = np.random.default_rng(seed)
    lengths = np.concatenate([np.sort(rng.lognormal(8, 1, per_file))[::-1] for _ in range(n_files)])
    return lengths, np.repeat(np.arange(n_files), per_file)


def test_a_sorted_order_is_far_from_the_corpus_mix_and_reads_one_file_at_a_time() -> None:
    lengths, files = sorted_files()
    edges = length_edges(lengths)
    corpus = shares(bucket_of(lengths, edges), len(edges) + 1)[0]
    assert len(edges) == 9 and np.allclose(corpus, 0.1)  # deciles: a tenth of the samples each
    in_order = order_metrics([lengths], [files], edges, corpus, micro_batch=32)
    assert in_order["distance_mean"] > 0.85  # a batch of one or two buckets: 0.9 from the corpus's mix
    assert in_order["files_per_block_mean"] == in_order["files_per_block_min"] == 1
    perm = np.random.default_rng(1).permutation(len(lengths))
    shuffled = order_metrics([lengths[perm]], [files[perm]], edges, corpus, micro_batch=32)
    assert shuffled["distance_mean"] < 0.3 and shuffled["files_per_block_min"] == 8
    # two ranks each reading a sorted half: still far, step t's batch holds both ranks' t-th batches
    halves = order_metrics([lengths[:8000], lengths[8000:]], [files[:8000], files[8000:]], edges, corpus, 16)
    assert halves["distance_mean"] > 0.8 and halves["batches"] == 500


def test_global_batches_distances_and_blocks_by_hand() -> None:
    a, b = np.arange(10), np.arange(100, 107)
    assert global_batches([a, b], 3).tolist() == [[0, 1, 2, 100, 101, 102], [3, 4, 5, 103, 104, 105]]
    corpus = np.array([0.5, 0.5])
    assert batch_distances(np.array([[0, 1], [0, 0], [1, 1]]), corpus).tolist() == [0.0, 0.5, 0.5]
    assert distinct_per_block(np.array([1, 1, 2, 3, 3, 3, 9]), 3).tolist() == [2, 1]
    assert bucket_of(np.array([1, 5, 10, 11]), np.array([5, 10])).tolist() == [0, 1, 2, 2]


def test_the_corpus_is_opengenome2_named_and_sorted_longest_first(tmp_path) -> None:
    corpus = write_sorted_corpus(tmp_path, files=2, windows_per_file=300, seq_length=512, seed=3)
    assert [f.name for f in corpus.files] == [
        "data_metagenomics_train_chunk1.jsonl.gz",
        "data_metagenomics_train_chunk2.jsonl.gz",
    ]
    for path, lengths in zip(corpus.files, corpus.lengths):
        records = [json.loads(line) for line in gzip.open(path, "rt")]
        assert [len(r["text"]) for r in records] == lengths.tolist()
        assert (np.diff(lengths) <= 0).all() and lengths.min() >= 200 and len(set(lengths.tolist())) > 10
        assert set("".join(r["text"] for r in records[:5])) <= set("ACGTN")
    assert "record" in json.loads(gzip.open(corpus.files[1], "rt").readline())  # the schemas differ
    again = write_sorted_corpus(tmp_path / "again", files=2, windows_per_file=300, seq_length=512, seed=3)
    assert [f.read_bytes() for f in again.files] == [f.read_bytes() for f in corpus.files]


def test_the_tool_end_to_end_ours_mixes_lengths_better_than_the_buffer(tmp_path, capsys) -> None:
    argv = ["--files", "4", "--windows-per-file", "1200", "--seq-length", "512", "--buffer", "600"]
    assert tool.main([*argv, "--world", "2", "--batch-size", "8", "--workdir", str(tmp_path), "--json"]) == 0
    out = capsys.readouterr().out
    assert "4 files x" in out and re.search(r"recipe buffer 600 windows \(0\.[45]\d of a file\)", out)
    result = json.loads(out.strip().splitlines()[-1])
    ours, recipe, rand = (result["orders"][k] for k in ("ours", "recipe", "random"))
    assert recipe["distance_mean"] > 1.2 * ours["distance_mean"]
    assert abs(ours["distance_mean"] - rand["distance_mean"]) < 0.05  # as good as a uniform shuffle
    assert ours["files_per_block_min"] == 4 and recipe["files_per_block_min"] <= 2
    assert result["shape"]["windows"] >= 4 * 1150  # every window of the split, less than a global batch
    assert (tmp_path / "prepared" / "manifest.json").is_file()


def test_options_are_checked() -> None:
    with pytest.raises(SystemExit):
        tool.parse_args(["--buffer", "0"])
    with pytest.raises(SystemExit):
        tool.parse_args(["--mbp", "10", "--windows-per-file", "5"])
    assert tool.parse_args(["--mbp", "8", "--files", "4", "--seq-length", "1024"]).windows_per_file == 2002


def test_the_shuffle_quality_tool_runs_this_mode_with_sorted_files():
    import subprocess
    import sys
    from pathlib import Path

    tool = Path(__file__).resolve().parents[1] / "tools" / "shuffle_quality.py"
    done = subprocess.run([sys.executable, str(tool), "--sorted-files", "--help"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "shuffle_quality.py --sorted-files" in done.stdout and "--windows-per-file" in done.stdout
