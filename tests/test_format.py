"""The shard tar reader against tars written by Python's tarfile in every dialect it writes."""

from __future__ import annotations

import io
import tarfile

import pytest

from bionemo_wds.format import TarStreamError, iter_members


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


def test_truncation_and_corruption_are_named():
    data = make_tar([("a.msgpack", b"1" * 700), ("b.msgpack", b"2" * 700)], tarfile.USTAR_FORMAT)
    # layout: header a | 700 bytes of a, padded to 1024 | header b | b, padded | end blocks
    with pytest.raises(TarStreamError, match="in a header"):
        list(iter_members(io.BytesIO(data[: 512 * 3 + 100])))
    with pytest.raises(TarStreamError, match="member b.msgpack"):
        list(iter_members(io.BytesIO(data[: 512 * 4 + 100])))
    with pytest.raises(TarStreamError, match="no end-of-archive marker"):
        list(iter_members(io.BytesIO(data[: 512 * 6])))
    bad = bytearray(data)
    bad[512 * 3 + 10] ^= 0xFF  # inside the second header's name
    with pytest.raises(TarStreamError, match="checksum"):
        list(iter_members(io.BytesIO(bytes(bad))))
