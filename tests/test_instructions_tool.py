"""tools/instructions.py: a loading pass's instructions counted by callgrind, one tree beside another.
The count is what the tool is for on a noisy machine: two runs of one tree side by side agree closely.
Real valgrind, real gcc."""

from __future__ import annotations

import gzip
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import LAMBDA

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "instructions.py"


def run_tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(TOOL), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_a_missing_genome_is_one_clear_line(tmp_path):
    done = run_tool("--fasta", str(tmp_path / "none.fa"), "--workdir", str(tmp_path / "w"))
    assert done.returncode != 0 and f"{tmp_path / 'none.fa'} does not exist" in done.stderr


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("valgrind") is None or shutil.which("gcc") is None or not Path("/usr/include/valgrind").exists(),
    reason="valgrind with its headers, and gcc, are needed",
)
def test_two_runs_of_one_tree_count_the_same_instructions(tmp_path):
    fasta = tmp_path / "lambda.fa"
    fasta.write_bytes(gzip.decompress(LAMBDA.read_bytes()))
    common = ["--peer", "ours", "--fasta", str(fasta), "--seq-length", "1024", "--stride", "1000"]
    keep = tmp_path / "dumps"
    done = run_tool(
        *common, "--workdir", str(tmp_path / "w"), "--tree", str(ROOT), "--tree", str(ROOT), "--keep", str(keep)
    )
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in keep.iterdir()) == ["ours-0.callgrind", "ours-1.callgrind"]  # --keep
    counts = [int(m.replace(",", "")) for m in re.findall(r": ([\d,]+) instructions", done.stdout)]
    assert len(counts) == 2 and counts[0] > 1_000_000
    assert abs(counts[0] - counts[1]) <= 0.01 * counts[0]  # the same work, counted the same (within 1%)
    assert "a batch" in done.stdout and "1.0000x the first" in done.stdout
