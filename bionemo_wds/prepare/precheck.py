"""The options checked against the catalog before `scan` reads a single base.

`scan` reads every base of the inputs (minutes for a large metagenome); an option that cannot work
with these inputs must fail before it, not after. What the catalog already knows (each sequence's
name, length and control tag, the source's groups, split lists and fixed windows) decides most of
the plan: the window length (the longest tag), whether the stride fits it, whether there are enough
sequences or groups for the wanted splits, whether the split lists name sequences of the inputs,
whether a fixed window lies inside its sequence. `shard_plan.plan` checks them all again after the scan
(which may skip sequences or cut them at runs of N), so a check here only refuses what is sure to
fail there: where the scan can drop sequences (``--on-invalid skip``, ``--split-at-n``), a dropped
one may hold the longest tag, so the window check then assumes no tag.
"""

from __future__ import annotations

from bionemo_wds.core.distinct import distinct
from bionemo_wds.errors import OptionError
from bionemo_wds.homology.sketch import sourmash_module
from bionemo_wds.prepare.catalog import Catalog
from bionemo_wds.prepare.groups import check_placed, group_names, is_similarity
from bionemo_wds.prepare.options import PrepareOptions
from bionemo_wds.prepare.sequence_layout import check_layout
from bionemo_wds.prepare.shard_plan import check_split_rules, fixed_windows, read_split_lists
from bionemo_wds.prepare.splits import split_count_problem, split_from_lists
from bionemo_wds.prepare.windows import check_stride, window_length


def scan_can_drop(opts: PrepareOptions) -> bool:
    """Can `scan` leave sequences out (``--on-invalid skip``; ``--split-at-n``: all-N sequences)?"""
    return opts.on_invalid == "skip" or opts.split_at_n is not None


def check_before_scan(catalog: Catalog, opts: PrepareOptions) -> None:
    """Refuse, naming the option, what the plan of `catalog` under `opts` is sure to refuse after the scan."""
    max_tag = 0 if scan_can_drop(opts) else catalog.max_tag_bytes()
    window = window_length(opts.seq_length, max_tag)
    stride = opts.effective_stride(window)
    check_stride(stride, window, opts.seq_length, max_tag)
    check_split_rules(catalog, opts)
    check_layout(catalog, opts)
    if opts.group_by is not None and is_similarity(opts.group_by):
        sourmash_module()  # the install hint before a base is read
    names = list(dict.fromkeys(catalog.names))
    if opts.split_lists:
        split_from_lists(names, read_split_lists(opts))  # a name not in the inputs, or in two lists
    elif catalog.split is None:  # a stratified split: the scan can only lessen the units it splits
        unit = "group" if opts.group_by or catalog.groups is not None else "sequence"
        problem = split_count_problem(_units(catalog, opts, names), opts.split, unit)
        if problem is not None:
            raise OptionError(problem)
    for split in catalog.windows or {}:
        fixed_windows(catalog, split, window, stride)


def _units(catalog: Catalog, opts: PrepareOptions, names: list[str]) -> int:
    """How many groups (or sequences) the split divides: each sequence, the source's groups, or the
    --group-by rule's groups (a sequence it places in none is its own)."""
    if opts.group_by and not is_similarity(opts.group_by):  # similarity clusters are known after sketching
        labels = group_names(names, opts.group_by)
        check_placed(names, sum(label is not None for label in labels), opts.group_by)
        return len({label for label in labels if label is not None}) + sum(label is None for label in labels)
    if catalog.groups is not None:
        return len(distinct(catalog.groups))
    return len(names)
