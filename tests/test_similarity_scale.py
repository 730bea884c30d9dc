"""tools/similarity_scale.py (the million-contig clustering measurement): its contigs are families
cut from the real genomes as its docstring says, and a small run finds the planted families without
merging two genomes. Run in a process of its own, so the peak RSS it reports is its own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import LAMBDA, tool_module

pytest.importorskip("sourmash")

TOOL = Path(__file__).resolve().parents[1] / "tools" / "similarity_scale.py"


scale = tool_module("similarity_scale")


def test_contigs_are_seeded_families_of_real_stretches():
    genome = scale.genome_codes(LAMBDA)
    assert len(genome) == 48_502 and set(np.unique(genome).tolist()) == {0, 1, 2, 3}
    a = scale.make_contigs(600, 5, [genome])
    b = scale.make_contigs(600, 5, [genome])
    assert np.array_equal(a.bases, b.bases) and np.array_equal(a.order, b.order)
    assert not np.array_equal(a.bases, scale.make_contigs(600, 6, [genome]).bases)
    assert len(a) == 600 and set(np.unique(a.bases).tolist()) <= set(b"ACGT")
    lengths = a.lengths()
    assert lengths.min() >= 300 and lengths.max() <= 5000
    roots = a.kind == 0
    assert roots.sum() == len(np.unique(a.family))  # one root per family
    assert lengths[roots].min() >= 500
    assert 0.6 < (a.kind == 1).sum() / (a.kind != 0).sum() < 0.9  # near copies: 3 in 4 of the members
    # a root differs from lambda by 20-30% substitutions: most of its 21-mers are not lambda's
    text = scale.ACGT[genome].tobytes()
    root = int(np.flatnonzero(roots)[0])
    made = int(a.order[root])
    bases = a.bases[a.offsets[made] : a.offsets[made + 1]].tobytes()
    words = [bases[i : i + 21] for i in range(0, len(bases) - 21, 7)]
    assert sum(w in text for w in words) < 0.1 * len(words)


@pytest.mark.slow
def test_a_small_run_finds_the_families_and_merges_no_genomes():
    done = subprocess.run(
        [sys.executable, str(TOOL), "--contigs", "2000", "--seed", "1"], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["contigs"] == 2000 and report["bases"] > 2000 * 500
    assert set(report["sketch_s"]) == {"1", "2"} and report["sketches_equal"]
    assert report["hashes"] > report["bases"] / report["scaled"] / 2
    assert report["near_copies"] > 500 and report["far_copies"] > 100
    assert report["recall_10_hashes_or_more"] >= 0.98 and report["recall"] >= 0.85
    assert report["far_copies_joined"] <= 0.02
    assert report["clusters_with_two_genomes"] == 0
    assert report["pairs_of_two_families_10_hashes_or_more"] == 0
    assert report["families"] <= report["clusters"] < report["contigs"]
    assert report["join_peak_rss_mb"] > 0 and report["peak_rss_mb_before_join"] > 0
