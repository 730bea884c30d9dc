"""What the FASTA inputs are: each a `FastaInput`, one FASTA text however it is stored.

FASTA comes as files (plain, gzip or bgzip), directories of them, and as the OpenGenome2 ``fasta/``
tree distributes it:

- **split gzip parts**: ``windows_5kb.fasta.gz.aa``, ``.ab``, ... (``split -b``'s names: a suffix
  of two or more lower-case letters, or of digits with ``split -d``), one gzip stream cut into
  pieces. The parts of one name are one input, read as the parts joined in suffix order; a gap in
  the suffixes (``.aa .ab .ad``) is refused naming the missing part, as is a part beside given
  parts that was not given. The input's name (its provenance) is ``DIR/windows_5kb.fasta.gz.{aa..ag}``.
- **tar archives** (``batch1.tar``, not compressed as a whole) of FASTA files, plain or gzip: each
  member is an input named ``batch1.tar/genome_17.fa`` (the archive as given, then the member's
  path in it). A plain member is read in place (its bytes are contiguous in the archive, at
  `FastaInput.offset`), a gzip one is unpacked into the cache like a gzip file. A member whose name
  is not a FASTA file name (a README) is refused naming archive and member: an archive of FASTA
  holds FASTA only. A compressed archive (``.tar.gz``, ``.tgz``) is refused: it has no member offsets.

`find_fasta_files` lists the files a run reads (for the request's fingerprint); `fasta_inputs` the
inputs they hold, in a stable order: as given, directories expanded recursively in sorted order.
"""

from __future__ import annotations

import os
import re
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from bionemo_wds.errors import OptionError, SourceError

FASTA_SUFFIXES = (".fa", ".fasta", ".fna", ".ffn", ".frn", ".fas", ".seq")
#: Suffixes of gzip inputs (taken off the name of the unpacked copy).
GZIP_SUFFIXES = (".gz", ".bgz")
#: Suffixes of tar archives read member by member, and of compressed ones that cannot be.
TAR_SUFFIXES = (".tar",)
COMPRESSED_TAR_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar.zst")
#: A split part's name: a FASTA name, then ``.`` and `split`'s suffix (letters, or digits with -d).
PART_NAME = re.compile(r"^(?P<stem>.+)\.(?P<suffix>[a-z]{2,}|[0-9]{2,})$")


@dataclass(frozen=True)
class FastaInput:
    """One FASTA text: a file, a split file's parts joined, or a tar member."""

    #: What the run calls it (messages, the manifest, the sequence table's file column).
    origin: str
    #: The files it is read from: the file, the parts in order, or the archive.
    paths: tuple[str, ...]
    #: "file", "parts" or "member".
    kind: str = "file"
    #: A member: its first byte in the archive, and its size.
    offset: int = 0
    size: int = 0

    @property
    def nbytes(self) -> int:
        """Bytes stored (compressed, for gzip), for sizing the index's work."""
        if self.kind == "member":
            return self.size
        return sum(os.path.getsize(p) for p in self.paths)

    @property
    def stem(self) -> str:
        """The file name of the FASTA text, for its copy in the cache (gzip suffixes off)."""
        if self.kind == "parts":  # the first part's name without its split suffix
            return strip_gzip(Path(self.paths[0]).name.rsplit(".", 1)[0])
        return strip_gzip(Path(self.origin).name)


def strip_gzip(name: str) -> str:
    """`name` without a gzip suffix (``x.fa.gz`` -> ``x.fa``)."""
    for gz in GZIP_SUFFIXES:
        if name.lower().endswith(gz):
            return name[: -len(gz)]
    return name


def is_fasta_name(path: Path | str) -> bool:
    """A FASTA file name, optionally gzip (``x.fa``, ``x.fna.gz``)."""
    return strip_gzip(Path(path).name).lower().endswith(FASTA_SUFFIXES)


def part_of(path: Path) -> tuple[str, str] | None:
    """(stem, suffix) of a split part's name (``x.fasta.gz.ab`` -> (``x.fasta.gz``, ``ab``)), else None."""
    if is_fasta_name(path):
        return None
    found = PART_NAME.match(path.name)
    if found is None or not is_fasta_name(found["stem"]):
        return None
    return found["stem"], found["suffix"]


def is_tar_name(path: Path | str) -> bool:
    return str(path).lower().endswith(TAR_SUFFIXES)


def is_fasta_input_name(path: Path) -> bool:
    """Does a file's name make it a FASTA input (a FASTA file, a split part, a tar archive)?"""
    name = path.name.lower()
    return is_fasta_name(path) or part_of(path) is not None or name.endswith(TAR_SUFFIXES + COMPRESSED_TAR_SUFFIXES)


def suffix_number(suffix: str) -> int:
    """The position of a split suffix in `split`'s sequence (``aa`` 0, ``ab`` 1, ``ba`` 26; ``00`` 0)."""
    if suffix.isdigit():
        return int(suffix)
    number = 0
    for char in suffix:
        number = number * 26 + ord(char) - ord("a")
    return number


def suffix_of(number: int, like: str) -> str:
    """The split suffix at position `number`, as long as `like` and of its kind (letters or digits)."""
    if like.isdigit():
        return str(number).zfill(len(like))
    chars = []
    for _ in like:
        number, digit = divmod(number, 26)
        chars.append(chr(ord("a") + digit))
    return "".join(reversed(chars))


def _files_of(inputs: Sequence[str | os.PathLike]) -> list[tuple[Path, bool]]:
    """Every file of `inputs` (directories expanded: the names `is_fasta_input_name` takes), with
    whether it was given by name (True) or found in a directory."""
    found: list[tuple[Path, bool]] = []
    for item in inputs:
        path = Path(item)
        if path.is_dir():
            inside = sorted(p for p in path.rglob("*") if p.is_file() and is_fasta_input_name(p))
            if not inside:
                raise SourceError(
                    f"directory {path} holds no FASTA files ({', '.join(FASTA_SUFFIXES)}, optionally .gz, "
                    "split gzip parts .gz.aa, ... or .tar archives of them)"
                )
            found.extend((p, False) for p in inside)
        elif path.exists():
            if not os.access(path, os.R_OK):
                raise SourceError(f"input {path} is not readable (permission denied)")
            found.append((path, True))
        else:
            raise SourceError(f"input {path} does not exist")
    if not found:
        raise OptionError("no input FASTA given")
    resolved = [p.resolve() for p, _ in found]
    seen: set[Path] = set()
    for p in resolved:
        if p in seen:
            raise OptionError(f"input given more than once: {p}")
        seen.add(p)
    return found


def _check_parts(stem: Path, parts: list[tuple[str, Path]], given: bool) -> None:
    """Refuse a split file whose parts have a gap, start late, or (`given` by name) stop before
    a part that lies beside them."""
    like = parts[0][0]
    if any(len(s) != len(like) or s.isdigit() != like.isdigit() for s, _ in parts):
        raise SourceError(
            f"the parts of {stem} mix suffixes ({', '.join(s for s, _ in parts)}); one split file's parts"
        )
    numbers = [suffix_number(s) for s, _ in parts]
    for expected, number in enumerate(numbers):
        if number != expected:
            missing = Path(f"{stem}.{suffix_of(expected, like)}")
            raise SourceError(
                f"split part {missing} is missing: the parts of {stem} are read as one stream, "
                f"joined in order, and {Path(parts[0][1]).name} ... {Path(parts[-1][1]).name} have a gap"
            )
    after = Path(f"{stem}.{suffix_of(len(numbers), like)}")
    if given and after.exists():
        raise SourceError(
            f"split part {after} lies beside the given parts of {stem} but is not an input: give every part "
            "(or their directory)"
        )


def _tar_members(path: Path) -> list[FastaInput]:
    """The FASTA members of archive `path`, in archive order; anything else in it is refused."""
    if str(path).lower().endswith(COMPRESSED_TAR_SUFFIXES):
        raise SourceError(
            f"input {path} is a compressed tar archive, which has no member offsets to read in place: "
            "unpack its outer compression first (e.g. gunzip it to a .tar); its members may stay gzip"
        )
    members = []
    try:
        with tarfile.open(path, "r:") as archive:
            for info in archive:
                if info.isdir():
                    continue
                where = f"{path}/{info.name}"
                if not info.isreg() or info.issparse():
                    raise SourceError(f"tar member {info.name} of {path} is not a regular file ({where})")
                if not is_fasta_name(info.name):
                    raise SourceError(
                        f"tar member {info.name} of {path} is not FASTA: an archive input holds FASTA files "
                        f"only ({', '.join(FASTA_SUFFIXES)}, optionally .gz)"
                    )
                # offset_data: where tarfile found the member's bytes (contiguous for a regular member)
                members.append(FastaInput(where, (str(path),), "member", info.offset_data, info.size))
    except (tarfile.TarError, EOFError) as exc:
        raise SourceError(f"input {path} is not a readable tar archive: {exc}") from exc
    if not members:
        raise SourceError(f"tar archive {path} holds no FASTA files")
    return members


def fasta_inputs(inputs: Sequence[str | os.PathLike]) -> list[FastaInput]:
    """The FASTA inputs of `inputs` (files, directories, split parts, tar archives), in a stable
    order (a split file where its first part is); bad ones refused with one line naming them."""
    files = _files_of(inputs)
    groups: dict[Path, list[tuple[str, Path]]] = {}
    given: dict[Path, bool] = {}
    order: list[tuple[str, Path]] = []  # ("file" | "tar" | "parts", path or stem), in input order
    for path, named in files:
        part = part_of(path)
        if part is not None:
            stem = path.parent / part[0]
            if stem not in groups:
                groups[stem] = []
                order.append(("parts", stem))
            groups[stem].append((part[1], path))
            given[stem] = given.get(stem, False) or named
        elif is_tar_name(path) or str(path).lower().endswith(COMPRESSED_TAR_SUFFIXES):
            order.append(("tar", path))
        else:
            order.append(("file", path))
    out: list[FastaInput] = []
    for kind, path in order:
        if kind == "file":
            out.append(FastaInput(str(path), (str(path),)))
        elif kind == "tar":
            out.extend(_tar_members(path))
        else:
            parts = sorted(groups[path], key=lambda sp: suffix_number(sp[0]))
            _check_parts(path, parts, given[path])
            first, last = parts[0][0], parts[-1][0]
            origin = f"{path}.{{{first}..{last}}}" if len(parts) > 1 else str(parts[0][1])
            out.append(FastaInput(origin, tuple(str(p) for _, p in parts), "parts"))
    return out


def find_fasta_files(inputs: Sequence[str | os.PathLike]) -> list[Path]:
    """The files a run reads (inputs checked as `fasta_inputs` checks them), in a stable order."""
    return [Path(p) for p in dict.fromkeys(p for unit in fasta_inputs(inputs) for p in unit.paths)]
