"""`benchmarks.forked.Children`: a run forked from the server ends as the same command run fresh would."""

from __future__ import annotations

import os
import sys

import pytest

from benchmarks.forked import Children

SCRIPT = """
import os, sys
print(sys.argv[1:], os.environ.get("ONLY_IN_THE_RUN"), os.environ.get("ONLY_IN_THE_SERVER"), flush=True)
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


@pytest.fixture
def module(tmp_path):
    (tmp_path / "echo_run.py").write_text(SCRIPT)
    return tmp_path


@pytest.mark.parametrize("forked", [False, True])
def test_a_run_gives_its_output_code_and_whole_environment(module, tmp_path, forked):
    env = {**os.environ, "PYTHONPATH": str(module), "ONLY_IN_THE_SERVER": "server"}
    runner = Children(("json",), tmp_path / "children", forked=forked)
    try:
        first = runner.run([sys.executable, "-m", "echo_run", "0", "a b"], env)
        env.pop("ONLY_IN_THE_SERVER")  # the second run's environment lacks what the first (and the server) had
        second = runner.run([sys.executable, "-m", "echo_run", "3"], {**env, "ONLY_IN_THE_RUN": "run"})
    finally:
        runner.close()
    assert (first.returncode, first.stdout, first.stderr) == (0, "['0', 'a b'] None server\n", "to stderr\n")
    assert (second.returncode, second.stdout) == (3, "['3'] run None\n")
    assert (runner.zygote is None) and ((tmp_path / "children" / "server.log").exists() == forked)


def test_a_forked_run_must_be_a_module(tmp_path):
    with pytest.raises(ValueError, match="python -m MODULE"):
        Children((), tmp_path).run([sys.executable, "script.py"], dict(os.environ))
