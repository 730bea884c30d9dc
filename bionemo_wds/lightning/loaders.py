"""The building blocks both data modules' loaders are made of: stages, shard listing, epoch length, loaders.

`WebDataModule` (compat) and `GenomicWebDataModule` are each a `LightningDataModule` composed from
these public functions; neither reaches into the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import webdataset as wds

from bionemo_wds.lightning.epochs import EpochLoader, ResumableLoader
from bionemo_wds.load.plan.progress import EpochState
from bionemo_wds.load.splits import Split
from bionemo_wds.storage import list_shards
from bionemo_wds.storage.streams import register_webdataset_opener

Composable = Callable[[Iterable[Any]], Iterable[Any]]
Pipeline = Composable | Iterable[Composable] | None
Invocations = Sequence[tuple[str, dict[str, Any]]]


#: The splits each Lightning stage reads.
STAGE_SPLITS = {
    "fit": (Split.train, Split.val),
    "validate": (Split.val,),
    "test": (Split.test,),
    "predict": (Split.test,),
}


def check_stage(stage: str) -> tuple[Split, ...]:
    """The splits of a Lightning stage; an unknown stage is not implemented."""
    if stage not in STAGE_SPLITS:
        raise NotImplementedError(
            f"Data setup with stage={stage!r} is not implemented (use one of {', '.join(STAGE_SPLITS)})"
        )
    return STAGE_SPLITS[stage]


def shard_urls(directory: str, prefix: str, split: Split) -> list[str]:
    """The split's shards ``{directory}/{prefix}-*.tar``, sorted; a clear error when there are none."""
    urls = list_shards(directory, prefix)
    if not urls:
        raise FileNotFoundError(f"no shards match {directory}/{prefix}-*.tar for the {split.name} split")
    register_webdataset_opener(directory)  # s3:// and other fsspec protocols webdataset cannot open itself
    return urls


def compose(pipe: Any, stages: Pipeline) -> Any:
    """`pipe` with one stage or a list of stages composed onto it (webdataset's ``compose``)."""
    if stages is None:
        return pipe
    if isinstance(stages, Iterable) and not callable(stages):
        return pipe.compose(*stages)
    return pipe.compose(stages)


def invoke(obj: Any, calls: Invocations | None) -> Any:
    """Call named methods on `obj` in turn (bionemo's ``invoke_wds``/``invoke_wld``); a method that
    returns None keeps the object."""
    for name, kwargs in calls or ():
        result = getattr(obj, name)(**(kwargs or {}))
        obj = result if result is not None else obj
    return obj


class CheckedLoader(wds.WebLoader):
    """A WebLoader that calls `check` when a pass starts (``iter``), in this process, before its
    workers start: a fault that would otherwise surface inside a worker is raised here, as it is."""

    def __init__(self, *args: Any, check: Callable[[], None], **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.check = check

    def __iter__(self) -> Iterator[Any]:
        self.check()
        return super().__iter__()


def make_loader(
    dataset: Any,
    loader_kwargs: dict[str, Any],
    prebatch: Pipeline = None,
    n_batches: int | None = None,
    calls: Invocations | None = None,
    epoch: EpochState | None = None,
    epoch_source: Callable[[], int | None] | None = None,
    before_pass: Callable[[], None] | None = None,
    length: int | None = None,
    after_pass: Callable[[], None] | None = None,
    state: tuple[Callable[[], dict[str, Any]], Callable[[dict[str, Any]], None]] | None = None,
    check: Callable[[], None] | None = None,
) -> wds.WebLoader:
    """A WebLoader over `dataset`: `prebatch` stages composed on it, ``with_epoch(n_batches)`` when
    given, then `calls` invoked. With an `epoch` state, every pass sets it first (`EpochLoader`;
    `before_pass` and `after_pass` run when a pass starts and when it runs to its end), and with a
    `state` (get, set) the loader has ``state_dict``/``load_state_dict`` (`ResumableLoader`).
    A `length` is what ``len(loader)`` reports (so Lightning knows the epoch): give it only when it
    is the number of batches a pass yields. A `check` (without an `epoch`) runs each time a pass
    starts, in this process, before its workers start (`CheckedLoader`)."""
    if epoch is not None and check is not None:
        raise ValueError("make_loader: a check runs on a loader without an epoch state (use before_pass)")
    if epoch is not None:
        passes: dict[str, Any] = {"epoch_state": epoch, "epoch_source": epoch_source, "before_pass": before_pass}
        if state is not None:
            loader: Any = ResumableLoader(dataset, state=state, after_pass=after_pass, **passes, **loader_kwargs)
        else:
            loader = EpochLoader(dataset, after_pass=after_pass, **passes, **loader_kwargs)
    elif check is not None:
        loader = CheckedLoader(dataset, check=check, **loader_kwargs)
    else:
        loader = wds.WebLoader(dataset, **loader_kwargs)
    loader = compose(loader, prebatch)
    if n_batches is not None:
        loader = loader.with_epoch(n_batches)
    if length is not None:
        loader = loader.with_length(length, silent=True)
    return invoke(loader, calls)
