"""The executor registry (`prepare.executors`): ``--executor NAME`` finds one `run` of one shape."""

from __future__ import annotations

import inspect

import pytest

from bionemo_wds.prepare.executors import EXECUTORS, executor, local
from bionemo_wds.prepare.executors import dask as dask_executor
from bionemo_wds.prepare.options import EXECUTORS as CHOICES


def test_every_executor_choice_is_registered_and_found():
    assert CHOICES == tuple(EXECUTORS) == ("local", "dask")
    assert executor("local") is local.run
    assert executor("dask") is dask_executor.run


def test_the_executors_take_the_same_arguments():
    shapes = {name: list(inspect.signature(executor(name)).parameters) for name in EXECUTORS}
    assert shapes == {"local": ["setup", "tasks", "opts"], "dask": ["setup", "tasks", "opts"]}


def test_an_unknown_executor_is_refused_naming_the_choices():
    with pytest.raises(KeyError, match="unknown executor 'slurm'; one of local, dask"):
        executor("slurm")
