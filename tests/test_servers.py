"""Self-test of the stand-in servers in tests/servers.py (not of bionemo_wds): S3 round trips, byte ranges,
request counting, and stop/restart on the same port."""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import servers
from servers import HOST, HTTPServer, S3Server, Traffic, free_port, parse_range

# fixtures by assignment: `from servers import s3_server` would make ruff report F811 at every test using it
s3_server = servers.s3_server
http_server = servers.http_server

DATA = bytes(range(256)) * 4  # 1024 bytes, every offset distinguishable

_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def fetch(url: str, method: str = "GET", range_: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one request, errors included, bypassing any proxy."""
    req = urllib.request.Request(url, method=method, headers={"Range": range_} if range_ else {})
    try:
        with _opener.open(req, timeout=5) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def refused(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.connect((HOST, port))
        except ConnectionRefusedError:
            return True
    return False


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "data.bin").write_bytes(DATA)
    (tmp_path / "empty.bin").write_bytes(b"")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.txt").write_text("a")
    return tmp_path


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind((HOST, port))


def test_parse_range() -> None:
    assert parse_range("bytes=0-9", 100) == (0, 9)
    assert parse_range("bytes=90-", 100) == (90, 99)
    assert parse_range("bytes=90-200", 100) == (90, 99)
    assert parse_range("bytes=-10", 100) == (90, 99)
    assert parse_range("bytes=-500", 100) == (0, 99)
    assert parse_range("bytes=100-", 100) is False
    assert parse_range("bytes=-0", 100) is False
    assert parse_range("bytes=0-", 0) is False
    assert parse_range("bytes=0-1,5-6", 100) is None
    assert parse_range("bytes=5-1", 100) is None
    assert parse_range("items=0-1", 100) is None


def test_taken_port_raises(site: Path) -> None:
    """A port already in use makes start() raise instead of hanging or serving someone else's socket."""
    pytest.importorskip("moto.server")
    with socket.socket() as s:
        s.bind((HOST, 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(OSError):
            S3Server(port).start()
        with pytest.raises(OSError):
            HTTPServer(site, port=port).start()


# ------------------------------------------------------------------------------------------------------------ S3


def test_s3_env_and_round_trip(s3_server: S3Server) -> None:
    import s3fs

    assert s3_server.endpoint == f"http://127.0.0.1:{s3_server.port}"
    for key, value in s3_server.env.items():
        assert os.environ[key] == value
    s3_server.make_bucket("bucket")
    fs = s3fs.S3FileSystem()  # endpoint and credentials come from the environment only
    fs.pipe("bucket/dir/obj.bin", DATA)
    assert fs.cat("bucket/dir/obj.bin") == DATA
    assert fs.cat_file("bucket/dir/obj.bin", start=10, end=20) == DATA[10:20]
    assert fs.ls("bucket/dir") == ["bucket/dir/obj.bin"]
    methods = {(m, p.split("?")[0]) for m, p, _ in s3_server.requests}
    assert ("PUT", "/bucket") in methods and ("PUT", "/bucket/dir/obj.bin") in methods
    assert ("GET", "/bucket/dir/obj.bin", "bytes=10-19") in s3_server.requests


@pytest.mark.parametrize("round_", [1, 2])
def test_s3_starts_empty(s3_server: S3Server, round_: int) -> None:
    """moto's state is process-global; the fixture resets it, so each test sees no buckets."""
    client = s3_server.client()
    assert client.list_buckets()["Buckets"] == []
    s3_server.make_bucket("leftover")


def test_s3_stop_restart_keeps_data(s3_server: S3Server) -> None:
    import s3fs

    s3_server.make_bucket("bucket")
    fs = s3fs.S3FileSystem()
    fs.pipe("bucket/obj", b"kept")
    port = s3_server.port
    s3_server.stop()
    assert not s3_server.running and refused(port)
    s3_server.restart()
    assert s3_server.port == port and not refused(port)
    s3fs.S3FileSystem.clear_instance_cache()
    assert s3fs.S3FileSystem().cat("bucket/obj") == b"kept"
    assert fs.cat("bucket/obj") == b"kept"  # the old client's pooled connection was cut; it reconnects


# ---------------------------------------------------------------------------------------------------------- HTTP


def test_http_ranges(http_server, site: Path) -> None:
    srv = http_server(site)
    url = f"{srv.url}/data.bin"
    assert srv.url == f"http://127.0.0.1:{srv.port}"

    status, headers, body = fetch(url)
    assert (status, body, headers["Accept-Ranges"]) == (200, DATA, "bytes")

    status, headers, body = fetch(url, range_="bytes=10-19")
    assert (status, body) == (206, DATA[10:20])
    assert headers["Content-Range"] == "bytes 10-19/1024" and headers["Content-Length"] == "10"

    status, headers, body = fetch(url, range_="bytes=1000-")
    assert (status, body, headers["Content-Range"]) == (206, DATA[1000:], "bytes 1000-1023/1024")

    status, _, body = fetch(url, range_="bytes=-4")
    assert (status, body) == (206, DATA[-4:])

    status, headers, body = fetch(url, range_="bytes=1024-")
    assert (status, body, headers["Content-Range"]) == (416, b"", "bytes */1024")
    assert fetch(f"{srv.url}/empty.bin", range_="bytes=0-")[0] == 416

    assert fetch(url, range_="bytes=0-1,4-5")[:3:2] == (200, DATA)  # multiple ranges: ignored, full body

    status, headers, body = fetch(url, method="HEAD", range_="bytes=0-99")
    assert (status, body, headers["Content-Length"]) == (206, b"", "100")

    assert fetch(f"{srv.url}/missing.bin")[0] == 404
    status, _, body = fetch(f"{srv.url}/sub/")
    assert status == 200 and b"a.txt" in body

    assert srv.requests[1] == ("GET", "/data.bin", "bytes=10-19")
    assert srv.requests[-1] == ("GET", "/sub/", None)
    assert len(srv.requests) == 10


def test_http_without_ranges_ignores_range(http_server, site: Path) -> None:
    srv = http_server(site, ranges=False)
    status, headers, body = fetch(f"{srv.url}/data.bin", range_="bytes=10-19")
    assert (status, body) == (200, DATA) and "Accept-Ranges" not in headers
    assert srv.requests == [("GET", "/data.bin", "bytes=10-19")]


def test_http_fsspec_byte_range(http_server, site: Path) -> None:
    """fsspec's aiohttp-based HTTP filesystem gets its byte range as a 206."""
    fsspec = pytest.importorskip("fsspec")
    pytest.importorskip("aiohttp")
    srv = http_server(site)
    fs = fsspec.filesystem("http", skip_instance_cache=True)
    assert fs.cat_file(f"{srv.url}/data.bin", start=100, end=200) == DATA[100:200]
    assert ("GET", "/data.bin", "bytes=100-199") in srv.requests


def test_http_stop_restart(http_server, site: Path) -> None:
    srv = http_server(site)
    port = srv.port
    assert fetch(f"{srv.url}/sub/a.txt")[2] == b"a"
    srv.stop()
    assert not srv.running and refused(port)
    srv.restart()
    assert srv.port == port and fetch(f"{srv.url}/sub/a.txt")[2] == b"a"
    assert len(srv.requests) == 2


def test_http_throttling_answers_every_nth_request_with_slow_down(http_server, site: Path) -> None:
    traffic = Traffic(every=3)
    srv = http_server(site, traffic=traffic)
    answers = [fetch(f"{srv.url}/data.bin", range_="bytes=0-9") for _ in range(6)]
    assert [status for status, _, _ in answers] == [206, 206, 503, 206, 206, 503]
    assert b"<Code>SlowDown</Code>" in answers[2][2] and answers[2][1]["Retry-After"] == "1"
    assert answers[0][2] == DATA[:10]
    assert traffic.summary()["requests"] == 6 and traffic.throttled == 2 and traffic.peak == 1
    assert traffic.in_flight == 0


def test_http_throttling_above_a_number_in_flight_and_the_busiest_window(http_server, site: Path) -> None:
    """Requests held 1 s each by a server that takes 2 at once: of 4 sent together, 2 are refused; the
    arrivals of any 1 s window were all in flight together."""
    import threading

    traffic = Traffic(max_concurrent=2, delay=1.0)
    srv = http_server(site, traffic=traffic)
    statuses: list[int] = []
    threads = [threading.Thread(target=lambda: statuses.append(fetch(f"{srv.url}/data.bin")[0])) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses) == [200, 200, 503, 503] and traffic.peak == 4
    assert traffic.busiest() == 4 and traffic.busiest(0.0) == 1
