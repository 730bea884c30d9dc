"""The bionemo-webdatamodule 1.0 constructors, as thin wrappers over `bionemo_wds.compat.webdatamodule`.

That release changed the signatures: `WebDataModule(suffix_keys_wds, dirs_tars_wds, ...)` has no
`n_samples`/`global_batch_size` (so no pseudo-epoch of its own: use ``invoke_wld`` with
``with_epoch``), and its WebLoader keeps the DataLoader's default batch size unless `kwargs_wld`
sets one. `PickledDataWDS(dir_pickles, names_subset, suffix_keys_wds, dirs_tars_wds, ...)` takes
the output directories per split. The behaviour is the same code as the main API.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from bionemo_wds.compat import webdatamodule as _main
from bionemo_wds.compat.pickles import pickles_to_tars
from bionemo_wds.compat.webdatamodule import Invocations, PickledSplits, Pipeline, Split

__all__ = ["PickledDataWDS", "Split", "WebDataModule", "pickles_to_tars"]


class WebDataModule(_main.WebDataModule):
    """bionemo-webdatamodule 1.0 `WebDataModule`."""

    def __init__(
        self,
        suffix_keys_wds: str | Iterable[str],
        dirs_tars_wds: dict[Split, str],
        prefix_tars_wds: str = "wdshards",
        pipeline_wds: dict[Split, Pipeline] | None = None,
        pipeline_prebatch_wld: dict[Split, Pipeline] | None = None,
        kwargs_wds: dict[Split, dict[str, Any]] | None = None,
        kwargs_wld: dict[Split, dict[str, Any]] | None = None,
        invoke_wds: dict[Split, Invocations] | None = None,
        invoke_wld: dict[Split, Invocations] | None = None,
    ):
        super().__init__(
            dirs_tars_wds,
            None,
            suffix_keys_wds,
            1,
            prefix_tars_wds,
            pipeline_wds,
            pipeline_prebatch_wld,
            kwargs_wds,
            kwargs_wld,
            invoke_wds=invoke_wds,
            invoke_wld=invoke_wld,
        )

    LOADER_DEFAULTS: ClassVar[dict[str, Any]] = {}  # DataLoader's default batch size


class PickledDataWDS(PickledSplits, WebDataModule):
    """bionemo-webdatamodule 1.0 `PickledDataWDS`: pickles to tars in `prepare_data`. Trusted input only."""

    def __init__(
        self, dir_pickles: str, names_subset: dict[Split, list[str]], *args, n_tars_wds: int | None = None, **kwargs
    ):
        super().__init__(*args, **kwargs)
        self.keep_pickles(dir_pickles, names_subset, n_tars_wds)
