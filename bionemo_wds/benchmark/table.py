"""The benchmark's results as a table, and the benchmark issue's targets checked against them.

A load's columns (`child` measures them, `run` keeps the best of ``--repeat`` runs of each):

- ``samples/s``: the pass alone, from the first request for a batch to the last batch (worker
  start-up included), without the loader set-up;
- ``w/ setup``: samples/s of the same pass with the peer's loader set-up (making its dataset and
  loader objects) counted in, as a user pays it;
- ``setup s``: that set-up alone;
- ``TTFB s``: from the start of set-up to the first model-ready batch in hand;
- ``CPU s/Mtok``: CPU seconds (user + system) of set-up and pass, in the measuring process and its
  loader workers (``getrusage`` of the process and of its waited-for children), per million tokens;
- ``peak PSS MB``: the process and its workers, summed, sampled in a run of its own.
"""

from __future__ import annotations

from typing import Any

from bionemo_wds.benchmark.remote import storage_cells

COLUMNS_NOTE = (
    "samples/s: the pass without loader set-up; w/ setup: the same pass with set-up counted; "
    "TTFB: set-up start to first batch;\nCPU s/Mtok: CPU seconds of set-up and pass (process and "
    "loader workers) per million tokens; each the best of the runs."
)


def _best(peer: dict[str, Any]) -> float:
    return max(run["samples_per_s"] for run in peer["load"].values())


def _cell(value: float | None, fmt: str) -> str:
    """`value` formatted, or "-" where a run did not measure it."""
    return "-" if value is None else format(value, fmt)


def table(results: dict[str, Any]) -> str:
    """The results as one aligned text table, with notes on skipped peers and remote rows."""
    peers = results["peers"]
    base = peers.get("eden_fly")
    header = [
        "peer",
        "workers",
        "prepare s",
        "prep Mbp/s",
        "bytes/base",
        "samples/s",
        "w/ setup",
        "setup s",
        "TTFB s",
        "tokens/s",
        "CPU s/Mtok",
        "peak PSS MB",
        "x eden_fly",
    ]
    remote = any("storage" in load for peer in peers.values() for load in peer["load"].values())
    if remote:  # what the storage layer counted in the pass: range GETs and their bytes
        header += ["MB fetched", "GETs"]
    rows = []
    for name, peer in peers.items():
        for w, load in peer["load"].items():
            ref = base["load"].get(w, {}).get("samples_per_s") if base else None
            rows.append(
                [
                    name,
                    w,
                    f"{peer['prepare_s']:.2f}",
                    f"{peer['prepare_mbp_s']:.1f}",
                    f"{peer['bytes_per_base']:.3f}",
                    f"{load['samples_per_s']:,.0f}",
                    _cell(load.get("samples_per_s_with_setup"), ",.0f"),
                    _cell(load.get("setup_s"), ".3f"),
                    _cell(load.get("ttfb_s"), ".3f"),
                    f"{load['tokens_per_s'] / 1e6:,.1f}M",
                    _cell(load.get("cpu_s_per_mtok"), ".4f"),
                    f"{load['peak_pss_bytes'] / 1e6:,.0f}",
                    f"{load['samples_per_s'] / ref:.2f}" if ref else "-",
                    *(storage_cells(load) if remote else []),
                ]
            )
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    fmt = lambda r: "  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    lines = [
        f"{results['fasta']}: {results['bases'] / 1e6:.1f} Mbp, seq_length {results['seq_length']}, "
        f"stride {results['stride']}, batch {results['batch_size']}",
        "",
        fmt(header),
        "  ".join("-" * w for w in widths),
        *map(fmt, rows),
        "",
        COLUMNS_NOTE,
    ]
    for name, why in results.get("skipped", {}).items():
        lines.append(f"skipped {name}: {why}")
    if "remote" in results:
        r = results["remote"]
        lines += [
            "",
            f"ours_s3_*: {r['url']} on {r['endpoint']} ({r['server']});",
            "cold: an empty range cache in every run; warm: the cache the cold runs filled;",
            "MB fetched, GETs: the range requests of the pass (storage_stats).",
        ]
    return "\n".join(lines)


def targets(results: dict[str, Any]) -> list[tuple[str, bool, str]]:
    """The benchmark issue's targets, each with whether this run met it and the numbers."""
    p = results["peers"]
    out = []
    if {"ours", "eden_fly"} <= set(p):
        r = _best(p["ours"]) / _best(p["eden_fly"])
        out.append(("load: ours >= 3x eden_fly (best of workers)", r >= 3, f"{r:.2f}x"))
    if {"ours", "pickled_int64"} <= set(p):
        r = _best(p["ours"]) / _best(p["pickled_int64"])
        out.append(("load: ours >= 10x pickled_int64", r >= 10, f"{r:.2f}x"))
    if {"ours", "raw_limit"} <= set(p):
        r = _best(p["ours"]) / _best(p["raw_limit"])
        out.append(("load: ours >= 0.8x raw_limit", r >= 0.8, f"{r:.2f}x"))
    if "ours" in p and {"0", "2"} <= set(p["ours"]["load"]):
        a, b = p["ours"]["load"]["2"]["samples_per_s"], p["ours"]["load"]["0"]["samples_per_s"]
        out.append(("load: ours with 2 workers >= with 0", a >= b, f"{a:,.0f} vs {b:,.0f} samples/s"))
    if "ours" in p:
        out.append(
            ("disk: ours <= 1.15 bytes/base", p["ours"]["bytes_per_base"] <= 1.15, f"{p['ours']['bytes_per_base']:.3f}")
        )
        out.append(
            ("prepare: ours >= 20 Mbp/s", p["ours"]["prepare_mbp_s"] >= 20, f"{p['ours']['prepare_mbp_s']:.1f} Mbp/s")
        )
    zname = next((n for n in p if n.startswith("ours+")), None)
    if zname and "ours" in p:
        slow = 1 - _best(p[zname]) / _best(p["ours"])
        out.append(
            (
                f"disk: {zname} <= 0.35 bytes/base",
                p[zname]["bytes_per_base"] <= 0.35,
                f"{p[zname]['bytes_per_base']:.3f}",
            )
        )
        out.append((f"load: {zname} slowdown <= 15%", slow <= 0.15, f"{slow:.1%}"))
    return out
