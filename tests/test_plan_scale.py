"""The plan at 10 Tbp (issue 14): a catalog of lengths only (about 1.25 billion 8 kb windows) is split
and planned in under 1 GB, and sampled shards computed alone equal the same shards taken from the
full order. Runs `tools/plan_scale.py` in a process of its own, so its peak RSS is the plan's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "plan_scale.py"
#: The issue's memory bound for planning 10 Tbp.
MEMORY_BOUND_MB = 1024


def run_tool(*args: str) -> dict:
    done = subprocess.run([sys.executable, str(TOOL), *args], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_tool_checks_shards_against_the_full_order_at_a_small_size():
    report = run_tool("--tbp", "0.002", "--sequences", "500", "--check-shards", "4", "--full-order")
    assert report["windows"] > 200_000 and report["shards"] > 4
    assert len(report["checked"]) == 4 and report["full_order_inverse_ok"]
    assert all(c["inverse_ok"] and c["grid_ok"] and c["full_order_ok"] for c in report["checked"])


@pytest.mark.slow
def test_ten_terabases_are_planned_in_under_a_gigabyte_and_shards_are_computed_alone():
    report = run_tool("--tbp", "10", "--sequences", "2000000", "--check-shards", "3", "--full-order")
    assert report["bases"] >= 10 * 10**12 and report["windows"] > 1.2e9
    assert report["peak_rss_mb"] < MEMORY_BOUND_MB, report
    assert sum(report["manifest_splits"].values()) == report["windows"]
    assert len(report["checked"]) == 3 and report["checked"][0]["shard"] == 0 and report["full_order_inverse_ok"]
    assert all(c["inverse_ok"] and c["grid_ok"] and c["full_order_ok"] for c in report["checked"]), report
    print(json.dumps({k: v for k, v in report.items() if k != "checked"}))  # seconds: reported, not asserted


LOAD_TOOL = Path(__file__).resolve().parents[1] / "tools" / "load_plan_scale.py"


def run_load_tool(*args: str) -> dict:
    done = subprocess.run([sys.executable, str(LOAD_TOOL), *args], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_the_load_plan_tool_checks_a_small_sequence_catalog():
    report = run_load_tool("--tbp", "0.001", "--sequences", "300", "--dp-size", "4", "--pack", "--offsets", "random")
    assert report["samples"] > 1000 and report["rank_batches"] > 0
    assert report["ids_ok"] and report["documents_ok"]


@pytest.mark.slow
@pytest.mark.parametrize("seq_length", ["8192", "1048576"])
@pytest.mark.parametrize("pack", [False, True])
def test_a_ten_terabase_sequence_layout_is_planned_at_load_in_under_a_gigabyte(seq_length, pack):
    """Issue 25: windows cut at load and packed samples of a 10 Tbp sequence-layout catalog, at 8 k and 1 M:
    one rank's plan (1024 ranks) and its first batches' documents, without an array of every sample."""
    report = run_load_tool("--seq-length", seq_length, *(["--pack", "--offsets", "random"] if pack else []))
    assert report["bases"] >= 10 * 10**12
    assert report["peak_rss_mb"] < MEMORY_BOUND_MB, report
    assert report["ids_ok"] and report["documents_ok"], report
    print(json.dumps(report))  # seconds: reported, not asserted
