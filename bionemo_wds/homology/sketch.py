"""One FracMinHash sketch per sequence, as flat arrays.

A FracMinHash sketch keeps the hashes of a sequence's canonical k-mers that fall below
``2**64 / scaled``: about one k-mer in `scaled`, the same k-mers for every sequence, so the share of
one sketch's hashes found in another estimates the share of k-mers (containment) without sampling
bias between sequences of different lengths. Hashing is sourmash's (`sourmash.MinHash`, MurmurHash3
of the canonical k-mer, seed 42), so our sketches agree with the field's standard tool; a k-mer
holding a base other than ACGT is skipped (``force=True``).

`Sketches` holds many: every sequence's sorted hashes back to back (``hashes``), where each one
starts (``offsets``), and the sequences' names and lengths. Saved as one ``.npz`` (`save`, `load`).
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from bionemo_wds.errors import BadInputError, OptionError

#: Defaults: k = 21 (sourmash's default for DNA) and one k-mer in 100 kept: a 10 kb contig keeps ~100.
KSIZE = 21
SCALED = 100
#: k-mer sizes we accept: odd (a canonical k-mer is then never its own reverse complement) and <= 31.
KSIZE_RANGE = (7, 31)
#: Largest --scaled: one k-mer in a million.
SCALED_MAX = 1_000_000
INSTALL = "pip install 'bionemo-wds[homology]'"


@dataclass(frozen=True)
class SketchParams:
    """What a sketch keeps: k-mers of `ksize` bases, one in `scaled` (by hash)."""

    ksize: int = KSIZE
    scaled: int = SCALED

    def problem(self) -> str | None:
        """What is wrong with these parameters, or None."""
        low, high = KSIZE_RANGE
        if not isinstance(self.ksize, int) or not low <= self.ksize <= high or self.ksize % 2 == 0:
            return f"--ksize must be an odd number from {low} to {high}, got {self.ksize}"
        if not isinstance(self.scaled, int) or not 1 <= self.scaled <= SCALED_MAX:
            return f"--scaled must be from 1 to {SCALED_MAX}, got {self.scaled}"
        return None

    def check(self) -> SketchParams:
        """These parameters, or an `OptionError` saying what is out of range."""
        problem = self.problem()
        if problem is not None:
            raise OptionError(problem)
        return self


def sourmash_module() -> Any:
    """The `sourmash` package, or a `BadInputError` saying how to install it."""
    try:
        import sourmash
    except ImportError as exc:
        raise BadInputError(f"sketching sequences needs sourmash, which is not installed: {INSTALL}") from exc
    return sourmash


def sketch_hashes(bases: Iterable[bytes | str], params: SketchParams) -> np.ndarray:
    """The sorted FracMinHash hashes (uint64) of one sequence given as one or more stretches of bases
    (k-mers do not span two stretches: the windows a dataset stores are sketched as stored)."""
    mh = sourmash_module().MinHash(n=0, ksize=params.ksize, scaled=params.scaled)
    for part in bases:
        text = part.decode("ascii", "replace") if isinstance(part, bytes | bytearray | memoryview) else part
        if len(text) >= params.ksize:
            mh.add_sequence(text, force=True)
    return np.fromiter(mh.hashes, dtype=np.uint64, count=len(mh))


@dataclass
class Sketches:
    """Sketches of `len(names)` sequences: sequence i's hashes are ``hashes[offsets[i]:offsets[i+1]]``."""

    params: SketchParams
    names: list[str]
    lengths: np.ndarray  # int64 bases per sequence
    hashes: np.ndarray  # uint64, each sequence's sorted, back to back
    offsets: np.ndarray  # int64, len(names) + 1

    def __len__(self) -> int:
        return len(self.names)

    @property
    def sizes(self) -> np.ndarray:
        """Hashes per sequence."""
        return np.diff(self.offsets)

    def of(self, i: int) -> np.ndarray:
        """Sequence i's hashes."""
        return self.hashes[self.offsets[i] : self.offsets[i + 1]]

    def owners(self) -> np.ndarray:
        """The sequence of every hash (int64, parallel to `hashes`)."""
        return np.repeat(np.arange(len(self), dtype=np.int64), self.sizes)

    @classmethod
    def build(
        cls,
        params: SketchParams,
        names: Sequence[str],
        lengths: Sequence[int] | np.ndarray,
        hashes: Sequence[np.ndarray],
    ) -> Sketches:
        """Sketches from per-sequence hash arrays."""
        sizes = np.fromiter((len(h) for h in hashes), dtype=np.int64, count=len(hashes))
        offsets = np.zeros(len(hashes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        flat = np.concatenate(list(hashes)).astype(np.uint64, copy=False) if len(hashes) else np.zeros(0, np.uint64)
        return cls(params, list(names), np.asarray(lengths, dtype=np.int64), flat, offsets)

    @classmethod
    def concat(cls, parts: Sequence[Sketches]) -> Sketches:
        """One set of the sketches of `parts`, in order (all of the same parameters)."""
        if not parts:
            raise ValueError("no sketches to join")
        params = parts[0].params
        if any(p.params != params for p in parts):
            raise ValueError("sketches of different parameters cannot be joined")
        sizes = np.concatenate([p.sizes for p in parts])
        offsets = np.zeros(len(sizes) + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return cls(
            params,
            [n for p in parts for n in p.names],
            np.concatenate([p.lengths for p in parts]),
            np.concatenate([p.hashes for p in parts]),
            offsets,
        )

    def to_bytes(self) -> bytes:
        """The sketches as one ``.npz`` file's bytes (`from_bytes` reads them)."""
        out = io.BytesIO()
        names = np.array(self.names, dtype=object).astype(str) if self.names else np.zeros(0, dtype="<U1")
        np.savez(
            out,
            params=np.array([self.params.ksize, self.params.scaled], dtype=np.int64),
            names=names,
            lengths=self.lengths,
            hashes=self.hashes,
            offsets=self.offsets,
        )
        return out.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> Sketches:
        """Sketches from `to_bytes` output; a file of another shape is a `BadInputError` naming `where`."""
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                ksize, scaled = (int(x) for x in z["params"])
                sketches = cls(
                    SketchParams(ksize, scaled), z["names"].tolist(), z["lengths"], z["hashes"], z["offsets"]
                )
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as exc:  # a cut or damaged .npz
            raise BadInputError(f"{where} is not a sketch file ({exc})") from exc
        if len(sketches.offsets) != len(sketches) + 1 or sketches.offsets[-1] != len(sketches.hashes):
            raise BadInputError(f"{where} is damaged: its offsets do not cover its hashes")
        return sketches
