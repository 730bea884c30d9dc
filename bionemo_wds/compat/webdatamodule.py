"""`Split`, `WebDataModule` and `PickledDataWDS`: the bionemo-webdatamodule API on our code.

The constructors keep the first bionemo-webdatamodule release's public signatures, so existing
user code runs unchanged: shards are found as ``{dir}/{prefix}-*.tar`` (sorted); each sample is
decoded and the members named by `suffix_keys_wds` are extracted as a tuple (hence the usual
`untuple` first stage); ``pipeline_wds[split]`` is composed on the WebDataset and
``pipeline_prebatch_wld[split]`` on the WebLoader; the loader yields
``ceil(n_samples / global_batch_size)`` batches per (pseudo-)epoch. ``invoke_wds``/``invoke_wld``
(from the later upstream release) call named methods on the built objects.

Pickled shards (`PickledDataWDS`) execute code when loaded: use them only with trusted input.
"""

from __future__ import annotations

import math
from enum import Enum, auto
from fnmatch import fnmatch
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import lightning as L
import webdataset as wds

from bionemo_wds.compat.pickles import pickles_to_tars
from bionemo_wds.storage import list_shards

Composable = Callable[[Iterable[Any]], Iterable[Any]]
Pipeline = Composable | Iterable[Composable] | None
Invocations = Sequence[tuple[str, dict[str, Any]]]


class Split(Enum):
    """Names of the data splits; ``split.name`` is the directory name prepare writes."""

    train = auto()
    val = auto()
    test = auto()


STAGE_SPLITS = {"fit": (Split.train, Split.val), "validate": (Split.val,), "test": (Split.test,),
                "predict": (Split.test,)}


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
                    raise ValueError(
                        f"shard {sample.get('__url__')}: sample {sample.get('__key__')} has {problem} matching "
                        f"suffix key {suffix!r}; its members are {members}"
                    )
                chosen.append(matches[0])
            matched[names] = chosen
        yield tuple(sample[name] for name in chosen)


def _compose(pipe, stages: Pipeline):
    if stages is None:
        return pipe
    if isinstance(stages, Iterable) and not callable(stages):
        return pipe.compose(*stages)
    return pipe.compose(stages)


def _invoke(obj, calls: Invocations | None):
    for name, kwargs in calls or ():
        result = getattr(obj, name)(**(kwargs or {}))
        obj = result if result is not None else obj
    return obj


class WebDataModule(L.LightningDataModule):
    """A LightningDataModule over WebDataset tar shards, one directory (or URL) per split."""

    def __init__(
        self,
        dirs_tars_wds: dict[Split, str],
        n_samples: dict[Split, int],
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
        self._configure(dirs_tars_wds, n_samples, suffix_keys_wds, global_batch_size, prefix_tars_wds,
                        pipeline_wds, pipeline_prebatch_wld, kwargs_wds, kwargs_wld, invoke_wds, invoke_wld)

    def _configure(self, dirs_tars_wds, n_samples, suffix_keys_wds, global_batch_size, prefix_tars_wds="wdshards",
                   pipeline_wds=None, pipeline_prebatch_wld=None, kwargs_wds=None, kwargs_wld=None,
                   invoke_wds=None, invoke_wld=None) -> None:
        if n_samples is not None and set(n_samples) != set(dirs_tars_wds):
            raise ValueError(f"n_samples has splits {sorted(s.name for s in n_samples)} but dirs_tars_wds has "
                             f"{sorted(s.name for s in dirs_tars_wds)}; they must name the same splits")
        if isinstance(suffix_keys_wds, str):
            suffix_keys_wds = [suffix_keys_wds]
        elif not isinstance(suffix_keys_wds, Iterable):
            raise TypeError("suffix_keys_wds must be a str or an iterable of str")
        self._dirs_tars_wds = dict(dirs_tars_wds)
        self._n_samples = dict(n_samples) if n_samples is not None else None
        self._suffix_keys_wds = list(suffix_keys_wds)
        self._global_batch_size = global_batch_size
        self._prefix_tars_wds = prefix_tars_wds
        self._pipeline_wds = pipeline_wds or {}
        self._pipeline_prebatch_wld = pipeline_prebatch_wld or {}
        self._kwargs_wds = kwargs_wds or {}
        self._kwargs_wld = kwargs_wld or {}
        self._invoke_wds = invoke_wds or {}
        self._invoke_wld = invoke_wld or {}
        self._dataset: dict[Split, Any] = {}
        self._urls: dict[Split, list[str]] = {}

    # -- datasets ---------------------------------------------------------------------------------

    def shard_urls(self, split: Split) -> list[str]:
        """The split's shards, sorted; a clear error when the split or its shards are missing."""
        if split not in self._dirs_tars_wds:
            raise ValueError(f"no directory given for the {split.name} split (dirs_tars_wds has "
                             f"{', '.join(s.name for s in self._dirs_tars_wds) or 'none'})")
        directory = self._dirs_tars_wds[split]
        urls = list_shards(directory, self._prefix_tars_wds)
        if not urls:
            raise FileNotFoundError(f"no shards match {directory}/{self._prefix_tars_wds}-*.tar for the "
                                    f"{split.name} split")
        return urls

    def _build_dataset(self, split: Split):
        urls = self._urls[split] = self.shard_urls(split)
        kwargs = dict(self._kwargs_wds.get(split) or {})
        kwargs.setdefault("shardshuffle", False)  # webdataset warns when left unset
        dataset = wds.WebDataset(urls, **kwargs).decode()
        dataset = dataset.compose(lambda src: extract_suffixes(src, self._suffix_keys_wds))
        dataset = _compose(dataset, self._pipeline_wds.get(split))
        return _invoke(dataset, self._invoke_wds.get(split))

    def setup(self, stage: str) -> None:
        """Build the datasets `stage` needs: fit -> train+val, validate -> val, test/predict -> test."""
        if stage not in STAGE_SPLITS:
            raise NotImplementedError(f"Data setup with stage={stage!r} is not implemented "
                                      f"(use one of {', '.join(STAGE_SPLITS)})")
        for split in STAGE_SPLITS[stage]:
            self._dataset[split] = self._build_dataset(split)

    # -- loaders ----------------------------------------------------------------------------------

    def _loader_kwargs(self, split: Split) -> dict[str, Any]:
        return {"batch_size": None, **(self._kwargs_wld.get(split) or {})}

    def _check_workers(self, split: Split, kwargs: dict[str, Any]) -> None:
        workers = int(kwargs.get("num_workers") or 0)
        n_shards = len(self._urls[split])
        if workers > n_shards:
            raise ValueError(
                f"the {split.name} split has fewer shards ({n_shards}) than workers (num_workers={workers}): "
                "each worker reads whole shards, so some would get none; lower num_workers or write more shards"
            )

    def _epoch_batches(self, split: Split) -> int | None:
        if self._n_samples is None:
            return None
        return math.ceil(self._n_samples[split] / self._global_batch_size)

    def _make_loader(self, dataset, kwargs: dict[str, Any]):
        return wds.WebLoader(dataset, **kwargs)

    def _setup_dataloader(self, split: Split):
        if split not in self._dataset:
            raise ValueError(f"the {split.name} dataloader was asked for before setup() built the {split.name} dataset")
        kwargs = self._loader_kwargs(split)
        self._check_workers(split, kwargs)
        loader = self._make_loader(self._dataset[split], kwargs)
        loader = _compose(loader, self._pipeline_prebatch_wld.get(split))
        n_batches = self._epoch_batches(split)
        if n_batches is not None:
            loader = loader.with_epoch(n_batches)
        return _invoke(loader, self._invoke_wld.get(split))

    def train_dataloader(self):
        return self._setup_dataloader(Split.train)

    def val_dataloader(self):
        return self._setup_dataloader(Split.val)

    def test_dataloader(self):
        return self._setup_dataloader(Split.test)

    def predict_dataloader(self):
        return self._setup_dataloader(Split.test)


class PickledDataWDS(WebDataModule):
    """Pickled samples to tar shards in `prepare_data`, then a `WebDataModule` over them.

    ``{dir_pickles}/{name}.{suffix_pickles}`` for each name of ``names_subset[split]`` goes to
    ``{prefix_dir_tars_wds}{split.name}/{prefix}-%06d.tar``. Trusted input only: loading pickles
    runs code.
    """

    def __init__(self, dir_pickles: str, suffix_pickles: str, names_subset: dict[Split, list[str]],
                 prefix_dir_tars_wds: str, *args, n_tars_wds: int | None = None, **kwargs):
        dirs = {split: f"{prefix_dir_tars_wds}{split.name}" for split in names_subset}
        n_samples = {split: len(names) for split, names in names_subset.items()}
        super().__init__(dirs, n_samples, suffix_pickles, *args, **kwargs)
        self._dir_pickles = dir_pickles
        self._names_subset = names_subset
        self._n_tars_wds = n_tars_wds

    def prepare_data(self) -> None:
        """Write every split's pickles into its tar directory (rewritten each call, atomically per shard)."""
        for split, names in self._names_subset.items():
            pickles_to_tars(self._dir_pickles, names, self._suffix_keys_wds, self._dirs_tars_wds[split],
                            self._prefix_tars_wds, min_num_shards=self._n_tars_wds)
