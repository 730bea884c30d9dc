"""`PrepareOptions`: every option of `bionemo-wds prepare`, in one place (declared as `option_fields` says).

Each field carries its command-line spelling, parser type, choices and help text as a `CliOption`
in its metadata (written with `option(...)`). `bionemo_wds.cli.prepare` builds the parser, the
YAML config keys and `--help` from `dataclasses.fields(PrepareOptions)` alone, so a default, a
choice or a help line is written once and the command line cannot drift from what `prepare` does.
The choices are the tuples that the code checking them defines (codecs, tail modes, case modes, ...).
The allowed values are there too (`minimum`, `maximum`, `check`): `PrepareOptions.check` refuses
any other value with one line naming the option, before anything is written, whether the options
come from the command line, a config file or Python.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from bionemo_wds.core.tokenizer import N_SPECIALS_PER_SAMPLE
from bionemo_wds.core.windowing import TAIL_MODES, default_stride
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import CASE_MODES, CODECS, DEFAULT_PREFIX, LAYOUTS
from bionemo_wds.prepare.groups import group_rule_problem
from bionemo_wds.prepare.option_fields import cli_of, flags_of, option, shown_value
from bionemo_wds.prepare.option_values import column_problem, parse_ratios, parse_split_list, prefix_problem
from bionemo_wds.prepare.scan_tasks import ON_INVALID
from bionemo_wds.prepare.splits import DEFAULT_RATIOS, SPLIT_NAMES, SPLIT_RULES, ratio_problem
from bionemo_wds.prepare.tags import parse_tag_pair, tag_map_problem, tag_rule_problem

#: Default shard size in token bytes (about 256 MB: 32k windows at 8 kb).
SHARD_TARGET_BYTES = 256 << 20
#: Default record size in token bytes (16 windows at 8 kb; see format/records.py for why blocks).
RECORD_TARGET_BYTES = 128 << 10
#: Without --samples-per-shard, a split gets at least this many shards when it has that many records
#: (else one shard per record): the classic WebDataModule and `num_workers` loaders hand whole
#: shards to workers, so a bacterial genome's val split in one 256 MB-sized shard would feed one.
MIN_SHARDS_PER_SPLIT = 8


#: zstd's compression levels (`zstandard.MAX_COMPRESSION_LEVEL` is 22; 0 and below are not offered).
ZSTD_LEVELS = (1, 22)

#: `--executor` choices: where the shard tasks run (`prepare.executors` has a module of each name).
EXECUTORS = ("local", "dask")
#: `--source` kinds (`prepare.sources.SOURCES` has a reader of each name).
SOURCE_KINDS = ("fasta", "sharded-eden", "hdf5", "megatron", "bed", "jsonl", "parquet")
#: Options that only one source reads: field -> that source.
SOURCE_OPTIONS = {"split_parquet": "sharded-eden", "window_db": "sharded-eden", "x_key": "hdf5", "y_key": "hdf5"}
SOURCE_OPTIONS["reference"] = "bed"
#: Options that only the record sources read (`sources.text_source`): field -> those sources.
TEXT_OPTIONS = {"text_column": ("jsonl", "parquet"), "id_column": ("jsonl", "parquet")}


@dataclass
class PrepareOptions:
    """Everything that shapes the output (except `workers`, `executor`, `scheduler`, `retries`,
    `overwrite`, `progress`, which do not)."""

    source: str = option(
        "fasta",
        "what INPUTS are: fasta (files or directories); sharded-eden (one SEQUENCE_DB_DIR of "
        "<sample>/glm_dataset_<sample>.sqlite); hdf5 (one FILE.h5 of pre-tokenized rows, needs bionemo-wds[h5]); "
        "megatron (PREFIX of PREFIX.bin + .idx as preprocess_evo2 writes them; needs megatron-core); bed (BED files "
        "of intervals chrom, start, end and optionally a split, cut from --reference); jsonl (JSON lines "
        "files or directories, plain, gzip or zstd, one record per line, OpenGenome2's json/ files); parquet (Parquet "
        "files or directories, needs bionemo-wds[parquet]); for jsonl and parquet the sequence is the --text-column "
        "field, and a lineage tag it starts with becomes its control tag",
        choices=SOURCE_KINDS,
    )

    seq_length: int = option(
        8192,
        "tokens per model sample; windows hold seq_length - 3 - longest tag bases, leaving room for BOS, tag, SEP, EOS",
        minimum=1,
    )
    stride: int | None = option(
        None,
        "bases between window starts (at most the window length)",
        default_help="seq-length * 999 // 1024, at most the window: Eden's 7992 at 8192, 999 at 1024; Eden's "
        "overlap ratio (about 2.4%) at any length, not its 200 tokens, which would repeat a fifth of each "
        "1024-token window",
        minimum=1,
    )
    tail: str = option(
        "end",
        "'end': add a last window aligned to the sequence end so no base is lost; "
        "'drop': Eden's counts, up to stride-1 tail bases dropped",
        choices=TAIL_MODES,
    )
    layout: str = option(
        "windows",
        "windows: the windows of --seq-length and --stride, overlaps stored (the loader serves "
        "exactly those); sequences: every base stored once, as pieces of whole sequences in a seeded order; "
        "windows of any length and stride cut at load (GenomicDataset(seq_length=..., "
        "stride=...)), short sequences packable; --stride does not apply",
        choices=LAYOUTS,
    )
    split: Sequence[float] = option(
        DEFAULT_RATIOS,
        f"{','.join(SPLIT_NAMES)} ratios for the length-stratified split "
        "(buckets <10kb, <100kb, longer); 0 leaves a split out",
        parse=parse_ratios,
        metavar=",".join(s.upper() for s in SPLIT_NAMES),
        check=ratio_problem,
    )
    split_rule: str | None = option(
        None,
        "how --split chooses within each length bucket: seeded (strata of sequences of similar length, each "
        "dealt in an order drawn from --seed and the sequence ids, so the seed decides which sequences go "
        "where); longest-first (the rule before seeded: longest first, the seed only orders sequences of "
        "equal length, so every seed gives about the same split)",
        choices=SPLIT_RULES,
        default_help="seeded; a re-run into an output split by longest-first keeps its split (and says so)",
    )
    split_lists: dict[str, str] | None = option(  # noqa: RUF009 - option() is dataclasses.field plus CLI metadata
        None,
        f"explicit split: FILE has one sequence name per line; repeat per split "
        f"({', '.join(SPLIT_NAMES)}); sequences in no list are left out; replaces --split",
        flags=("--split-list",),
        parse=parse_split_list,
        collect=dict,
        metavar="SPLIT=FILE",
    )
    split_from_names: bool = option(
        False,
        "take each input file's split from its name: one word train, val/valid/validation or test between "
        "_, -, . or the name's ends (ecoli_train, x.test.fa; export-megatron's per-split prefixes); replaces --split",
        switch=True,
    )
    split_parquet: dict[str, str] | None = option(  # noqa: RUF009
        None,
        "sharded-eden split: a Parquet file with columns contig_id, length per split; repeat per split; "
        "replaces --split and the grouping by sample id",
        flags=("--split-parquet",),
        parse=parse_split_list,
        collect=dict,
        metavar="SPLIT=FILE",
    )
    window_db: dict[str, str] | None = option(  # noqa: RUF009
        None,
        "sharded-eden: take exactly the windows of an Eden window database (from `bionemo-wds "
        "precompute-windows`) for SPLIT; its window_size and stride must equal --seq-length and --stride",
        flags=("--window-db",),
        parse=parse_split_list,
        collect=dict,
        metavar="SPLIT=FILE",
    )
    x_key: str | None = option(
        None, "hdf5: dataset of token ids, one sample per row (fixed width or ragged)", default_help="required for hdf5"
    )
    y_key: str | None = option(
        None, "hdf5: dataset with one label per row, stored as that row's control tag", default_help="none"
    )
    reference: str | None = option(
        None,
        "bed: the reference FASTA the BED intervals are cut from (any FASTA input: plain, gzip, split parts, tar)",
        metavar="FASTA",
        default_help="required for bed",
    )
    text_column: str = option(
        "text",
        "jsonl, parquet: the field (JSON lines) or column (Parquet) holding each record's sequence; other fields are "
        "ignored, so files may differ in schema",
        metavar="NAME",
        check=column_problem,
    )
    id_column: str | None = option(
        None,
        "jsonl, parquet: the field or column holding each record's id (unique; no tab or line break)",
        default_help="<file>:<line> for JSON lines (1-based), <file>:<row> for Parquet (0-based), <file> the "
        "file's path below the directory given, or its name",
        metavar="NAME",
        check=column_problem,
    )
    group_by: str | None = option(
        None,
        "keep groups in one split: sample-id (sharded-Eden sample of the id), regex:PATTERN (first group "
        "of a match in the id), tsv:FILE (seq_id<TAB>group), mmseqs:FILE (MMseqs2 cluster TSV), "
        "similarity:T[,k=K][,scaled=S] (clusters of sequences whose estimated ANI, from FracMinHash "
        "containment of the smaller in the larger, is >= T; needs the homology extra)",
        default_help="none; sharded-eden groups by sample-id",
        metavar="RULE",
        check=group_rule_problem,
    )
    split_at_n: int | None = option(
        None,
        "cut sequences at runs of at least K N bases so no window spans one; pieces keep their sequence's id "
        "and positions",
        flags=("--split-at-n",),
        metavar="K",
        default_help="no cutting",
        minimum=1,
    )
    seed: int = option(42, "seed of the split and of the window order in shards (0 or more)", minimum=0)
    tags: str = option(
        "none",
        "control tag per sequence: none; description (header text after the name); lineage (Evo2's "
        "|d__...;p__...;...;s__Genus species| or a bare GTDB d__...;p__... anywhere in the header, stored "
        "as |d__...|; windows leave room for ranks dropped to None); sharded-eden (<ctrl_x> for an id X__...); "
        "regex:PATTERN (first capture group, or the whole match, of PATTERN in the header line, or in the "
        "contig id for sharded-eden); tsv:FILE (lines seq_id<TAB>tag); substring (the --tag-map entry in the id). "
        "Untagged sequences are counted and warned about",
        metavar="RULE",
        check=tag_rule_problem,
    )
    tag_map: dict[str, str] | None = option(  # noqa: RUF009
        None,
        "--tags substring: the tag of a sequence whose id contains SUBSTRING; repeat it, the first entry "
        "(in the order given) whose SUBSTRING is in the id wins, as bionemo's Evo2 taxonomy_data",
        flags=("--tag-map",),
        parse=parse_tag_pair,
        collect=dict,
        metavar="SUBSTRING=TAG",
        check=tag_map_problem,
    )
    strict_tags: bool = option(
        False,
        "make a --tags rule that leaves any sequence untagged an error (naming the first) instead of a warning",
        switch=True,
    )
    case: str = option(
        "keep",
        "case of the stored bases: keep the source's (soft-masked repeats stay lower case, for the loader's "
        "soft_mask_weight; the model still sees upper case), or upper-case every base",
        choices=CASE_MODES,
    )
    on_invalid: str = option(
        "error",
        "a base that is not an IUPAC code: error (name sequence and position), skip the sequence, or replace it with N",
        choices=ON_INVALID,
    )
    samples_per_shard: int | None = option(
        None,
        "windows per shard (every split's shards but its last hold this many)",
        default_help=f"per split, about {SHARD_TARGET_BYTES >> 20} MB of tokens per shard (32k windows at 8 kb), "
        f"but smaller shards of whole records when that gives a split fewer than {MIN_SHARDS_PER_SPLIT} shards, "
        f"so a small split still has {MIN_SHARDS_PER_SPLIT} or more (one per record when it has fewer records) "
        "to share among loader workers",
        minimum=1,
    )
    windows_per_record: int | None = option(
        None,
        "windows per tar member (1 gives one member per window)",
        default_help=f"about {RECORD_TARGET_BYTES >> 10} kB, 16 at 8 kb",
        minimum=1,
    )
    prefix: str = option(
        DEFAULT_PREFIX,
        "shard file name prefix: a plain file-name stem (letters, digits, '_', '-', '.')",
        check=prefix_problem,
    )
    compress: str = option(
        "none",
        "record codec: none stores one byte per base; zstd compresses each record's bases (about 0.27 "
        "bytes per base at the default level, read back transparently by every loader; needs bionemo-wds[zstd])",
        choices=CODECS,
    )
    compress_level: int = option(
        17,
        f"zstd level {ZSTD_LEVELS[0]}-{ZSTD_LEVELS[1]} (17: ~0.27 bytes/base, ~5 MB/s per core to write, fast to read)",
        minimum=ZSTD_LEVELS[0],
        maximum=ZSTD_LEVELS[1],
    )
    workers: int | None = option(
        None,
        "processes that index, check and write (with --executor dask and no --scheduler: the LocalCluster's "
        "worker processes); output does not depend on it",
        default_help="all cores",
        minimum=1,
    )
    executor: str = option(
        "local",
        "where the index, the base check and the shard writers run: local (a pool of --workers processes) or dask "
        "(tasks on a dask.distributed cluster, --scheduler or a LocalCluster; needs bionemo-wds[dask]); same bytes",
        choices=EXECUTORS,
    )
    scheduler: str | None = option(
        None,
        "--executor dask: the scheduler, tcp://HOST:PORT or a scheduler file (*.json from `dask scheduler "
        "--scheduler-file`); every worker must see the inputs (and a local --out) at the same paths",
        default_help="a LocalCluster of --workers processes on this machine",
        metavar="ADDRESS",
    )
    retries: int = option(2, "--executor dask: times a task that raised is run again", minimum=0)
    overwrite: bool = option(False, "replace an earlier run with different options in --out", switch=True)
    progress: bool = option(True, "no progress bars", flags=("--quiet", "-q"), switch=False)

    @property
    def requested_stride(self) -> int:
        """--stride, or without it `default_stride` of --seq-length (what the request records)."""
        return self.stride if self.stride is not None else default_stride(self.seq_length)

    def effective_stride(self, window: int) -> int:
        """The stride windows of `window` bases are cut with: --stride as given (`check_stride` refuses
        one longer than the window), or the default capped at the window, so the default never fails."""
        return self.stride if self.stride is not None else min(default_stride(self.seq_length), window)

    def check(self) -> None:
        """Refuse a value an option does not allow: `BadInputError` naming the option, its rule and the value."""
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            problem = cli_of(f).problem(value)
            if problem is not None:
                raise BadInputError(f"{flags_of(f)[0]} {problem}, got {shown_value(value)}")
        room = self.seq_length - N_SPECIALS_PER_SAMPLE  # bases a window holds before any control tag
        if room < 1:
            raise BadInputError(
                f"--seq-length {self.seq_length} leaves no room for bases after {N_SPECIALS_PER_SAMPLE} special tokens"
            )
        if self.stride is not None and self.stride > room:
            raise BadInputError(
                f"--stride {self.stride} is larger than the window of {room} bases (--seq-length "
                f"{self.seq_length} minus {N_SPECIALS_PER_SAMPLE} special tokens, before any control tag): bases "
                f"between windows would be lost; use --stride <= {room}, or leave it out to follow --seq-length"
            )

    def check_layout(self) -> None:
        """Refuse a stride (windows are cut at load) and a window database with --layout sequences."""
        if self.layout == "sequences" and self.stride is not None:
            raise BadInputError(
                f"--stride {self.stride} does not apply to --layout sequences: its windows are cut at load "
                "(GenomicDataset(stride=...)); leave --stride out"
            )
        if self.layout == "sequences" and self.window_db:
            raise BadInputError(
                "--window-db fixes the windows of a split, --layout sequences stores whole sequences: "
                "give one (use --layout windows with --window-db)"
            )

    def check_executor(self) -> None:
        """Refuse a Dask-only option with the local executor, which would silently ignore it (whether
        Dask is installed is `request.request_of`'s check: it needs the executor's module)."""
        if self.executor != "dask" and self.scheduler is not None:
            raise BadInputError(f"--scheduler {self.scheduler} needs --executor dask (the executor is {self.executor})")

    def check_source(self) -> None:
        """Refuse an option of one source given with another, which that source would silently ignore."""
        for f in dataclasses.fields(self):
            source = SOURCE_OPTIONS.get(f.name)
            if getattr(self, f.name) and source is not None and self.source != source:
                raise BadInputError(
                    f"{flags_of(f)[0]} is an option of --source {source}, not of --source {self.source}"
                )
            sources = TEXT_OPTIONS.get(f.name, ())
            if sources and getattr(self, f.name) not in (None, f.default) and self.source not in sources:
                raise BadInputError(
                    f"{flags_of(f)[0]} is an option of --source {' and '.join(sources)}, not of --source {self.source}"
                )
