#!/usr/bin/env python
"""Set-up and open files of a blend of many datasets: `--datasets` copies of one small prepared
dataset (lambda phage, all train, 5 shards of 10 windows; hard links, so each copy's files have
their own names as separate datasets' do) blended with equal weights, then, in a fresh child
process under ``ulimit -n --ulimit``: `GenomicDataset` built (every dataset opened and checked,
its records and the blend's quotas: the set-up) and its first batch read, then `--batches` more.
Reported as one JSON line: the seconds of the set-up and from its start to the first batch, the
peak open descriptors (``/proc/self/fd`` sampled every 5 ms), the shard files opened, the child's
resident memory before the set-up (``base_rss_mb``: torch and the package imported) and its peak
(``VmHWM``), and that peak less the base per blended dataset.

    python tools/blend_open_files.py --datasets 1000 --ulimit 256 --out /tmp/blend1000

`--repeat` runs the child that many times (the datasets made once) and prints each. The child imports
the package from ``PYTHONPATH`` when set (another checkout, to compare), else from this one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAMBDA = REPO / "bionemo_wds" / "data" / "lambda_phage_NC_001416.fa.gz"

CHILD = textwrap.dedent(
    """
    import json, os, resource, sys, threading, time
    import torch  # noqa: F401  (imported before the clock, as a training script has it)
    peak, done = [0], threading.Event()
    def watch():
        while not done.is_set():
            peak[0] = max(peak[0], len(os.listdir("/proc/self/fd")) - 1)
            time.sleep(0.005)
    def status_mb(key):
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) / 1024 for line in status if line.startswith(key))
    threading.Thread(target=watch, daemon=True).start()
    from bionemo_wds.load.dataset import GenomicDataset
    batches, roots = int(sys.argv[1]), sys.argv[2:]
    base = status_mb("VmRSS:")
    t0 = time.perf_counter()
    ds = GenomicDataset(
        datasets=[{"path": r, "weight": 1.0} for r in roots], micro_batch_size=16, samples_per_epoch=16 * (batches + 1)
    )
    built = time.perf_counter() - t0
    it = iter(ds)
    next(it)
    first = time.perf_counter() - t0
    for _ in range(batches):
        next(it)
    done.set()
    try:
        from bionemo_wds.storage.open_files import OPEN_FILES
        opened = OPEN_FILES.opened
    except ImportError:  # a version without the table
        opened = None
    peak_rss = status_mb("VmHWM:")  # this process's own peak (ru_maxrss would carry the parent's over exec)
    print(json.dumps({
        "datasets": len(roots), "ulimit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
        "setup_s": round(built, 2), "to_first_batch_s": round(first, 2), "peak_fds": peak[0],
        "shard_files_opened": opened, "base_rss_mb": round(base), "peak_rss_mb": round(peak_rss),
        "rss_per_dataset_kb": round((peak_rss - base) * 1024 / len(roots), 1),
    }))
    """
)


def make(out: Path, n: int) -> list[Path]:
    """The prepared lambda dataset and `n` hard-linked copies of it under `out`."""
    from bionemo_wds.prepare import PrepareOptions, prepare

    one = out / "one"
    if not one.exists():
        opts = PrepareOptions(
            seq_length=1024, stride=1000, samples_per_shard=10, windows_per_record=2, split=(1, 0, 0), progress=False
        )
        prepare([LAMBDA], one, opts)
    roots = []
    for i in range(n):
        dest = out / f"copy{i:04d}"
        if not dest.exists():
            shutil.copytree(one, dest, copy_function=os.link)
        roots.append(dest)
    return roots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", type=int, default=1000, help="datasets in the blend")
    parser.add_argument("--ulimit", type=int, default=256, help="the child's open-file limit (ulimit -n)")
    parser.add_argument("--batches", type=int, default=39, help="batches read after the first")
    parser.add_argument("--repeat", type=int, default=1, help="child processes run, one after another")
    parser.add_argument("--out", type=Path, required=True, help="where the datasets are made (kept)")
    args = parser.parse_args()
    roots = make(args.out, args.datasets)
    script = args.out / "child.py"
    script.write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(REPO)]))}
    for _ in range(args.repeat):
        command = f'ulimit -n {args.ulimit} && exec "$0" "$@"'
        done = subprocess.run(
            ["bash", "-c", command, sys.executable, str(script), str(args.batches), *map(str, roots)],
            capture_output=True,
            text=True,
            env=env,
        )
        if done.returncode:
            print(done.stderr.strip().splitlines()[-1], file=sys.stderr)
            sys.exit(done.returncode)
        print(done.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    main()
