"""`Split`, `WebDataModule` and `PickledDataWDS`: the bionemo-webdatamodule API on our code.

The constructors keep the first bionemo-webdatamodule release's public signatures, so existing
user code runs unchanged: shards are found as ``{dir}/{prefix}-*.tar`` (sorted); each sample is
decoded and the members named by `suffix_keys_wds` are extracted as a tuple (hence the usual
`untuple` first stage); ``pipeline_wds[split]`` is composed on the WebDataset and
``pipeline_prebatch_wld[split]`` on the WebLoader; the loader yields
``ceil(n_samples / global_batch_size)`` batches per (pseudo-)epoch. ``invoke_wds``/``invoke_wld``
(from the later upstream release) call named methods on the built objects. Every per-split argument
may name its splits as `Split` members or as strings (``{"train": dir}``, as YAML configs give them).

Pickled shards (`PickledDataWDS`) execute code when loaded: use them only with trusted input.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from fnmatch import fnmatch
from functools import partial
from typing import Any, ClassVar

import lightning as L
import webdataset as wds

from bionemo_wds.compat.pickles import pickles_to_tars
from bionemo_wds.compat.pipelines import check_pipeline
from bionemo_wds.compat.shard_count import check_shards_for_workers, needs_worker_shards, prepared_remedy
from bionemo_wds.errors import OptionError
from bionemo_wds.lightning.loaders import (
    STAGE_SPLITS,
    Invocations,
    Pipeline,
    check_stage,
    compose,
    invoke,
    make_loader,
    shard_urls,
)
from bionemo_wds.load.plan import epoch_batches
from bionemo_wds.load.splits import Split, by_split

__all__ = [
    "STAGE_SPLITS",
    "Invocations",
    "PickledDataWDS",
    "PickledSplits",
    "Pipeline",
    "Split",
    "WebDataModule",
    "extract_suffixes",
    "pickles_to_tars",
]


def extract_suffixes(src: Iterable[dict], suffixes: Sequence[str]) -> Iterator[tuple]:
    """webdataset's ``extract_keys("*.<suffix>", ...)`` with an error that names shard and sample.

    The member names matched for a set of sample keys are remembered, since every sample of a
    dataset usually has the same ones (fnmatch per key per sample was measurable).
    """
    patterns = [f"*.{suffix}" for suffix in suffixes]
    matched: dict[tuple, list[str]] = {}
    for sample in src:
        names = tuple(sample)
        chosen = matched.get(names)
        if chosen is None:
            chosen = []
            for suffix, pattern in zip(suffixes, patterns):
                matches = [k for k in names if fnmatch("." + k, pattern) or fnmatch(k, pattern)]
                if len(matches) != 1:
                    members = sorted(k for k in names if not k.startswith("__"))
                    problem = "no member" if not matches else f"several members ({matches})"
                    raise OptionError(
                        f"shard {sample.get('__url__')}: sample {sample.get('__key__')} has {problem} matching "
                        f"suffix key {suffix!r}; its members are {members}"
                    )
                chosen.append(matches[0])
            matched[names] = chosen
        yield tuple(sample[name] for name in chosen)


class WebDataModule(L.LightningDataModule):
    """A LightningDataModule over WebDataset tar shards, one directory (or URL) per split."""

    #: Arguments every WebLoader gets unless `kwargs_wld` says otherwise: the first release hands
    #: ready-made batches through (``batch_size=None``); 1.0 (`compat.bionemo`) keeps DataLoader's default.
    LOADER_DEFAULTS: ClassVar[dict[str, Any]] = {"batch_size": None}

    def __init__(
        self,
        dirs_tars_wds: dict[Split, str],
        n_samples: dict[Split, int] | None,
        suffix_keys_wds: str | Iterable[str],
        global_batch_size: int,
        prefix_tars_wds: str = "wdshards",
        pipeline_wds: dict[Split, Pipeline] | None = None,
        pipeline_prebatch_wld: dict[Split, Pipeline] | None = None,
        kwargs_wds: dict[Split, dict[str, Any]] | None = None,
        kwargs_wld: dict[Split, dict[str, Any]] | None = None,
        *,
        invoke_wds: dict[Split, Invocations] | None = None,
        invoke_wld: dict[Split, Invocations] | None = None,
    ):
        super().__init__()
        dirs_tars_wds = by_split(dirs_tars_wds, "dirs_tars_wds")
        n_samples = by_split(n_samples, "n_samples") if n_samples is not None else None
        if global_batch_size < 1:
            raise OptionError(f"global_batch_size must be at least 1, got {global_batch_size}")
        if n_samples is not None and set(n_samples) != set(dirs_tars_wds):
            raise OptionError(
                f"n_samples has splits {sorted(s.name for s in n_samples)} but dirs_tars_wds has "
                f"{sorted(s.name for s in dirs_tars_wds)}; they must name the same splits"
            )
        if isinstance(suffix_keys_wds, str):
            suffix_keys_wds = [suffix_keys_wds]
        elif not isinstance(suffix_keys_wds, Iterable):
            raise TypeError("suffix_keys_wds must be a str or an iterable of str")
        self._dirs_tars_wds = dirs_tars_wds
        self._n_samples = n_samples
        self._suffix_keys_wds = list(suffix_keys_wds)
        self._global_batch_size = global_batch_size
        self._prefix_tars_wds = prefix_tars_wds
        # every entry checked now (a clear error naming it, not a failure inside a loader worker)
        self._pipeline_wds = checked_pipelines(pipeline_wds, "pipeline_wds")
        self._pipeline_prebatch_wld = checked_pipelines(pipeline_prebatch_wld, "pipeline_prebatch_wld")
        self._kwargs_wds = by_split(kwargs_wds, "kwargs_wds")
        self._kwargs_wld = by_split(kwargs_wld, "kwargs_wld")
        self._invoke_wds = by_split(invoke_wds, "invoke_wds")
        self._invoke_wld = by_split(invoke_wld, "invoke_wld")
        self._dataset: dict[Split, Any] = {}
        self._urls: dict[Split, list[str]] = {}

    def shard_urls(self, split: Split) -> list[str]:
        """The split's shards, sorted; a clear error when the split or its shards are missing."""
        if split not in self._dirs_tars_wds:
            raise OptionError(
                f"no directory given for the {split.name} split (dirs_tars_wds has "
                f"{', '.join(s.name for s in self._dirs_tars_wds) or 'none'})"
            )
        return shard_urls(self._dirs_tars_wds[split], self._prefix_tars_wds, split)

    def loader_workers(self, split: Split) -> int:
        """The ``num_workers`` of the split's loader."""
        return int({**self.LOADER_DEFAULTS, **(self._kwargs_wld.get(split) or {})}.get("num_workers") or 0)

    def shard_remedy(self, split: Split, workers: int) -> str:
        """How to give `split` (and every other split, with its loader's workers) a shard per loader
        worker: the end of the too-few-shards error."""
        needs = {
            other.name: max(self.loader_workers(other), 1)
            for other in self._dirs_tars_wds
            if needs_worker_shards(self._kwargs_wds.get(other) or {})
        }
        needs[split.name] = workers
        return prepared_remedy(self._dirs_tars_wds[split], self._prefix_tars_wds, needs)

    def setup(self, stage: str) -> None:
        """Build the datasets `stage` needs: fit -> train+val, validate -> val, test/predict -> test.

        A split with fewer shards than its loader's ``num_workers`` is refused when its loader is
        iterated (`check_workers`), where webdataset itself would fail inside a worker."""
        for split in check_stage(stage):
            kwargs = dict(self._kwargs_wds.get(split) or {})
            kwargs.setdefault("shardshuffle", False)  # webdataset warns when left unset
            urls = self.shard_urls(split)
            self._urls[split] = urls
            dataset = wds.WebDataset(urls, **kwargs).decode()
            dataset = dataset.compose(partial(extract_suffixes, suffixes=self._suffix_keys_wds))
            dataset = compose(dataset, self._pipeline_wds.get(split))
            self._dataset[split] = invoke(dataset, self._invoke_wds.get(split))

    def check_workers(self, split: Split) -> None:
        """A `ValueError` ("... have fewer shards than workers ...") when the split's loader has more
        ``num_workers`` than the split has shards, with the remedy; run when the loader is iterated,
        so ``num_workers`` is read as it is then."""
        workers = self.loader_workers(split)
        urls = self._urls[split]
        if needs_worker_shards(self._kwargs_wds.get(split) or {}) and workers > len(urls):
            remedy = self.shard_remedy(split, workers)
            check_shards_for_workers(
                split.name, urls, self._dirs_tars_wds[split], self._prefix_tars_wds, workers, remedy
            )

    def _dataloader(self, split: Split) -> wds.WebLoader:
        if split not in self._dataset:
            raise ValueError(f"the {split.name} dataloader was asked for before setup() built the {split.name} dataset")
        n_batches = epoch_batches(self._n_samples[split], self._global_batch_size) if self._n_samples else None
        return make_loader(
            self._dataset[split],
            {**self.LOADER_DEFAULTS, **(self._kwargs_wld.get(split) or {})},
            self._pipeline_prebatch_wld.get(split),
            n_batches,
            self._invoke_wld.get(split),
            check=partial(self.check_workers, split),
        )

    def train_dataloader(self) -> wds.WebLoader:
        return self._dataloader(Split.train)

    def val_dataloader(self) -> wds.WebLoader:
        return self._dataloader(Split.val)

    def test_dataloader(self) -> wds.WebLoader:
        return self._dataloader(Split.test)

    def predict_dataloader(self) -> wds.WebLoader:
        return self._dataloader(Split.test)


def checked_pipelines(pipelines: dict[Any, Pipeline] | None, what: str) -> dict[Split, Any]:
    """A per-split pipeline argument with every entry checked (`compat.pipelines.check_pipeline`)."""
    return {split: check_pipeline(p, what, split.name) for split, p in by_split(pipelines, what).items()}


class PickledSplits:
    """What both `PickledDataWDS` forms (first release, 1.0) add to their `WebDataModule`: the pickles
    of every split, written into the split's tar directory by `prepare_data`."""

    _dirs_tars_wds: dict[Split, str]
    _suffix_keys_wds: list[str]
    _prefix_tars_wds: str

    def keep_pickles(self, dir_pickles: str, names_subset: dict[Split, list[str]], n_tars_wds: int | None) -> None:
        self.dir_pickles, self.n_tars_wds = dir_pickles, n_tars_wds
        self.names_subset = by_split(names_subset, "names_subset")
        missing = [split.name for split in self.names_subset if split not in self._dirs_tars_wds]
        if missing:
            raise OptionError(
                f"names_subset has the {', '.join(missing)} split(s) but dirs_tars_wds has "
                f"{', '.join(s.name for s in self._dirs_tars_wds) or 'none'}; give a directory for each"
            )

    def shard_remedy(self, split: Split, workers: int) -> str:
        """How to give `split` at least `workers` shards: more tars from `prepare_data`."""
        return f"or give n_tars_wds={workers} (or more) so prepare_data writes that many shards per split"

    def prepare_data(self) -> None:
        """Write every split's pickles into its tar directory (rewritten each call, atomically per shard)."""
        for split, names in self.names_subset.items():
            pickles_to_tars(
                self.dir_pickles,
                names,
                self._suffix_keys_wds,
                self._dirs_tars_wds[split],
                self._prefix_tars_wds,
                min_num_shards=self.n_tars_wds,
            )


class PickledDataWDS(PickledSplits, WebDataModule):
    """Pickled samples to tar shards in `prepare_data`, then a `WebDataModule` over them.

    ``{dir_pickles}/{name}.{suffix_pickles}`` for each name of ``names_subset[split]`` goes to
    ``{prefix_dir_tars_wds}{split.name}/{prefix}-%06d.tar``. Trusted input only: loading pickles
    runs code.
    """

    def __init__(
        self,
        dir_pickles: str,
        suffix_pickles: str,
        names_subset: dict[Split, list[str]],
        prefix_dir_tars_wds: str,
        *args: Any,
        n_tars_wds: int | None = None,
        **kwargs: Any,
    ):
        names_subset = by_split(names_subset, "names_subset")
        dirs = {split: f"{prefix_dir_tars_wds}{split.name}" for split in names_subset}
        n_samples = {split: len(names) for split, names in names_subset.items()}
        super().__init__(dirs, n_samples, suffix_pickles, *args, **kwargs)
        self.keep_pickles(dir_pickles, names_subset, n_tars_wds)
