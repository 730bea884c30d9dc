"""What `bionemo-wds prepare` prints after a run: what it wrote (or that nothing was to do), its speed,
the bases it replaced, then the `inspect` table of the output."""

from __future__ import annotations

from bionemo_wds.prepare import PrepareResult
from bionemo_wds.prepare.report import inspect_text


def print_summary(result: PrepareResult) -> None:
    """What a run did (or that it had nothing to do), then the `inspect` table of the output."""
    m = result.manifest
    n_bases = sum(s.n_bases or 0 for s in m.splits.values())
    size = sum(sh.bytes for s in m.splits.values() for sh in s.shards)
    if result.status == "unchanged":
        print(f"{result.out}: already prepared with these options; nothing to do")
    elif result.status == "table-added":
        print(f"{result.out}: already prepared with these options; added its sequence table (shards unchanged)")
    else:
        rate = n_bases / 1e6 / max(result.seconds, 1e-9)
        shown_rate = f"{rate:.1f}" if rate >= 1 else f"{rate:.2g}"  # a small genome's rate is no "0.0"
        load = result.startup_seconds
        startup = f", plus {load:.1f} s to load webdataset and torch" if load >= 0.05 else ""
        print(
            f"{result.status} {result.shards_written} shard(s)"
            f"{f', reused {result.shards_reused}' if result.shards_reused else ''} in {result.seconds:.2f} s "
            f"({shown_rate} Mbp/s{startup}); {size / max(n_bases, 1):.3f} bytes on disk per input base"
        )
    replaced = (m.params.source or {}).get("replaced")
    if replaced is not None:
        files = "; ".join(f"{n} in {file}" for file, n in replaced["by_file"].items())
        print(
            f"--on-invalid replace-N replaced {replaced['bases']} base(s) that are no IUPAC code with N, "
            f"in {replaced['sequences']} sequence(s){f' ({files})' if files else ''}"
        )
    print(inspect_text(result.out))
