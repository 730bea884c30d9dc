"""`tools/benchmark.py` / `bionemo-wds benchmark`: bionemo-wds beside the loaders it replaces.

Each peer prepares the same FASTA once and then loads one full training pass over the same windows
(every window of every sequence) with 0 and 2 loader workers, each run in its own process (a fresh
interpreter; with ``--children forked``, forked from one that imported the peers' libraries once,
`forked.Children`, except a run that measures memory); then the
benchmark issues' targets are checked against the results (`table.targets`), memory against an
earlier run's results (``--memory-baseline``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from benchmarks import child_env
from benchmarks.baselines import BaselineUnreadable, memory_baselines
from benchmarks.catalogs import CHOICES, catalog_fasta, catalog_names
from benchmarks.child import PRELOAD
from benchmarks.forked import Children
from benchmarks.help import HELP
from benchmarks.memory import PeakPss
from benchmarks.peers import PEERS
from benchmarks.remote import (
    REMOTES,
    ROWS,
    RemoteUnavailable,
    check_available,
    measure_remote,
)
from benchmarks.streaming_peers import unavailable
from benchmarks.table import table, targets
from bionemo_wds.storage.atomic import atomic_write


def _measure(
    action: str,
    peer: str,
    args: argparse.Namespace,
    fasta: Path,
    workers: int,
    compress: str | None = None,
    per_run: Callable[[], list[str]] | None = None,
    env: dict[str, str] | None = None,
    runs: int | None = None,
    memory: bool | None = None,
) -> dict[str, Any]:
    """Run the child `action` for `peer` (loads: `runs` times, default --repeat, the fastest kept,
    then once more for peak memory when `memory`, default unless ``args.no_memory``; ``runs=0``: the
    memory run alone). `per_run` is called before every run for its extra child arguments (and to get
    things ready for it); `env` replaces the children's environment (default: this one's)."""
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.child",
        action,
        "--peer",
        peer,
        "--fasta",
        str(fasta),
        "--workdir",
        str(args.workdir if not compress else Path(args.workdir) / "compressed"),
        "--seq-length",
        str(args.seq_length),
        "--stride",
        str(args.stride),
        "--batch-size",
        str(args.batch_size),
        "--workers",
        str(workers),
    ]
    if compress:
        cmd += ["--compress", compress]
    env = {**child_env(env), "PYTHONWARNINGS": "ignore"}

    def once(meter: PeakPss | None) -> dict[str, Any]:
        extra = per_run() if per_run else []
        full = cmd + extra
        if meter:
            with tempfile.TemporaryDirectory() as tmp:  # the child marks the end of its imports there
                ready = Path(tmp) / "imported"
                done = meter.run([*full, "--ready-file", str(ready)], ready=ready, env=env)
        else:
            done = children(args).run(full, env)
        if done.returncode != 0:
            what = " ".join([f"workers={workers}", *extra])
            raise RuntimeError(f"{peer} {action} ({what}) failed:\n{done.stderr[-3000:]}")
        return json.loads(done.stdout.strip().splitlines()[-1])

    if action != "load":
        return once(None)
    count = args.repeat if runs is None else runs
    # best of N: the machine's noise only ever slows a run
    result = once(None) if count == 1 else _best_of([once(None) for _ in range(count)]) if count else {}
    # memory in a run of its own: reading smaps_rollup every 10 ms takes the process's memory
    # map lock and slowed allocation-heavy loaders by up to 2x when sampled during the timing
    if (not getattr(args, "no_memory", False)) if memory is None else memory:
        meter = PeakPss()
        once(meter)
        result["peak_pss_bytes"] = meter.peak
    return result


def load_rounds(
    tasks: list[tuple[str, int]], args: argparse.Namespace, fasta: Path, bar: Any
) -> dict[tuple[str, int], dict[str, Any]]:
    """Each (peer, workers) load of `tasks`, --repeat runs in rounds (every task once, then every task
    again, ...), the fastest of each kept (`_best_of`), then its memory run (unless --no-memory). A slow
    stretch of a shared machine (minutes long here) then falls on every peer's runs alike instead of
    on the runs of whichever peer was being measured, so the ratios between peers move less."""
    repeat = max(1, args.repeat)
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {task: [] for task in tasks}
    for round_ in range(repeat):
        for peer, w in tasks:
            rounds = f" (round {round_ + 1} of {repeat})" if repeat > 1 else ""
            bar.set_postfix_str(f"{peer} load workers={w}{rounds}")
            runs[(peer, w)].append(_measure("load", peer, args, fasta, w, runs=1, memory=False))
    out = {}
    for peer, w in tasks:
        best = _best_of(runs[(peer, w)])
        if not getattr(args, "no_memory", False):
            bar.set_postfix_str(f"{peer} peak memory workers={w}")
            best["peak_pss_bytes"] = _measure("load", peer, args, fasta, w, runs=0, memory=True)["peak_pss_bytes"]
        out[(peer, w)] = best
        bar.update()
    return out


def children(args: argparse.Namespace) -> Children:
    """How this benchmark run starts its timing runs (``--children``), made at the first one."""
    if getattr(args, "children_runner", None) is None:
        forked = getattr(args, "children", "fresh") == "forked"
        args.children_runner = Children(PRELOAD, Path(args.workdir) / ".children", forked=forked)
    return args.children_runner


def _best_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One load record from repeated runs: the fastest pass, and each other time (with set-up, to
    the first batch, CPU) at its own best over the runs."""
    best = dict(min(runs, key=lambda r: r["seconds"]))
    for key in ("total_s", "setup_s", "ttfb_s", "cpu_s"):
        values = [r[key] for r in runs if r.get(key) is not None]
        if values:
            best[key] = min(values)
    return best


def _prepared(prep: dict[str, Any], bases: int) -> dict[str, Any]:
    """A peer's entry from its prepare result (loads are added to it)."""
    return {
        "prepare_s": prep["seconds"],
        "prepare_mbp_s": bases / 1e6 / prep["seconds"],
        "disk_bytes": prep["disk_bytes"],
        "bytes_per_base": prep["disk_bytes"] / bases,
        "load": {},
    }


def _rates(load: dict[str, Any]) -> dict[str, Any]:
    """A load result with its rates: samples/s and tokens/s of the pass, samples/s with the loader
    set-up counted, CPU seconds per million tokens, real (not PAD) tokens/s and the padding share."""
    out = {
        **load,
        "samples_per_s": load["samples"] / load["seconds"],
        "tokens_per_s": load["tokens"] / load["seconds"],
    }
    if load.get("bases"):
        out["bases_per_s"] = load["bases"] / load["seconds"]
    if load.get("total_s"):
        out["samples_per_s_with_setup"] = load["samples"] / load["total_s"]
    if load.get("cpu_s") is not None and load["tokens"]:
        out["cpu_s_per_mtok"] = load["cpu_s"] / (load["tokens"] / 1e6)
    if load.get("real_tokens") is not None and load["tokens"]:
        out["real_tokens_per_s"] = load["real_tokens"] / load["seconds"]
        out["padding"] = 1 - load["real_tokens"] / load["tokens"]  # share of the token slots that are PAD
    return out


class PeerUnavailable(RuntimeError):
    """Every peer asked for needs a library that is not installed."""


def _inputs(args: argparse.Namespace) -> list[tuple[str, Path, int | None]]:
    """(name, FASTA, bases or None to count them) of each catalog to run: the ``--fasta`` given,
    or the ``--catalog`` ones, written into the work directory first."""
    if args.fasta:
        return [(Path(args.fasta).name, Path(args.fasta), None)]
    workdir = Path(args.workdir)
    return [(name, *catalog_fasta(name, workdir, args.size_mbp, args.seed)) for name in catalog_names(args.catalog)]


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Prepare and load every peer asked for (skipping, with a note, those whose library is missing),
    on each catalog in turn: one results dict per catalog."""
    names = [Path(args.fasta).name] if args.fasta else catalog_names(args.catalog)
    baselines = memory_baselines(args.memory_baseline, names) if args.memory_baseline else {}
    if args.remote:
        check_available(args.remote)  # before the local peers' runs, not after them
    asked = [p for p in PEERS if not args.only or p in args.only]
    skipped = {p: why for p in asked if (why := unavailable(p))}
    peers = [p for p in asked if p not in skipped]
    if skipped and not peers and not args.remote:
        raise PeerUnavailable("; ".join(f"{p}: {why}" for p, why in skipped.items()))
    Path(args.workdir).mkdir(parents=True, exist_ok=True)
    out = []
    runner = children(args)  # every catalog's runs forked from one server (started at the first run)
    try:
        for name, fasta, bases in _inputs(args):
            one = argparse.Namespace(**{**vars(args), "workdir": str(Path(args.workdir) / name)})
            out.append(run_catalog(one, name, fasta, bases, peers, skipped, baselines.get(name)))
    finally:
        runner.close()
    return out


def run_catalog(
    args: argparse.Namespace,
    name: str,
    fasta: Path,
    bases: int | None,
    peers: list[str],
    skipped: dict[str, str],
    baseline: dict[str, Any] | None,
) -> dict[str, Any]:
    """Every peer of `peers` on one catalog (`fasta`, called `name`), prepared into and loaded from
    ``args.workdir``."""
    if bases is None:
        from bionemo_wds.prepare.sources.fasta import catalog_fasta as count_bases

        bases = count_bases([fasta], Path(args.workdir) / ".catalog", progress=False).total_bases
    workers = [int(w) for w in args.workers.split(",")]
    tasks = [(p, w) for p in peers for w in workers]
    compress_runs = [("ours", w) for w in workers] if args.compress and "ours" in peers else []
    bar = tqdm(
        total=len(peers)
        + len(tasks)
        + (1 + len(compress_runs) if compress_runs else 0)
        + (1 + len(ROWS) * len(workers) if args.remote else 0),
        desc=f"benchmark {name}",
        unit="run",
        disable=args.quiet,
    )
    results: dict[str, Any] = {
        "catalog": name,
        "fasta": str(fasta),
        "bases": bases,
        "seq_length": args.seq_length,
        "stride": args.stride,
        "batch_size": args.batch_size,
        "peers": {},
        "skipped": skipped,
    }
    if baseline:
        results["memory_baseline"] = baseline
    for peer in peers:
        bar.set_postfix_str(f"{peer} prepare")
        results["peers"][peer] = _prepared(_measure("prepare", peer, args, fasta, max(workers)), bases)
        bar.update()
    for (peer, w), load in load_rounds(tasks, args, fasta, bar).items():
        results["peers"][peer]["load"][str(w)] = _rates(load)
    if compress_runs:
        name = f"ours+{args.compress}"
        prep = _measure("prepare", "ours", args, fasta, max(workers), compress=args.compress)
        results["peers"][name] = _prepared(prep, bases)
        bar.update()
        for _, w in compress_runs:
            load = _measure("load", "ours", args, fasta, w, compress=args.compress)
            results["peers"][name]["load"][str(w)] = _rates(load)
            bar.update()
    if args.remote:

        def step(what: str) -> None:  # before a measurement: its name; after it: ""
            if what:
                bar.set_postfix_str(what)
            else:
                bar.update()

        info, prep, loads = measure_remote(args, fasta, workers, _measure, step)
        results["remote"] = info
        for row, by_workers in loads.items():
            results["peers"][row] = _prepared(prep, bases)
            results["peers"][row]["load"] = {w: _rates(load) for w, load in by_workers.items()}
    bar.close()
    return results


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bionemo-wds benchmark", description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--fasta", help="FASTA to use instead of a --catalog")
    p.add_argument(
        "--catalog",
        choices=CHOICES,
        help="seeded synthetic input(s): genome (a draft assembly's contig mix, 32 Mbp), metagenome "
        "(log-normal contigs, median 3 kb, 64 Mbp) or both, one table each (default: genome)",
    )
    p.add_argument(
        "--size-mbp", type=float, help="size of each synthetic catalog, in Mbp (default: 32 genome, 64 metagenome)"
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the synthetic catalogs")
    p.add_argument("--only", type=lambda s: s.split(","), help=f"comma-separated peers to run ({','.join(PEERS)})")
    p.add_argument("--workers", default="0,2", help="comma-separated loader worker counts")
    p.add_argument("--seq-length", type=int, default=8192, help="tokens per sample")
    p.add_argument("--stride", type=int, default=7992, help="bases between window starts")
    p.add_argument("--batch-size", type=int, default=8, help="samples per batch")
    p.add_argument("--compress", choices=("zstd",), help="also run `ours` with this record codec")
    p.add_argument("--repeat", type=int, default=3, help="load runs per peer and worker count; the fastest is reported")
    p.add_argument(
        "--remote",
        choices=REMOTES,
        help="also load `ours` from an S3 endpoint on 127.0.0.1 (moto), cold and warm cache (see above)",
    )
    p.add_argument("--workdir", default="bench_out", help="where inputs and each peer's prepared data go")
    p.add_argument("--json", help="write the results here as JSON")
    p.add_argument(
        "--memory-baseline",
        metavar="JSON",
        help="the --json of an earlier run of this benchmark on a smaller genome (e.g. 32 Mbp): adds a target "
        "that ours' peak PSS at each worker count is within 10%% of that run's",
    )
    p.add_argument(
        "--no-memory",
        action="store_true",
        help="leave out the run of each load that measures peak PSS (a run of its own, so --repeat 1 "
        "takes half the time without it); the PSS column shows -",
    )
    p.add_argument(
        "--children",
        choices=("forked", "fresh"),
        default="fresh",
        help="how each prepare and timed load run's process starts: fresh (default), a new interpreter "
        "per run, or forked from one server process that imported the peers' libraries once, so a run "
        "does not import them again: half the wall time of a small run, but each run's first writes to "
        "the pages it shares with the server cost page faults inside its timing (tens of ms; a small "
        "pass is slower by a third), so figures to compare are fresh ones. A run that measures peak "
        "PSS always starts fresh (a forked process would share the server's pages)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    if args.fasta and args.catalog:
        p.error("--fasta and --catalog: give one of them (the FASTA is the input when given)")
    if args.no_memory and args.memory_baseline:
        p.error("--memory-baseline compares peak memory, which --no-memory leaves out: give one of them")
    args.catalog = args.catalog or "genome"
    try:
        runs = run(args)
    except (RemoteUnavailable, PeerUnavailable, BaselineUnreadable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for results in runs:
        results["targets"] = [{"target": t, "met": met, "value": v} for t, met, v in targets(results)]
        print(table(results))
        print()
        for t in results["targets"]:
            print(f"  [{'met' if t['met'] else 'NOT met'}] {t['target']}: {t['value']}")
        print()
    if args.json:
        # one catalog: its results as before catalogs; several: each by its name
        out = runs[0] if len(runs) == 1 else {"catalogs": {r["catalog"]: r for r in runs}}
        with atomic_write(args.json, "w") as fh:
            fh.write(json.dumps(out, indent=1) + "\n")
        print(f"JSON: {args.json}")
    return 0
