"""A new user's first day with the classic bionemo-webdatamodule API (`WebDataModule`), and blends.

Pipelines as users write them: a ``partial`` of a curried webdataset filter works (it runs as the
filter called with its arguments), anything else that is not a stage is a one-line error at
construction naming the argument, the split and the entry; a split with fewer shards than loader
workers is refused when its loader is iterated (as the upstream suite expects: a `ValueError` with
"have fewer shards than workers", raised before any worker starts) with the ``--samples-per-shard``
that fixes it (and that value does);
and the worked example in ``examples/classic_webdatamodule.py`` runs. A blend says its mix once at
WARNING level, and warns once about a dataset it repeats more than 10 times per epoch.
"""

from __future__ import annotations

import logging
import math
import random
import re
import warnings
from functools import partial
from pathlib import Path

import pytest
import webdataset as wds
from conftest import KLEBSIELLA, LAMBDA

from bionemo_wds import Split, WebDataModule, batch, decode_sample, shuffle, untuple
from bionemo_wds.compat.pipelines import PipelineError
from bionemo_wds.format import read_manifest
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.prepare import PrepareOptions, prepare

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "classic_webdatamodule.py"
OPTS = {"seq_length": 1024, "stride": 1000, "windows_per_record": 16, "progress": False}


@pytest.fixture(scope="module")
def several_shards(tmp_path_factory) -> Path:
    """Klebsiella cut for 1024 tokens, 200 windows per shard: the val split has 3 shards."""
    out = tmp_path_factory.mktemp("classic") / "kleb"
    prepare([KLEBSIELLA], out, PrepareOptions(samples_per_shard=200, **OPTS))
    return out


@pytest.fixture(scope="module")
def one_shard(tmp_path_factory) -> Path:
    """Klebsiella with shards larger than any split: one shard per split (a small genome's first try)."""
    out = tmp_path_factory.mktemp("classic_one") / "kleb"
    prepare([KLEBSIELLA], out, PrepareOptions(samples_per_shard=100_000, **OPTS))
    return out


def module(root: Path, pipeline, workers: int = 0, prebatch=None, **kw) -> WebDataModule:
    """Train and val over `root`; `pipeline` (then batches of 8, made in the loader workers) on val.
    No n_samples: no pseudo-epoch, a loader reads each window once."""
    splits = (Split.train, Split.val)
    return WebDataModule(
        {s: str(root / s.name) for s in splits},
        None,
        "msgpack",
        8,
        pipeline_wds={Split.val: [*pipeline, batch(8)] if isinstance(pipeline, list) else pipeline},
        pipeline_prebatch_wld={Split.val: prebatch},
        kwargs_wld={s: {"num_workers": workers} for s in splits},
        **kw,
    )


def val_keys(dm: WebDataModule) -> list[str]:
    dm.setup("validate")
    return [key for b in dm.val_dataloader() for key in b["keys"]]


# ---------------------------------------------------------------------------------------------------- pipelines


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("filter_", [wds.shuffle, shuffle], ids=["wds.shuffle", "bionemo_wds.shuffle"])
def test_a_partial_of_a_curried_filter_runs_as_the_filter_called(several_shards, workers, filter_):
    """``partial(wds.shuffle, bufsize=50)`` fails inside a worker with webdataset alone (it returns a
    curried filter, not samples); here it is ``wds.shuffle(bufsize=50)``: the same windows in the same order."""
    seeded = {"rng": random.Random(5)} if filter_ is wds.shuffle else {"seed": 5}
    again = {"rng": random.Random(5)} if filter_ is wds.shuffle else {"seed": 5}
    called = val_keys(module(several_shards, [untuple, decode_sample(), filter_(bufsize=50, **seeded)], workers))
    partial_ = val_keys(
        module(several_shards, [untuple, decode_sample(), partial(filter_, bufsize=50, **again)], workers)
    )
    n_val = read_manifest(several_shards).splits["val"].n_samples
    assert partial_ == called
    assert len(called) == len(set(called)) == n_val  # every window once
    assert called != sorted(called, key=lambda k: (k.split("/")[0], int(k.split("/")[1])))  # shuffled


def test_a_partial_with_a_positional_argument_is_the_filter_called_with_it(several_shards):
    called = val_keys(module(several_shards, [untuple, decode_sample(), wds.shuffle(40, rng=random.Random(1))]))
    partial_ = val_keys(
        module(several_shards, [untuple, decode_sample(), partial(wds.shuffle, 40, rng=random.Random(1))])
    )
    assert partial_ == called


def test_an_uncalled_curried_filter_is_named_at_construction(several_shards):
    with pytest.raises(PipelineError) as info:
        module(several_shards, [untuple, decode_sample(), wds.shuffle])
    message = str(info.value)
    assert "pipeline_wds['val'][2] (entry 3 of 4)" in message
    assert "curried filter shuffle" in message and "wds.shuffle(500)" in message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("entry", "named"),
    [(500, "int 500"), ("shuffle", "str 'shuffle'"), (lambda src, size: src, "cannot be called with one argument")],
    ids=["int", "str", "two-arguments"],
)
def test_an_entry_that_is_not_a_stage_is_named_at_construction(several_shards, entry, named):
    with pytest.raises(PipelineError) as info:
        module(several_shards, [untuple, entry, decode_sample()])
    message = str(info.value)
    assert "pipeline_wds['val'][1] (entry 2 of 4)" in message and named in message
    assert "a stage takes the iterator of samples" in message


def test_the_prebatch_pipeline_is_checked_too(several_shards):
    with pytest.raises(PipelineError, match=r"pipeline_prebatch_wld\['val'\] is webdataset's curried filter batched"):
        module(several_shards, [untuple, decode_sample()], prebatch=wds.batched)


def test_a_stage_that_returns_no_samples_is_named_when_read(several_shards):
    def forgot_to_yield(src):
        for _ in src:
            pass

    dm = module(several_shards, [untuple, forgot_to_yield, decode_sample()])
    dm.setup("validate")
    with pytest.raises(
        PipelineError, match=r"pipeline_wds\['val'\]\[1\] \(entry 2 of 4\) \(.*forgot_to_yield\) returned NoneType"
    ):
        next(iter(dm.val_dataloader()))


# ---------------------------------------------------------------------------------------------------- shards vs workers


def test_fewer_shards_than_workers_says_the_samples_per_shard_that_fixes_it(one_shard, tmp_path):
    dm = module(one_shard, [untuple, decode_sample()], workers=2)
    dm.setup("fit")
    loader = dm.train_dataloader()
    with pytest.raises(ValueError, match="have fewer shards than workers") as info:
        iter(loader)  # in this process, before a worker starts
    message = str(info.value)
    assert f"the train split has 1 shard(s) ({one_shard}/train/wdshards-*.tar) but num_workers=2" in message
    assert "use num_workers=1 or fewer" in message and "\n" not in message
    per_shard = int(re.search(r"--samples-per-shard (\d+) or fewer", message).group(1))
    windows = {s: read_manifest(one_shard).splits[s].n_samples for s in ("train", "val")}
    smallest = min(windows, key=windows.get)
    assert f"the {smallest} split has {windows[smallest]} windows for num_workers=2" in message
    # the value given is the largest that gives every split a shard per worker
    assert math.ceil(windows[smallest] / per_shard) == 2 > math.ceil(windows[smallest] / (per_shard + 1))
    again = tmp_path / "kleb"
    prepare([KLEBSIELLA], again, PrepareOptions(samples_per_shard=per_shard, **OPTS))
    fixed = module(again, [untuple, decode_sample()], workers=2)
    fixed.setup("fit")
    keys = val_keys(fixed)
    assert sorted(keys) == sorted(set(keys)) and len(keys) == windows["val"]


def test_as_many_workers_as_shards_is_fine(several_shards):
    n_shards = len(read_manifest(several_shards).splits["val"].shards)
    keys = val_keys(module(several_shards, [untuple, decode_sample()], workers=n_shards))
    assert len(keys) == len(set(keys)) == read_manifest(several_shards).splits["val"].n_samples


def test_resampled_shards_need_no_shard_per_worker(one_shard):
    """webdataset's resampled mode draws shards per worker: no shard count to check."""
    dm = module(one_shard, [untuple, decode_sample()], workers=2, kwargs_wds={Split.val: {"resampled": True}})
    dm.setup("validate")
    assert len(next(iter(dm.val_dataloader()))["keys"]) == 8


# ---------------------------------------------------------------------------------------------------- the example


@pytest.mark.slow
def test_the_worked_example_runs(tmp_path, zygote):
    """``python examples/classic_webdatamodule.py`` from an empty directory (forked by the `zygote`,
    which imported Lightning once: `forked_runs`); its output and errors are one log."""
    log = tmp_path.parent / f"{tmp_path.name}-example.log"
    assert zygote.run(EXAMPLE, [], log, cwd=tmp_path).wait(300) == 0, log.read_text()[-3000:]
    out = log.read_text()
    val = re.search(
        r"^val: (\d+) batches of (\d+) windows, tokens \((\d+), (\d+)\) torch\.int64, keys (.*)$", out, re.M
    )
    assert val, out
    # the pseudo-epoch: ceil(n_samples / global_batch_size)
    assert int(val.group(1)) == math.ceil(int(val.group(2)) / 8) > 0
    assert (int(val.group(3)), int(val.group(4))) == (8, 1024)
    for key in ("tokens", "labels", "loss_mask", "position_ids"):
        assert f"'{key}'" in val.group(5)
    fit = re.search(r"^fit: (\d+) steps, val_loss ([\d.]+) \(uniform guess: ([\d.]+)\)$", out, re.M)
    assert fit, out
    assert int(fit.group(1)) == 30
    # the labels are bases: a model that learned anything is near log(4) = 1.39, far below log(256) = 5.55
    assert float(fit.group(2)) < 2.0 < float(fit.group(3))
    assert "Traceback" not in out and "not writable" not in out


# ---------------------------------------------------------------------------------------------------- blend warnings


@pytest.fixture(scope="module")
def blend_roots(tmp_path_factory) -> dict[str, Path]:
    """Klebsiella (~9,000 train windows of 512 tokens) and lambda phage (101, all train)."""
    base = tmp_path_factory.mktemp("blend")
    specs = {
        "kleb": ([KLEBSIELLA], PrepareOptions(seq_length=512, stride=509, samples_per_shard=1000, progress=False)),
        "lam": (
            [LAMBDA],
            PrepareOptions(seq_length=512, stride=480, samples_per_shard=50, split=(1, 0, 0), progress=False),
        ),
    }
    for name, (inputs, opts) in specs.items():
        prepare(inputs, base / name, opts)
    return {name: base / name for name in specs}


def blend_module(roots: dict[str, Path], lam_weight: float, samples: int, **kw) -> GenomicWebDataModule:
    datasets = [{"path": str(roots["kleb"]), "weight": 1.0}, {"path": str(roots["lam"]), "weight": lam_weight}]
    return GenomicWebDataModule(datasets=datasets, samples_per_epoch=samples, micro_batch_size=8, seed=3, **kw)


def test_a_blend_that_repeats_a_small_dataset_warns_once(blend_roots, caplog):
    """lambda at weight 1 of 2 in a 4000-window epoch: 2000 of its 101 windows, ~19.8 times per epoch."""
    dm = blend_module(blend_roots, 1.0, 4000, num_workers=2)
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        dm.setup("fit")
        for _ in range(2):  # two epochs (a few batches each) with loader workers: nothing more is said
            for _, _ in zip(range(3), dm.train_dataloader()):
                pass
    repeats = [str(w.message) for w in caught if "times per epoch" in str(w.message)]
    assert repeats == [
        f"blend: lam ({blend_roots['lam']}) is read 19.8 times per epoch (weight 1, 50.0% of 4000 windows: 2000, "
        "from its 101 windows), more than 10x: a model may memorise it; lower its weight or samples_per_epoch, "
        "or give it more data"
    ]
    records = [r for r in caplog.records if r.getMessage().startswith("blend of")]
    assert len(records) == 1 and records[0].levelno == logging.WARNING  # seen without any logging set up
    shares = [records[0].getMessage()]
    assert "\n" not in shares[0]
    assert shares[0].startswith("blend of 2 datasets, 4000 windows per epoch: kleb weight 1, 50.0%: 2000 of its ")
    assert shares[0].endswith("; lam weight 1, 50.0%: 2000 of its 101 windows (19.80x)")


def test_a_blend_below_the_repeat_threshold_only_logs_the_shares(blend_roots, caplog):
    dm = blend_module(blend_roots, 0.1, 4000)  # lambda: 364 of 101 windows, 3.6x
    with warnings.catch_warnings(record=True) as caught, caplog.at_level(logging.WARNING):
        warnings.simplefilter("always")
        dm.setup("fit")
    assert not [w for w in caught if "times per epoch" in str(w.message)]
    (shares,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("blend of")]
    assert "lam weight 0.1, 9.1%: 364 of its 101 windows (3.60x)" in shares
