"""The shard tar reader against tars written by Python's tarfile in every dialect it writes; the
record index against the shards it describes; atomic writes (`atomic_write`, `atomic_path`) and
every writer that uses them, against real `kill -9`s."""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import shutil
import stat
import subprocess
import sys
import tarfile
import zlib
from pathlib import Path

import pytest
from conftest import KLEBSIELLA, LAMBDA, as_format_version_3

from bionemo_wds.compat.pickles import pickles_to_tars
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import (
    FORMAT_VERSION,
    READABLE_VERSIONS,
    RecordIndex,
    RecordIndexBuilder,
    TarStreamError,
    decode_record,
    encode_record,
    file_sha256,
    index_of,
    index_shard,
    iter_member_spans,
    iter_members,
    read_manifest,
    shard_indexes,
    write_shard,
)
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.sources.fasta import catalog_fasta
from bionemo_wds.storage import atomic
from bionemo_wds.storage.atomic import atomic_path, atomic_write, remove_stale_temporaries
from bionemo_wds.storage.store import Store


def make_tar(members: list[tuple[str, bytes]], fmt: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


LONG = "d/" + "x" * 150 + ".msgpack"


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_reads_every_dialect(fmt):
    members = [("a.msgpack", b"1" * 700), ("b.msgpack", b""), ("c.msgpack", bytes(range(256)) * 4)]
    if fmt != tarfile.USTAR_FORMAT:
        members.append((LONG, b"long name"))
    assert list(iter_members(io.BytesIO(make_tar(members, fmt)))) == members


@pytest.mark.parametrize("fmt", [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
def test_member_offsets_are_where_tarfile_puts_the_data(fmt):
    """`iter_member_spans` offsets, against tarfile's own `offset_data`, long-name headers included."""
    members = [("a.msgpack", b"1" * 700), ("b.msgpack", b""), ("c.msgpack", bytes(range(256)) * 4)]
    if fmt != tarfile.USTAR_FORMAT:
        members.insert(1, (LONG, b"long name"))
    data = make_tar(members, fmt)
    spans = list(iter_member_spans(io.BytesIO(data)))
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert [(i.name, i.offset_data) for i in tar.getmembers()] == [(n, off) for n, off, _ in spans]
    for name, offset, payload in spans:
        assert data[offset : offset + len(payload)] == payload == dict(members)[name]


def test_truncation_and_corruption_are_named():
    data = make_tar([("a.msgpack", b"1" * 700), ("b.msgpack", b"2" * 700)], tarfile.USTAR_FORMAT)
    # layout: header a | 700 bytes of a, padded to 1024 | header b | b, padded | end blocks
    with pytest.raises(TarStreamError, match="in a header"):
        list(iter_members(io.BytesIO(data[: 512 * 3 + 100])))
    with pytest.raises(TarStreamError, match=r"member b\.msgpack"):
        list(iter_members(io.BytesIO(data[: 512 * 4 + 100])))
    with pytest.raises(TarStreamError, match="no end-of-archive marker"):
        list(iter_members(io.BytesIO(data[: 512 * 6])))
    bad = bytearray(data)
    bad[512 * 3 + 10] ^= 0xFF  # inside the second header's name
    with pytest.raises(TarStreamError, match="checksum"):
        list(iter_members(io.BytesIO(bytes(bad))))


# --- atomic writes: every writer of the package goes through `atomic_write` / `atomic_path` -------

REPO = Path(__file__).resolve().parents[1]


def hidden_temporaries(directory: Path) -> list[Path]:
    return sorted(directory.rglob(".*.tmp-*"))


def start_and_wait_for(code: str, *args: str) -> subprocess.Popen:
    """Run `code` in a child Python; returns once the child prints its first line (it then sleeps)."""
    child = subprocess.Popen([sys.executable, "-c", code, *args], cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    line = child.stdout.readline()
    if not line.strip():
        child.kill()
        child.wait()
        raise AssertionError("the child died before it got to the point where it is to be killed")
    return child


def kill_9(child: subprocess.Popen) -> None:
    child.kill()  # SIGKILL: no finally blocks, no cleanup of any kind in the child
    assert child.wait(timeout=30) == -9
    if child.stdout is not None:
        child.stdout.close()


def test_atomic_write_body_raises_keeps_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "data.bin"
    target.write_bytes(b"old contents")
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_write(target) as fh:
            fh.write(b"new contents, half written")
            raise RuntimeError("boom")
    assert target.read_bytes() == b"old contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin"]
    # and with no old file: nothing at all appears
    with pytest.raises(RuntimeError):
        with atomic_write(tmp_path / "new.bin", "w") as fh:
            fh.write("partial")
            raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin"]


def test_atomic_path_publishes_what_the_body_wrote_and_nothing_on_failure(tmp_path):
    target = tmp_path / "index.fai"
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp_path and tmp.name.startswith(".") and not tmp.exists()
        with open(tmp, "w") as fh:  # a writer that opens the file itself
            fh.write("chr1\t10\t6\t10\t11\n")
    assert target.read_text() == "chr1\t10\t6\t10\t11\n"
    with pytest.raises(RuntimeError):
        with atomic_path(target) as tmp:
            tmp.write_text("half")
            raise RuntimeError("killed indexer")
    with pytest.raises(FileNotFoundError):  # a body that wrote nothing publishes nothing
        with atomic_path(tmp_path / "never.fai"):
            pass
    assert target.read_text() == "chr1\t10\t6\t10\t11\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index.fai"]


def test_atomic_write_fsyncs_the_file_then_the_directory(tmp_path, monkeypatch):
    """A spy on os.fsync (it records what each fd is, then calls the real fsync)."""
    real_fsync = os.fsync
    synced: list[tuple[str, int]] = []

    def spy(fd: int) -> None:
        st = os.fstat(fd)
        synced.append(("dir" if stat.S_ISDIR(st.st_mode) else "file", st.st_ino))
        real_fsync(fd)

    monkeypatch.setattr(atomic.os, "fsync", spy)
    target = tmp_path / "shard.tar"
    with atomic_write(target) as fh:
        fh.write(b"x" * 1000)
    assert synced == [("file", target.stat().st_ino), ("dir", tmp_path.stat().st_ino)]
    synced.clear()
    with atomic_path(tmp_path / "x.fai") as tmp:
        tmp.write_text("x\t1\t3\t1\t2\n")
    assert synced == [("file", (tmp_path / "x.fai").stat().st_ino), ("dir", tmp_path.stat().st_ino)]


SLOW_ATOMIC_WRITER = """
import sys, time
from bionemo_wds.storage.atomic import atomic_write
with atomic_write(sys.argv[1]) as a, atomic_write(sys.argv[2]) as b:
    a.write(b"new " * 10000); b.write(b"new " * 10000)
    a.flush(); b.flush()
    print("writing", flush=True)
    time.sleep(120)
"""


def test_kill_9_during_atomic_write_leaves_no_partial_file(tmp_path):
    absent, present = tmp_path / "absent.bin", tmp_path / "present.bin"
    present.write_bytes(b"old contents")
    child = start_and_wait_for(SLOW_ATOMIC_WRITER, str(absent), str(present))
    try:
        # the child is inside the `with`, its data in the hidden temporaries
        assert {p.name for p in hidden_temporaries(tmp_path)} == {
            f".absent.bin.tmp-{child.pid}",
            f".present.bin.tmp-{child.pid}",
        }
    finally:
        kill_9(child)
    assert not absent.exists()
    assert present.read_bytes() == b"old contents"
    assert len(hidden_temporaries(tmp_path)) == 2
    assert remove_stale_temporaries(tmp_path) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["present.bin"]


# The gzip decompression (a stream copy) or the writing of the index writes a bit and then hangs,
# to be killed there.
SLOW_CATALOG = """
import sys, time
from pathlib import Path
from bionemo_wds.prepare.sources import fasta, fasta_copies, fasta_index
real_gunzip = fasta_copies.gunzip
def hang(chunks, *args):
    for chunk in real_gunzip(chunks, *args):
        yield chunk[:100]
        print("copying", flush=True)
        time.sleep(120)
def hang_writing_index(table, path):
    Path(path).write_text(table.names[0] + "\\t")
    print("indexing", flush=True)
    time.sleep(120)
fasta_copies.gunzip = hang
fasta_index.write_fai = hang_writing_index
fasta.catalog_fasta([sys.argv[1]], Path(sys.argv[2]), progress=False)
"""

FASTA = b">one first\n" + b"ACGTACGTAC\n" * 50 + b"ACG\n>two\n" + b"GGGGCCCCAA\n" * 30 + b">three\nTTTT\n"


@pytest.mark.parametrize("compressed", [False, True], ids=["plain-killed-writing-fai", "gzip-killed-decompressing"])
def test_kill_9_while_cataloguing_leaves_nothing_a_later_run_trusts(tmp_path, compressed):
    source = tmp_path / ("in.fa.gz" if compressed else "in.fa")
    source.write_bytes(gzip.compress(FASTA) if compressed else FASTA)
    cache = tmp_path / ".cache"  # as prepare names it, inside the output directory
    child = start_and_wait_for(SLOW_CATALOG, str(source), str(cache))
    kill_9(child)
    # only a hidden temporary, never a half-written file under a name a later run looks for
    assert [p.name for p in cache.iterdir()] == [
        f".0000-in.fa.tmp-{child.pid}" if compressed else f".0000-in.fa.fai.tmp-{child.pid}"
    ]
    assert remove_stale_temporaries(tmp_path) == 1  # as prepare calls it on the output directory

    again = catalog_fasta([source], cache, progress=False)
    clean = catalog_fasta([source], tmp_path / "clean-cache", progress=False)
    assert again.names == clean.names == ["one", "two", "three"]
    assert again.lengths.tolist() == clean.lengths.tolist() == [503, 300, 4]
    assert again.source.offsets.tolist() == clean.source.offsets.tolist()
    fai = cache / ("0000-0000-in.fa.fai" if compressed else "0000-in.fa.fai")  # index of the cached copy
    assert fai.read_bytes() == (tmp_path / "clean-cache" / fai.name).read_bytes()
    assert len(fai.read_text().splitlines()) == 3
    assert hidden_temporaries(cache) == []


def test_fai_is_reused_when_fresh_rebuilt_when_stale_and_never_published_when_bad(tmp_path, monkeypatch):
    from bionemo_wds.prepare.sources import fasta_index

    source = tmp_path / "in.fa"
    source.write_bytes(FASTA)
    cache = tmp_path / "cache"
    builds = []
    real_write = fasta_index.write_fai
    monkeypatch.setattr(fasta_index, "write_fai", lambda table, path: (builds.append(path), real_write(table, path)))
    first = catalog_fasta([source], cache, progress=False)
    assert len(builds) == 1 and Path(builds[0]).name.startswith(".0000-in.fa.fai.tmp-")  # written to the temporary
    second = catalog_fasta([source], cache, progress=False)
    assert len(builds) == 1  # the published index is whole: read, not rebuilt
    assert second.source.offsets.tolist() == first.source.offsets.tolist()
    source.write_bytes(FASTA.replace(b">three\n", b"GG\n>three\n"))  # the input changes
    os.utime(cache / "0000-in.fa.fai", ns=(0, 0))  # and the index is now older than it
    third = catalog_fasta([source], cache, progress=False)
    assert len(builds) == 2
    assert third.lengths.tolist() == [503, 302, 4]

    duplicate = tmp_path / "dup.fa"
    duplicate.write_bytes(b">a\nACGT\n>a\nACGT\n")
    bad_cache = tmp_path / "bad-cache"
    with pytest.raises(BadInputError, match="unique"):
        catalog_fasta([duplicate], bad_cache, progress=False)
    assert list(bad_cache.iterdir()) == []  # a bad input's index is never written


def test_a_full_disk_while_writing_the_index_is_one_message_and_leaves_no_index(tmp_path, monkeypatch):
    import errno

    from bionemo_wds.prepare.sources import fasta_index

    def full(table, path):
        Path(path).write_text("one\t5")  # part of it, then the disk is full
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(fasta_index, "write_fai", full)  # a real full disk cannot be made here without root mounts
    source = tmp_path / "in.fa"
    source.write_bytes(FASTA)
    cache = tmp_path / "cache"
    with pytest.raises(BadInputError, match=r"no space left on device writing .*0000-in\.fa\.fai \(the index of input"):
        catalog_fasta([source], cache, progress=False)
    assert list(cache.iterdir()) == []  # the temporary is gone, no index under the final name


SLOW_PICKLES_TO_TARS = """
import sys, time
from bionemo_wds.compat.pickles import pickles_to_tars
def slow(key, data):
    if key == "s-012":  # the first sample of the second shard (12 samples per shard)
        print("writing shard 1", flush=True)
        time.sleep(120)
    return {"__key__": key, **data}
pickles_to_tars(sys.argv[1], [f"s.{i:03d}" for i in range(25)], ["a.pyd", "b.pyd"], sys.argv[2], "pfx",
                func_output_data=slow, min_num_shards=2)
"""


@pytest.mark.slow
def test_pickles_to_tars_after_a_killed_run(tmp_path):
    src = tmp_path / "pickles"
    src.mkdir()
    names = [f"s.{i:03d}" for i in range(25)]
    for i, name in enumerate(names):
        (src / f"{name}.a.pyd").write_bytes(pickle.dumps(list(range(i))))
        (src / f"{name}.b.pyd").write_bytes(pickle.dumps({"i": i}))
    clean = tmp_path / "clean"
    expected = pickles_to_tars(str(src), names, ["a.pyd", "b.pyd"], str(clean), "pfx", min_num_shards=2)
    assert [Path(p).name for p in expected] == ["pfx-000000.tar", "pfx-000001.tar", "pfx-000002.tar"]

    out = tmp_path / "out"
    out.mkdir()
    foreign = out / ".someone-elses.txt.tmp-1"  # not a temporary of ours: left alone
    foreign.write_text("keep")
    child = start_and_wait_for(SLOW_PICKLES_TO_TARS, str(src), str(out))
    kill_9(child)
    # shard 0 is whole and visible; shard 1 exists only as a hidden temporary
    assert sorted(p.name for p in out.glob("*.tar")) == ["pfx-000000.tar"]
    assert (out / "pfx-000000.tar").read_bytes() == (clean / "pfx-000000.tar").read_bytes()
    assert [p.name for p in hidden_temporaries(out)] == [f".pfx-000001.tar.tmp-{child.pid}", foreign.name]

    pickles_to_tars(str(src), names, ["a.pyd", "b.pyd"], str(out), "pfx", min_num_shards=2)
    assert hidden_temporaries(out) == [foreign]
    assert sorted(p.name for p in out.glob("*.tar")) == ["pfx-000000.tar", "pfx-000001.tar", "pfx-000002.tar"]
    for name in ("pfx-000000.tar", "pfx-000001.tar", "pfx-000002.tar"):
        assert (out / name).read_bytes() == (clean / name).read_bytes()
        with open(out / name, "rb") as fh:
            assert len(list(iter_members(fh))) == {"pfx-000002.tar": 2}.get(name, 24)


def test_inconsistent_record_is_a_decode_error():
    good = encode_record([b"ACGT", b"GGC"], ["a", "b"], [0, 0], [0, 0], ["", ""])
    assert len(decode_record(good)) == 2
    import msgpack

    obj = msgpack.unpackb(good)
    obj["lengths"] = [4, 9]
    with pytest.raises(ValueError, match="add up to 13 bases but it holds 7"):
        decode_record(msgpack.packb(obj, use_bin_type=True))
    obj["lengths"] = [4, 3]
    obj["start"] = [0]
    with pytest.raises(ValueError, match="columns"):
        decode_record(msgpack.packb(obj, use_bin_type=True))


# --- the record index ------------------------------------------------------------------------------


def record_layout(path: Path) -> tuple[list[str], RecordIndex]:
    """Keys and the index of a shard as read back with our reader, independently of the manifest."""
    keys, index = [], RecordIndexBuilder()
    with open(path, "rb") as fh:
        for name, offset, data in iter_member_spans(fh):
            keys.append(name.partition(".")[0])
            index.append(offset, data, len(decode_record(data)))
    return keys, index.build()


@pytest.fixture(scope="module")
def genomes(tmp_path_factory) -> dict[str, Path]:
    """Both bundled genomes prepared with records of several windows, and Klebsiella with one window
    per record (a member per window) and with zstd records."""
    base = tmp_path_factory.mktemp("index")
    runs = {
        "lambda": (
            [LAMBDA],
            dict(seq_length=1024, stride=1000, samples_per_shard=20, windows_per_record=3, split=(1, 0, 0)),
        ),
        "klebsiella": ([KLEBSIELLA], dict(samples_per_shard=100)),
        "klebsiella-1": ([KLEBSIELLA], dict(seq_length=2048, stride=1900, samples_per_shard=150, windows_per_record=1)),
        "klebsiella-zstd": ([KLEBSIELLA], dict(samples_per_shard=100, compress="zstd")),
    }
    out = {}
    for name, (inputs, opts) in runs.items():
        out[name] = base / name
        prepare(inputs, out[name], PrepareOptions(**opts, workers=2, progress=False))
    return out


@pytest.mark.slow
@pytest.mark.parametrize("version", [6, 3])
@pytest.mark.parametrize("name", ["lambda", "klebsiella", "klebsiella-1", "klebsiella-zstd"])
def test_record_index_agrees_with_the_shards(genomes, name, version, tmp_path):
    """Offsets, sizes, windows and crc32 in the record index (version 4 on: the split's index file;
    version 3: the manifest's columns) are what our reader and tarfile find, and a positioned read
    at an indexed offset returns exactly the record."""
    root = genomes[name]
    if version == 3:
        shutil.copytree(root, tmp_path / "v3")
        root = tmp_path / "v3"
        as_format_version_3(root)
    manifest = read_manifest(root)
    assert manifest.format_version == version and FORMAT_VERSION == 6
    n_records = 0
    for split, info in manifest.splits.items():
        indexes = shard_indexes(Store(root), manifest, split)
        assert indexes is not None and len(indexes) == len(info.shards)
        for shard, index in zip(info.shards, indexes):
            path = root / shard.path
            assert index is not None
            if version == 3:
                assert index == index_of(shard.to_json())
            else:
                assert shard.records is None and shard.n_records == len(index)
            keys, found = record_layout(path)
            assert found == index
            assert sum(index.windows) == shard.n_samples
            assert index_shard(path) == (shard.bytes, shard.sha256, index)
            shard_no = int(path.stem.rsplit("-", 1)[1])
            assert keys == [f"{shard_no:06d}-{n:06d}" for n in range(len(index))]
            with tarfile.open(path) as tar:
                infos = tar.getmembers()
                assert [(i.offset_data, i.size) for i in infos] == list(zip(index.offset, index.size))
            fd = os.open(path, os.O_RDONLY)
            try:
                for n in range(len(index)):
                    data = os.pread(fd, int(index.size[n]), int(index.offset[n]))
                    assert zlib.crc32(data) == index.crc32[n]
                    assert len(decode_record(data)) == index.windows[n]
            finally:
                os.close(fd)
            n_records += len(index)
    assert n_records > 10


def test_a_version_3_manifest_lists_the_index_columns_on_one_line_each(genomes, tmp_path):
    root = tmp_path / "v3"
    shutil.copytree(genomes["klebsiella"], root)
    as_format_version_3(root)  # written by `dumps_manifest`, as version 3 wrote it
    text = (root / "manifest.json").read_text()
    columns = [line.strip() for line in text.splitlines() if line.strip().startswith(('"offset"', '"crc32"'))]
    assert columns and all(line.endswith(("],", "]")) for line in columns)
    assert json.loads(text) == read_manifest(root).to_json()
    v4 = (genomes["klebsiella"] / "manifest.json").read_text()  # version 4: no columns in the manifest
    assert '"offset"' not in v4 and '"records": {' not in v4 and '"n_records"' in v4


def test_write_shard_returns_the_index_of_what_it_wrote(tmp_path):
    records = [(f"k{i}", encode_record([b"ACGT" * (i * 97 + 1)], ["s"], [0], [i], [""]), 1) for i in range(40)]
    written = write_shard(tmp_path / "s.tar", records)
    assert (written.bytes, written.sha256) == file_sha256(tmp_path / "s.tar")
    keys, found = record_layout(tmp_path / "s.tar")
    assert keys == [k for k, _, _ in records] and found == written.records
    assert written.records.crc32.tolist() == [zlib.crc32(data) for _, data, _ in records]


def test_write_shard_refuses_a_name_that_needs_an_extended_header(tmp_path):
    """Such a name would move the data (a PAX header first): refused, and nothing is published."""
    record = encode_record([b"ACGT"], ["s"], [0], [0], [""])
    with pytest.raises(ValueError, match="does not fit a plain USTAR header"):
        write_shard(tmp_path / "s.tar", [("ok", record, 1), ("x" * 100, record, 1)])
    assert not list(tmp_path.iterdir())


def test_old_versions_stay_readable_without_an_index():
    assert set(READABLE_VERSIONS) == {1, 2, 3, 4, 5, 6}
    assert index_of({"path": "train/wdshards-000000.tar", "n_samples": 1}) is None
    with pytest.raises(ValueError, match="malformed"):
        index_of({"records": {"offset": [512], "size": [10]}})
    with pytest.raises(ValueError, match="different lengths"):
        index_of({"records": {"offset": [512], "size": [10], "windows": [1], "crc32": []}})


def test_crc32_is_fast_enough_to_check_every_record():
    """The cost the index docstring quotes: zlib.crc32 of a 128 kB record (16 windows of 8 kb) is
    well under a millisecond (measured ~42 us here); a loose bound, for slow CI machines."""
    import timeit

    data = os.urandom(128 << 10)
    seconds = min(timeit.repeat(lambda: zlib.crc32(data), number=200, repeat=3)) / 200
    assert seconds < 1e-3
