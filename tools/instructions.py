"""Instructions (and, with --cache-sim, cache misses) of a benchmark peer's loading passes, counted by
valgrind's callgrind: the same count on every run, whatever else the machine is doing.

Wall-clock and CPU seconds on a shared VM move by 10-30% between runs minutes apart (docs/benchmarks.md),
more than most changes on the load path gain or lose. An instruction count does not move (two runs of
one tree agree within about 0.05%), so a before/after of a small change is read here first, then
checked in seconds by `tools/benchmark.py`. Instructions are not time: memory stalls and page faults
are not counted (--cache-sim counts the simulated cache misses).

Each tree (a checkout: this one by default, or the paths given with --tree, e.g. a `git worktree` of
the commit before a change) runs in its own process under callgrind, the trees side by side: the
peer's dataset is made (`benchmarks.peers.make_peer`, from the same FASTA and work folder as
`tools/benchmark.py` uses), one pass warms it, and only the next --passes passes are counted
(callgrind's client requests, through a small C helper this script compiles with gcc). Module
imports and set-up run uninstrumented, so a run takes about a minute.

    python tools/instructions.py --peer ours_windows --tree /tmp/before --tree .

Needs valgrind (with its headers: Debian's valgrind package) and gcc.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import ctypes
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Starts and stops callgrind's counting around the passes (client requests are no-ops outside valgrind).
HELPER_C = """#include <valgrind/callgrind.h>
void counting_on(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; CALLGRIND_TOGGLE_COLLECT; }
void counting_off(void) { CALLGRIND_TOGGLE_COLLECT; CALLGRIND_DUMP_STATS_AT("passes"); CALLGRIND_STOP_INSTRUMENTATION; }
"""


def build_helper(folder: Path) -> Path:
    """Compile the client-request helper into `folder`; a clear error where gcc or the headers are missing."""
    if shutil.which("gcc") is None:
        raise SystemExit("instructions: gcc is needed to build the callgrind helper")
    if not Path("/usr/include/valgrind/callgrind.h").exists():
        raise SystemExit(
            "instructions: valgrind's headers are missing (/usr/include/valgrind/callgrind.h): install valgrind"
        )
    source, lib = folder / "counting.c", folder / "counting.so"
    source.write_text(HELPER_C)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", str(lib), str(source)], check=True)
    return lib


def child(args: argparse.Namespace) -> None:
    """In the tree's process, under callgrind: make the peer, warm it, count --passes passes."""
    sys.path.insert(0, os.getcwd())  # the tree being measured, not this script's checkout
    from benchmarks.child import LIGHTNING_PEERS
    from benchmarks.peers import make_peer

    if args.peer in LIGHTNING_PEERS:
        import bionemo_wds.lightning.datamodule  # noqa: F401  (imported before counting, as the benchmark does)

    peer = make_peer(
        args.peer, Path(args.fasta), Path(args.workdir), args.seq_length, args.stride, args.tail, args.batch_size
    )
    if args.prepare:  # the parent's one run before counting (trees side by side must not prepare at once)
        if not peer.dir.exists():
            peer.prepare(0)
        return
    batches = sum(1 for _ in peer.batches(0))  # warm: the page cache, lazy imports, first-use caches
    counting = ctypes.CDLL(args.helper)
    counting.counting_on()
    for _ in range(args.passes):
        for _ in peer.batches(0):
            pass
    counting.counting_off()
    print(batches)


def count(tree: Path, args: argparse.Namespace, helper: Path, out: Path) -> tuple[dict[str, int], int]:
    """Run the child in `tree` under callgrind; the counted events (summed over the passes) and batches a pass."""
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--collect-atstart=no", f"--callgrind-out-file={out}"]
    if args.cache_sim:
        cmd.append("--cache-sim=yes")
    cmd += [sys.executable, str(Path(__file__).resolve()), "--child", "--helper", str(helper)]
    cmd += child_options(args)
    done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    dumped = Path(f"{out}.1")  # the dump counting_off asks for: the passes alone
    if done.returncode != 0 or not dumped.exists():
        raise SystemExit(f"instructions: the run in {tree} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    names = values = None
    for line in dumped.read_text().splitlines():
        if line.startswith("events:"):
            names = line.split()[1:]
        elif line.startswith("summary:"):
            values = [int(v) for v in line.split()[1:]]
    if names is None or values is None:
        raise SystemExit(f"instructions: {dumped} has no events or summary line")
    return dict(zip(names, values)), int(done.stdout.split()[-1])


#: Options the child takes from the parent's command line.
CHILD_OPTIONS = ("peer", "fasta", "workdir", "seq_length", "stride", "tail", "batch_size", "passes")


def child_options(args: argparse.Namespace) -> list[str]:
    """The parent's options a child takes, as command-line arguments."""
    return [f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k in CHILD_OPTIONS]


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peer", default="ours_windows", help="a tools/benchmark.py peer (default: ours_windows)")
    p.add_argument("--tree", action="append", type=Path, help="a checkout to measure (repeatable; default: this one)")
    p.add_argument(
        "--fasta",
        default=str(ROOT / "bench_out/metagenome_24mbp_seed0.fa"),
        help="the genome (default: the one tools/benchmark.py --catalog metagenome --size-mbp 24 writes)",
    )
    p.add_argument(
        "--workdir",
        default=str(ROOT / "bench_out/metagenome"),
        help="where the peer's prepared data is, or is prepared (default: that catalog's)",
    )
    p.add_argument("--seq-length", type=int, default=8192, help="tokens per sample (default 8192, the benchmark's)")
    p.add_argument("--stride", type=int, default=7992, help="window stride (default 7992, the benchmark's)")
    p.add_argument("--tail", default="end", help="the benchmark's tail option (default end)")
    p.add_argument("--batch-size", type=int, default=8, help="samples per batch (default 8)")
    p.add_argument("--passes", type=int, default=1, help="passes counted, after one warm pass (default 1)")
    p.add_argument("--cache-sim", action="store_true", help="also simulate the caches: L1 and last-level misses")
    p.add_argument(
        "--keep",
        type=Path,
        help="copy each tree's counted dump here as PEER-N.callgrind (N: the tree's place in the --tree list), "
        "to read where the instructions went: callgrind_annotate --inclusive=yes FILE",
    )
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--helper", help=argparse.SUPPRESS)
    p.add_argument("--prepare", action="store_true", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.child:
        child(args)
        return 0
    if shutil.which("valgrind") is None:
        raise SystemExit("instructions: valgrind is not installed (Debian: apt-get install valgrind)")
    if not Path(args.fasta).exists():
        raise SystemExit(f"instructions: {args.fasta} does not exist: run tools/benchmark.py once, or give --fasta")
    trees = [t.resolve() for t in (args.tree or [ROOT])]
    prepare = [sys.executable, str(Path(__file__).resolve()), "--child", "--prepare"]
    prepare += child_options(args)
    subprocess.run(prepare, cwd=trees[0], check=True)  # the peer's data, where not prepared yet
    with tempfile.TemporaryDirectory() as tmp:
        helper = build_helper(Path(tmp))
        with concurrent.futures.ThreadPoolExecutor(max(1, min(len(trees), os.cpu_count() or 1))) as pool:
            runs = list(
                pool.map(lambda it: count(it[1], args, helper, Path(tmp) / f"run{it[0]}.out"), enumerate(trees))
            )
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            for n in range(len(trees)):
                shutil.copyfile(Path(tmp) / f"run{n}.out.1", args.keep / f"{args.peer}-{n}.callgrind")
    first = runs[0][0]["Ir"]
    print(
        f"{args.peer}: {args.passes} pass(es) of {Path(args.fasta).name}, "
        f"batch {args.batch_size}, seq_length {args.seq_length}"
    )
    for tree, (events, batches) in zip(trees, runs):
        per = events["Ir"] / (batches * args.passes)
        line = f"  {tree}: {events['Ir']:,} instructions, {per:,.0f} a batch ({events['Ir'] / first:.4f}x the first)"
        if args.cache_sim:
            misses = events.get("DLmr", 0) + events.get("DLmw", 0)
            line += (
                f"; L1 data misses {events.get('D1mr', 0) + events.get('D1mw', 0):,}, last-level data misses {misses:,}"
            )
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
