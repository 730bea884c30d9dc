"""The Trainer `bionemo-wds fit` builds: Lightning's, with its batch limits read as Lightning means them.

Lightning's ``Trainer`` reads ``limit_val_batches=1`` (an int) as one batch and ``1.0`` (a float) as
every batch. Its annotation, ``Optional[Union[int, float]]``, reaches the command line's parser as
``Union[float, int, None]`` (typing caches unions, and an equal ``Union[float, int]`` made earlier
is the one returned), and the parser tries a union's types in order: ``--trainer.limit_val_batches 1``
became ``1.0`` and validated on the whole split. `Trainer` here declares the five limits as
``int | float | None`` (a ``types.UnionType``, which typing does not cache), so ``1`` stays one batch
and ``1.0`` every batch; every other argument is Lightning's own, passed through unchanged.
Imported only by the Lightning commands (it imports Lightning).
"""

from __future__ import annotations

from typing import Any

import lightning as L


class Trainer(L.Trainer):
    """Lightning's ``Trainer``; the batch limits typed int first (module docstring)."""

    def __init__(
        self,
        *,
        limit_train_batches: int | float | None = None,
        limit_val_batches: int | float | None = None,
        limit_test_batches: int | float | None = None,
        limit_predict_batches: int | float | None = None,
        overfit_batches: int | float = 0.0,
        **kwargs: Any,
    ) -> None:
        """
        Args:
            limit_train_batches: how much of the training split to use per epoch: an int is a number
                of batches, a float a fraction (default: 1.0, all of it).
            limit_val_batches: how much of the validation split to use: an int is a number of
                batches, a float a fraction (default: 1.0, all of it).
            limit_test_batches: how much of the test split to use: batches (int) or a fraction (float).
            limit_predict_batches: how much of the predict split to use: batches (int) or a fraction (float).
            overfit_batches: train and validate on this many training batches (int) or this fraction
                of them (float); 0 (default) is off.
            **kwargs: every other argument of Lightning's ``Trainer``.
        """
        super().__init__(
            limit_train_batches=limit_train_batches,
            limit_val_batches=limit_val_batches,
            limit_test_batches=limit_test_batches,
            limit_predict_batches=limit_predict_batches,
            overfit_batches=overfit_batches,
            **kwargs,
        )
