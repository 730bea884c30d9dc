"""Run the bionemo-webdatamodule test suite, unchanged, against `bionemo_wds.compat.bionemo`.

The contract: NVIDIA/bionemo-framework's ``sub-packages/bionemo-webdatamodule/tests`` pass against
our module with the Trainer on CPU. This script copies that test folder out of a local checkout
into a scratch directory (the checkout is only read), and runs pytest there with a plugin that

- puts ``bionemo``, ``bionemo.webdatamodule``, ``bionemo.webdatamodule.datamodule`` and
  ``bionemo.webdatamodule.utils`` in ``sys.modules`` as our `bionemo_wds.compat.bionemo` (no
  bionemo package is installed or imported);
- turns ``accelerator="gpu"`` (what the suite asks of its `Trainer`) into ``"cpu"`` when this
  machine has no CUDA device, so the same tests run here.

It prints pytest's own result line and exits with pytest's code. CI has no network, so CI does not
run it: run it whenever ``bionemo_wds/compat/``, the data module or the shard counts change
(docs/development.md)::

    python tools/upstream_tests.py ~/src/bionemo-framework          # a checkout
    python tools/upstream_tests.py path/to/bionemo-webdatamodule/tests -- -x -k many_workers
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SUITE = Path("sub-packages/bionemo-webdatamodule/tests")

#: The pytest plugin (a module of its own in the scratch directory, loaded with ``-p``).
PLUGIN = '''"""Alias bionemo.webdatamodule to bionemo_wds.compat.bionemo; the suite's Trainer on CPU."""
import sys
import types

import lightning
import torch

import bionemo_wds.compat.bionemo as ours

bionemo = types.ModuleType("bionemo")
bionemo.__path__ = []  # a package: `import bionemo.webdatamodule.x` looks in sys.modules first
package = types.ModuleType("bionemo.webdatamodule")
package.__path__ = []
package.datamodule = ours
package.utils = ours
bionemo.webdatamodule = package
sys.modules.update(
    {
        "bionemo": bionemo,
        "bionemo.webdatamodule": package,
        "bionemo.webdatamodule.datamodule": ours,
        "bionemo.webdatamodule.utils": ours,
    }
)

if not torch.cuda.is_available():
    gpu_trainer_init = lightning.Trainer.__init__

    def cpu_trainer_init(self, *args, **kwargs):
        if kwargs.get("accelerator") in ("gpu", "cuda"):
            kwargs["accelerator"] = "cpu"
        gpu_trainer_init(self, *args, **kwargs)

    lightning.Trainer.__init__ = cpu_trainer_init
'''


def find_suite(path: Path) -> Path:
    """The upstream tests folder: `path` itself, or its ``sub-packages/bionemo-webdatamodule/tests``."""
    for candidate in (path / SUITE, path / "tests", path):
        if (candidate / "bionemo" / "webdatamodule" / "conftest.py").is_file():
            return candidate
    raise SystemExit(
        f"upstream_tests: {path} holds no bionemo-webdatamodule tests (looked for {SUITE}/bionemo/webdatamodule/"
        "conftest.py); give a checkout of NVIDIA/bionemo-framework or its bionemo-webdatamodule tests folder"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="Arguments after `--` go to pytest (e.g. -x, -k NAME, -q).",
    )
    parser.add_argument(
        "checkout",
        type=Path,
        help="a local checkout of NVIDIA/bionemo-framework, or its sub-packages/bionemo-webdatamodule/tests folder",
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after `--`)")
    args = parser.parse_args(argv)
    suite = find_suite(args.checkout.expanduser().resolve())
    with tempfile.TemporaryDirectory(prefix="bionemo-upstream-") as scratch:
        root = Path(scratch)
        shutil.copytree(suite, root / "tests")
        (root / "bionemo_wds_upstream_plugin.py").write_text(PLUGIN)
        (root / "pytest.ini").write_text("[pytest]\n")  # none of our or upstream's pytest settings
        command = [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "bionemo_wds_upstream_plugin",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(root),
            "-c",
            str(root / "pytest.ini"),
            str(root / "tests"),
            *args.pytest_args,
        ]
        print(f"upstream_tests: {suite} against bionemo_wds.compat.bionemo", flush=True)
        paths = (str(root), os.environ.get("PYTHONPATH"))  # the plugin's folder first
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
        return subprocess.run(command, cwd=root, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
