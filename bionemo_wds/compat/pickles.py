"""`pickles_to_tars`: pickled samples into tar shards, as bionemo-webdatamodule's `PickledDataWDS` writes them.

Trusted input only: loading a pickle runs code.
"""

from __future__ import annotations

import os
import pickle
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bionemo_wds.errors import OptionError
from bionemo_wds.format import remove_stale_temporaries, write_tar


def pickles_to_tars(
    dir_input: str,
    input_prefix_subset: Sequence[str],
    input_suffix: str | Iterable[str],
    dir_output: str,
    output_prefix: str,
    func_output_data: Callable[[str, dict[str, Any]], dict[str, Any]] = lambda prefix, data: {
        "__key__": prefix,
        **data,
    },
    min_num_shards: int | None = None,
) -> list[str]:
    """Write ``{dir_input}/{name}.{suffix}`` pickles into ``{dir_output}/{output_prefix}-%06d.tar``.

    Keys are ``name.replace(".", "-")``; at least `min_num_shards` shards when there are that many
    samples. Each shard is written by the preparer's tar writer (`format.write_tar`): it appears
    atomically (a killed run leaves no partial shard under a shard name, and the next run removes
    its hidden temporaries) and the bytes are reproducible (fixed member times).
    """
    suffixes = [input_suffix] if isinstance(input_suffix, str) else list(input_suffix)
    if min_num_shards is not None and min_num_shards <= 0:
        raise OptionError(f"min_num_shards must be positive, got {min_num_shards}")
    names = list(input_prefix_subset)
    per_shard = 100_000 if min_num_shards is None else max(1, len(names) // min_num_shards)
    os.makedirs(dir_output, exist_ok=True)
    # a killed earlier run's temporaries of our shards (only those: the directory may hold other things)
    remove_stale_temporaries(dir_output, of=f"{output_prefix}-*.tar", recursive=False)
    written = []
    for shard, lo in enumerate(range(0, len(names), per_shard)):
        final = Path(dir_output) / f"{output_prefix}-{shard:06d}.tar"
        write_tar(final, _samples(dir_input, names[lo : lo + per_shard], suffixes, func_output_data), encoder=False)
        written.append(str(final))
    for stale in Path(dir_output).glob(f"{output_prefix}-*.tar"):  # shards of an earlier, larger run
        if str(stale) not in written:
            stale.unlink()
    return written


def _samples(
    dir_input: str,
    names: Sequence[str],
    suffixes: list[str],
    func_output_data: Callable[[str, dict[str, Any]], dict[str, Any]],
) -> Iterator[dict[str, Any]]:
    """The samples of one shard: each name's pickles (their own bytes), through `func_output_data`."""
    for name in names:
        data = {}
        for suffix in suffixes:
            path = Path(dir_input) / f"{name}.{suffix}"
            try:
                raw = path.read_bytes()
                pickle.loads(raw)  # refuse unreadable pickles now, not at training time
                # the file's own bytes, not a re-pickle: torch tensors pickle with a fresh
                # serialization id each time, which would make shards differ run to run
                data[suffix] = raw
            except Exception as exc:
                raise RuntimeError(f"cannot read pickle {path}: {exc}") from exc
        yield func_output_data(name.replace(".", "-"), data)
