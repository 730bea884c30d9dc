"""The request of a prepare run: the options and input fingerprints that decide its output bytes,
checked before anything is written, and stored in the plan and the manifest (a re-run with another
request is refused or told what changed; `shard_plan` plans from it)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bionemo_wds.errors import BadInputError
from bionemo_wds.prepare.executors.dask_client import distributed_module
from bionemo_wds.prepare.options import MIN_SHARDS_PER_SPLIT, PrepareOptions
from bionemo_wds.prepare.sources import file_fingerprint, input_files
from bionemo_wds.prepare.splits import SEEDED, check_split_from_names
from bionemo_wds.prepare.tags import tag_file, tag_map_conflict

#: How prepare orders a split's windows across its shards (in the request: a different order is
#: different bytes). "feistel": `permutation.SeededPermutation` of the window ids, computed per shard.
WINDOW_ORDER = "feistel"


def read_list(path: str) -> list[str]:
    """The names a split list file holds (one per line; blank lines and # comments left out)."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise BadInputError(f"split list {path} cannot be read: {exc}") from exc
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def request_of(inputs: Sequence[str], opts: PrepareOptions) -> dict[str, Any]:
    """The parts of a run that determine its output, as stored in the plan and the manifest.

    Every option is checked first (`PrepareOptions.check`): `prepare` calls this before it writes anything.
    """
    opts.check()
    opts.check_source()
    if problem := tag_map_conflict(opts.tags, opts.tag_map):  # --tags substring needs --tag-map, and only it
        raise BadInputError(problem)
    opts.check_layout()
    opts.check_executor()
    if opts.executor == "dask":
        distributed_module()  # installed? (before anything is written)
    if opts.compress == "zstd":
        try:
            import zstandard  # noqa: F401
        except ImportError as exc:
            raise BadInputError("--compress zstd needs the zstandard package: pip install 'bionemo-wds[zstd]'") from exc
    lists = None
    if opts.split_lists:
        lists = {
            split: {
                "path": str(Path(p).resolve()),
                "sha256": hashlib.sha256("\n".join(read_list(p)).encode()).hexdigest(),
            }
            for split, p in sorted(opts.split_lists.items())
        }
    parquet = named_file_fingerprints(opts.split_parquet)
    window_dbs = named_file_fingerprints(opts.window_db)
    sequences = opts.layout == "sequences"
    files = input_files(inputs, opts)
    if opts.split_from_names:
        given = (("--split-list", lists), ("--split-parquet", parquet), ("--window-db", window_dbs))
        others = [flag for flag, value in (*given, ("--group-by", opts.group_by)) if value]
        check_split_from_names([str(f) for f in files], opts.split, others)
    request = {
        "source": opts.source,
        "inputs": file_fingerprint(files),
        "seq_length": opts.seq_length,
        "stride": None if sequences else opts.requested_stride,  # cut at load
        "tail": opts.tail,
        "split": [float(r) for r in opts.split] if not (lists or parquet or opts.split_from_names) else None,
        "split_rule": None if lists or parquet or opts.split_from_names else opts.split_rule or SEEDED,  # `splits`
        "split_lists": lists,
        "split_parquet": parquet,
        "window_db": window_dbs,
        "x_key": opts.x_key,
        "y_key": opts.y_key,
        "group_by": opts.group_by,
        "group_file": group_file_fingerprint(opts.group_by),
        "split_at_n": opts.split_at_n,
        "seed": opts.seed,
        "tags": opts.tags,
        "tag_file": tag_file_fingerprint(opts.tags),
        "case": opts.case,
        "on_invalid": opts.on_invalid,
        "samples_per_shard": opts.samples_per_shard,
        # the default shard size's floor on shards per split (`split_shard_size`); None: --samples-per-shard
        "min_shards_per_split": MIN_SHARDS_PER_SPLIT if opts.samples_per_shard is None else None,
        "windows_per_record": opts.windows_per_record,
        "records_by": "bases" if opts.windows_per_record is None else "windows",
        "prefix": opts.prefix,
        "compress": opts.compress,
        "compress_level": opts.compress_level if opts.compress != "none" else None,
        "window_order": WINDOW_ORDER,
    }
    if sequences:  # only then: a windows request (and so its manifest) is what it was before layouts
        request["layout"] = opts.layout
    if opts.tag_map:  # only then, likewise: the --tags substring table, in its order (the first match wins)
        request["tag_map"] = dict(opts.tag_map)
    if opts.split_from_names:  # only then, likewise
        request["split_from_names"] = True
    if opts.source in ("jsonl", "parquet"):  # the record sources' fields (`sources.text_source`)
        request.update(text_column=opts.text_column, id_column=opts.id_column)
    return request


def named_file_fingerprints(named: dict[str, str] | None) -> dict[str, dict[str, Any]] | None:
    """{split: FILE} -> {split: fingerprint of FILE}, for the request (a changed file is a new request)."""
    if not named:
        return None
    for split, path in named.items():
        if not Path(path).is_file():
            raise BadInputError(f"{split} file {path} does not exist")
    return {split: file_fingerprint([path])[0] for split, path in sorted(named.items())}


def group_file_fingerprint(rule: str | None) -> dict[str, Any] | None:
    """The fingerprint of a `--group-by tsv:FILE` / `mmseqs:FILE` table."""
    if rule is None or not rule.startswith(("tsv:", "mmseqs:")):
        return None
    return rule_file_fingerprint("--group-by", rule, rule.split(":", 1)[1])


def tag_file_fingerprint(rule: str) -> dict[str, Any] | None:
    """The fingerprint of a `--tags tsv:FILE` table."""
    path = tag_file(rule)
    return rule_file_fingerprint("--tags", rule, path) if path is not None else None


def rule_file_fingerprint(option: str, rule: str, path: str) -> dict[str, Any]:
    """The fingerprint of the table a rule reads (a changed table is a new request); a missing one is refused."""
    if not Path(path).is_file():
        raise BadInputError(f"{option} {rule}: {path} does not exist")
    return file_fingerprint([path])[0]
