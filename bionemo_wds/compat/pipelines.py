"""Checking `WebDataModule` pipelines when the module is made, not deep in a loader worker.

A pipeline stage is a callable that takes the iterator of samples and returns (or yields) the next
ones: a plain generator function (``untuple``) or one of webdataset's filters *called with its
arguments* (``wds.shuffle(500)``, ``wds.to_tuple("a", "b")``, ``wds.batched(8)``). webdataset's
filters are curried: ``wds.shuffle`` itself is not a stage, and neither is
``functools.partial(wds.shuffle, bufsize=500)`` (calling it with the samples returns another curried
filter, which webdataset only finds out about when a worker iterates it). `check_pipeline` therefore

- takes a ``partial`` of a curried filter for what it spells, the filter called with the partial's
  arguments (``partial(wds.shuffle, bufsize=500)`` runs as ``wds.shuffle(bufsize=500)``), so such
  pipelines work;
- refuses an uncalled curried filter, anything not callable, and a callable that cannot take one
  argument, with a one-line error naming the argument, the split, the entry's index and the entry;
- wraps every stage so that one returning something that is not an iterable (``None`` from a
  function that forgot to ``yield``) fails naming that entry, not the stage after it.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any

from webdataset.filters import FilterFunction, RestCurried
from webdataset.utils import PipelineStage

#: What a stage is, said in every refusal.
STAGE_IS = (
    "a stage takes the iterator of samples and returns the next ones: e.g. untuple, or one of webdataset's "
    "filters called with its arguments (wds.shuffle(500), not wds.shuffle)"
)


class PipelineError(TypeError):
    """A `WebDataModule` pipeline entry that is not a stage (the message names where it is)."""


def describe(entry: Any) -> str:
    """A short name of a pipeline entry for messages (a curried filter as ``shuffle``)."""
    if isinstance(entry, RestCurried):
        return f"{entry.f.__name__.lstrip('_')} (webdataset's curried filter, not called)"
    if isinstance(entry, FilterFunction):
        return f"{entry.f.__name__.lstrip('_')}(...)"
    if isinstance(entry, functools.partial):
        return f"partial({describe(entry.func)}, ...)"
    name = getattr(entry, "__qualname__", None) or getattr(entry, "__name__", None)
    text = name if isinstance(name, str) else repr(entry)
    return text if len(text) <= 80 else text[:77] + "..."


class CheckedStage:
    """A pipeline entry that was checked: runs it on the samples and checks it returned an iterable."""

    def __init__(self, stage: Any, where: str):
        self.stage, self.where = stage, where

    def __call__(self, src: Iterable[Any]) -> Iterable[Any]:
        out = self.stage.run(src) if isinstance(self.stage, PipelineStage) else self.stage(src)
        if isinstance(out, FilterFunction | RestCurried) or not isinstance(out, Iterable):
            got = describe(out) if callable(out) else type(out).__name__
            raise PipelineError(
                f"{self.where} ({describe(self.stage)}) returned {got}, not an iterable of samples; {STAGE_IS}"
            )
        return out

    def __repr__(self) -> str:
        return f"CheckedStage({self.stage!r})"


def _takes_one_argument(fn: Callable[..., Any]) -> bool:
    """Can `fn` be called with one positional argument? (True when Python cannot tell.)"""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    try:
        signature.bind(object())
    except TypeError:
        return False
    return True


def check_stage(entry: Any, where: str) -> CheckedStage:
    """One pipeline entry as a checked stage (see the module docstring); `where` names it in errors."""
    if isinstance(entry, functools.partial) and isinstance(entry.func, RestCurried):
        entry = entry.func(*entry.args, **entry.keywords)  # what partial(wds.shuffle, bufsize=500) means
    if isinstance(entry, RestCurried):
        name = entry.f.__name__.lstrip("_")
        raise PipelineError(
            f"{where} is webdataset's curried filter {name} itself, not a stage: call it with its arguments, "
            f"e.g. {name}(...) as wds.shuffle(500); {STAGE_IS}"
        )
    if isinstance(entry, PipelineStage):
        return CheckedStage(entry, where)
    if not callable(entry):
        raise PipelineError(f"{where} is {type(entry).__name__} {describe(entry)}, not a callable stage; {STAGE_IS}")
    if not _takes_one_argument(entry):
        raise PipelineError(
            f"{where} ({describe(entry)}) cannot be called with one argument (the iterator of samples); {STAGE_IS}"
        )
    return CheckedStage(entry, where)


def check_pipeline(pipeline: Any, what: str, split: str) -> list[CheckedStage] | None:
    """A split's pipeline (one stage, a list of stages, or None) as a list of checked stages; `what`
    (``pipeline_wds``) and `split` name it in errors, with the entry's index in the list."""
    if pipeline is None:
        return None
    if callable(pipeline) or isinstance(pipeline, PipelineStage):
        return [check_stage(pipeline, f"{what}[{split!r}]")]
    if isinstance(pipeline, str | bytes) or not isinstance(pipeline, Iterable):
        raise PipelineError(
            f"{what}[{split!r}] is {type(pipeline).__name__} {describe(pipeline)}: give a stage or a list of stages; "
            f"{STAGE_IS}"
        )
    entries = list(pipeline)
    return [
        check_stage(entry, f"{what}[{split!r}][{i}] (entry {i + 1} of {len(entries)})")
        for i, entry in enumerate(entries)
    ]
