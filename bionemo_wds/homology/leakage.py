"""How much of one split has a near-identical copy in another: `leakage` and ``verify --leakage``.

For every ordered pair of splits (A, B) and every external evaluation file given: the share of A's
sequences, and of A's bases, that are *contained* in some sequence of B at an estimated identity of at
least ``min_identity`` (FracMinHash containment of the A sequence in the B sequence, ``C ** (1/k)``:
`homology.similarity`). Containment is directional on purpose: a test plasmid found whole in a
training assembly leaks; the training assembly is not thereby "in" the test set. Sequences with too
few hashes to judge (shorter than about ``MIN_SHARED * scaled`` bases) are counted apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bionemo_wds.core.distinct import distinct
from bionemo_wds.format import read_manifest
from bionemo_wds.homology.membership import MIN_IDENTITY, check_identity, read_queries, sketch_queries
from bionemo_wds.homology.similarity import MIN_SHARED, Matches, matches_both_ways
from bionemo_wds.homology.sketch import Sketches, SketchParams, sourmash_module
from bionemo_wds.homology.stored import read_splits
from bionemo_wds.load.spans import is_sequence_layout
from bionemo_wds.prepare.executors.tasks import TaskPlace
from bionemo_wds.storage.store import Store

#: Example pairs kept per row of the report.
EXAMPLES = 5


@dataclass
class Leak:
    """A's sequences with a near-identical copy in B."""

    source: str  # a split, or an evaluation file
    target: str
    sequences: int
    leaked_sequences: int
    bases: int
    leaked_bases: int
    unjudged_sequences: int  # too short to sketch at this scaled
    examples: list[tuple[str, str, float]] = field(default_factory=list)  # (A sequence, B sequence, identity)

    @property
    def sequence_share(self) -> float:
        return self.leaked_sequences / self.sequences if self.sequences else 0.0

    @property
    def base_share(self) -> float:
        return self.leaked_bases / self.bases if self.bases else 0.0


@dataclass
class LeakageReport:
    """Every pair's `Leak`, and the measure used."""

    min_identity: float
    params: SketchParams
    leaks: list[Leak]

    def above(self, max_share: float) -> list[Leak]:
        """The pairs whose leaked share of bases or of sequences is above `max_share`."""
        return [leak for leak in self.leaks if max(leak.base_share, leak.sequence_share) > max_share]


def leak(source: str, a: Sketches, target: str, b: Sketches, found: Matches) -> Leak:
    """`Leak` of `a`'s sequences into `b`, from their `found` matches (`a`'s sequences as queries)."""
    leaked = distinct(found.query)
    best = np.argsort(-found.ani, kind="stable")[:EXAMPLES]
    examples = [
        (a.names[int(found.query[i])], b.names[int(found.target[i])], round(float(found.ani[i]), 4)) for i in best
    ]
    return Leak(
        source,
        target,
        len(a),
        len(leaked),
        int(a.lengths.sum()),
        int(a.lengths[leaked].sum()),
        int((a.sizes < MIN_SHARED).sum()),
        examples,
    )


def leaks_both_ways(source: str, a: Sketches, target: str, b: Sketches, min_identity: float) -> tuple[Leak, Leak]:
    """The leaks of `a` into `b` and of `b` into `a`, from one join."""
    forward, backward = matches_both_ways(a, b, min_identity)
    return leak(source, a, target, b, forward), leak(target, b, source, a, backward)


def leakage(
    dataset: str,
    against: Sequence[str] = (),
    min_identity: float = MIN_IDENTITY,
    params: SketchParams | None = None,
    storage_options: dict[str, Any] | None = None,
    progress: bool = False,
    place: TaskPlace | None = None,
) -> LeakageReport:
    """Leakage between every two splits of `dataset` and between each split and each file of `against`;
    the shards are read once, as tasks at `place` (this process by default, a process pool or Dask)."""
    params = (params or SketchParams()).check()
    check_identity(min_identity)
    sourmash_module()  # the [homology] extra, needed whether or not the splits' sketches are kept
    evals = [(path, sketch_queries(read_queries([path]), params)) for path in against]  # bad files fail first
    store = Store(dataset, storage_options)
    manifest = read_manifest(store)
    layout = is_sequence_layout(manifest.params)
    place = place or TaskPlace(progress=progress)
    splits = {s.split: s.sketches for s in read_splits(store, list(manifest.splits), layout, params, None, place)}
    names = list(splits)
    pair = {}  # each unordered pair of splits joined once, both directions from it
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            pair[a, b], pair[b, a] = leaks_both_ways(a, splits[a], b, splits[b], min_identity)
    leaks = [pair[a, b] for a in names for b in names if a != b]
    for path, sketches in evals:
        for s, stored in splits.items():
            leaks.extend(leaks_both_ways(path, sketches, s, stored, min_identity))
    return LeakageReport(min_identity, params, leaks)
