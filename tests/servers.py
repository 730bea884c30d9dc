"""Local stand-in servers for storage tests: an S3 endpoint (moto) and a static HTTP file server.

Both listen on 127.0.0.1 only, on a free port, in daemon threads of the test process, so a test can stop and
restart them to simulate an outage. Bind the fixtures you need in a test module (or a conftest)::

    import servers
    from servers import HTTPServer, S3Server

    s3_server = servers.s3_server  # an assignment, not `from servers import s3_server`, which ruff flags
    http_server = servers.http_server  # as F811 at every test taking the fixture as a parameter

moto, boto3 and s3fs are imported lazily, so the HTTP helpers work without them.
"""

from __future__ import annotations

import functools
import http.server
import os
import re
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

import pytest

from benchmarks.remote import AWS_CONFLICTS

HOST = "127.0.0.1"
_POLL = 0.05  # seconds between serve_forever() checks for shutdown(); the default 0.5 s slows every stop()
Request = tuple[str, str, str | None]  # (method, raw path with query, Range header or None)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it; not reserved)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class _Connections:
    """Tracks a socketserver's accepted sockets, so stop() can cut keep-alive connections too.

    Without this, a client's pooled connection keeps being answered by a handler thread after shutdown(),
    and a "stopped" server would not look stopped to that client.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._socks: set[socket.socket] = set()

    def attach(self, server: Any) -> None:
        """Wrap a socketserver's get_request/shutdown_request (as instance attributes, looked up per call)."""
        get_request, shutdown_request = server.get_request, server.shutdown_request

        def tracked_get_request() -> tuple[socket.socket, Any]:
            sock, addr = get_request()
            with self._lock:
                self._socks.add(sock)
            return sock, addr

        def tracked_shutdown_request(sock: Any) -> None:
            with self._lock:
                self._socks.discard(sock)
            shutdown_request(sock)

        server.get_request = tracked_get_request
        server.shutdown_request = tracked_shutdown_request

    def close_all(self) -> None:
        """Shut down every open connection; the handler threads then see EOF and end."""
        with self._lock:
            socks, self._socks = list(self._socks), set()
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _RequestLog:
    """A list of (method, path, Range header) appended under a lock, for request counting."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[Request] = []

    def add(self, method: str, path: str, range_header: str | None) -> None:
        with self.lock:
            self.requests.append((method, path, range_header))


# ---------------------------------------------------------------------------------------------------- S3 (moto)


@functools.cache
def _moto_server_class() -> type:
    """ThreadedMotoServer whose thread reports a failed bind to start() (instead of leaving it waiting forever),
    counts requests, tracks connections and polls for shutdown every 50 ms (not 0.5 s)."""
    from moto.moto_server.threaded_moto_server import ThreadedMotoServer
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
    from werkzeug.serving import make_server

    class _MotoServer(ThreadedMotoServer):
        error: BaseException | None = None
        log: _RequestLog
        conns: _Connections

        def _server_entry(self) -> None:  # as moto's, plus the four additions above
            app = DomainDispatcherApplication(create_backend_app)
            log = self.log

            def counting_app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
                path = environ.get("RAW_URI") or environ.get("PATH_INFO", "")
                log.add(environ["REQUEST_METHOD"], path, environ.get("HTTP_RANGE"))
                return app(environ, start_response)

            try:
                self._server = make_server(
                    self._ip_address, self._port, counting_app, True, request_handler=MotoRequestHandler
                )
            except (Exception, SystemExit) as e:  # werkzeug prints and sys.exit()s when the port is taken
                self.error = e
                self._server_ready_event.set()
                return
            self.conns.attach(self._server)
            self._server_ready_event.set()
            self._server.serve_forever(poll_interval=_POLL)

    return _MotoServer


class S3Server:
    """moto's S3 (all of moto, in fact) on 127.0.0.1:port, restartable on the same port.

    moto's backends are process-global, so objects survive stop()/restart(); reset() empties them.
    Requests are counted in `.requests` as (method, raw path, Range header or None), via a WSGI wrapper.
    """

    def __init__(self, port: int | None = None) -> None:
        self.port = port if port is not None else free_port()
        self._log = _RequestLog()
        self._conns = _Connections()
        self._moto: Any = None

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """Environment that points boto3/s3fs at this server with moto's dummy credentials."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
        }

    @property
    def requests(self) -> list[Request]:
        """Requests served so far (kept across restarts; clear() it to start counting afresh)."""
        return self._log.requests

    @property
    def running(self) -> bool:
        return self._moto is not None

    def start(self) -> None:
        """Start listening; raises OSError if the port is taken."""
        if self._moto is not None:
            raise RuntimeError(f"S3Server on port {self.port} is already running")
        moto = _moto_server_class()(ip_address=HOST, port=self.port, verbose=False)
        moto.log, moto.conns = self._log, self._conns
        moto.start()
        if moto.error is not None:
            raise OSError(f"S3Server cannot listen on {self.endpoint}") from moto.error
        self._moto = moto

    def stop(self) -> None:
        """Stop serving and close the listening socket and open connections: the port then refuses."""
        moto, self._moto = self._moto, None
        if moto is None:
            return
        moto.stop()  # shutdown() + join; moto leaves the socket open, so close it here
        self._conns.close_all()
        moto._server.server_close()  # moto exposes no public handle for its werkzeug server

    def restart(self) -> None:
        """stop() then start() on the same port; stored buckets and objects are kept."""
        self.stop()
        self.start()

    def reset(self) -> None:
        """Empty all moto backends (process-wide), with the call moto's POST /moto-api/reset makes.

        Called directly (the server runs in this process), not over HTTP: once, in CI, that request
        timed out behind a slow handler and ran later, wiping the bucket the next test had just made."""
        from moto.moto_api._internal.models import moto_api_backend

        moto_api_backend.reset()

    def client(self) -> Any:
        """A boto3 S3 client for this server, configured explicitly (independent of the environment)."""
        import boto3

        env = self.env
        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
            region_name=env["AWS_DEFAULT_REGION"],
        )

    def make_bucket(self, name: str) -> None:
        """Create a bucket (us-east-1, so no LocationConstraint)."""
        self.client().create_bucket(Bucket=name)


def _clear_s3fs_cache() -> None:
    """Drop cached S3FileSystem instances, whose clients may hold an old endpoint or a dead event loop."""
    try:
        import s3fs
    except ImportError:
        return
    s3fs.S3FileSystem.clear_instance_cache()


# variables that would override or disturb the endpoint/credentials set by the s3_server fixture: the
# same list the benchmark clears for its moto endpoint
_AWS_CONFLICTS = AWS_CONFLICTS


@pytest.fixture
def s3_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    """A started, empty S3Server with its env vars set for this test; stopped afterwards."""
    pytest.importorskip("moto.server")
    pytest.importorskip("boto3")
    for name in _AWS_CONFLICTS:
        monkeypatch.delenv(name, raising=False)
    server = S3Server()
    server.start()
    try:
        server.reset()  # moto state is process-global: start each test empty
        server.requests.clear()
        for key, value in server.env.items():
            monkeypatch.setenv(key, value)
        _clear_s3fs_cache()
        yield server
    finally:
        _clear_s3fs_cache()
        server.stop()  # the data stays in moto's global backends until the next s3_server resets them


# ---------------------------------------------------------------------------------------------------- HTTP

_RANGE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)


def parse_range(header: str, size: int) -> tuple[int, int] | bool | None:
    """Resolve a single `bytes=` range against `size`: (first, last) inclusive, None if the header is to be
    ignored (multiple ranges, other units, malformed: RFC 9110 lets a server answer 200), False if unsatisfiable.
    """
    m = _RANGE.match(header)
    if m is None:
        return None
    first, last = m.group(1), m.group(2)
    if first == "" and last == "":
        return None
    if first == "":  # suffix range: the last N bytes
        n = int(last)
        return (max(0, size - n), size - 1) if n > 0 and size > 0 else False
    start = int(first)
    if last != "" and int(last) < start:
        return None
    if start >= size:
        return False
    return start, min(int(last), size - 1) if last != "" else size - 1


class _Slice:
    """Reads at most `length` bytes of an open file, from its current position (what copyfile() needs)."""

    def __init__(self, f: BinaryIO, length: int) -> None:
        self._f, self._left = f, length

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._f.read(n)
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._f.close()


class Traffic:
    """A server that throttles, and what it saw: every request is held `delay` seconds, then answered
    503 ``SlowDown`` when it is the `every`-th (counted over all requests) or when more than
    `max_concurrent` are in flight; otherwise served.

    `in_flight` counts a request from its arrival until its answer starts, a span inside the one a
    client holds a request slot for (from before it sends to after it reads the answer), so `peak`
    never exceeds the client's bound on requests in flight. Since each request is in flight at
    least `delay` seconds, the arrivals in any window of `delay` seconds (`busiest`) were all in
    flight together at its end: at most `peak`, which bounds the request rate at ``peak / delay``.
    """

    def __init__(self, every: int = 0, max_concurrent: int | None = None, delay: float = 0.0) -> None:
        self.every, self.max_concurrent, self.delay = every, max_concurrent, delay
        self.lock = threading.Lock()
        self.requests = self.throttled = self.in_flight = self.peak = 0
        self.arrivals: list[float] = []  # time.monotonic() of each request's arrival

    def arrive(self) -> bool:
        """A request arrived: count it; should it be answered 503 SlowDown?"""
        with self.lock:
            self.requests += 1
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self.arrivals.append(time.monotonic())
            slow_down = (self.every > 0 and self.requests % self.every == 0) or (
                self.max_concurrent is not None and self.in_flight > self.max_concurrent
            )
            self.throttled += slow_down
            return slow_down

    def leave(self) -> None:
        """The request's answer starts."""
        with self.lock:
            self.in_flight -= 1

    def busiest(self, seconds: float | None = None) -> int:
        """The most arrivals within any window of `seconds` (default: `delay`)."""
        window = self.delay if seconds is None else seconds
        with self.lock:
            times = sorted(self.arrivals)
        most, first = 0, 0
        for last, t in enumerate(times):
            while first < last and t - times[first] >= window:
                first += 1
            most = max(most, last - first + 1)
        return most

    def summary(self) -> dict[str, Any]:
        """What the server saw, as plain numbers (requests, throttled, peak in flight, the most arrivals
        in a window of `delay` and in a second, requests per second over the whole run)."""
        with self.lock:
            span = (max(self.arrivals) - min(self.arrivals)) if len(self.arrivals) > 1 else 0.0
            requests, throttled, peak = self.requests, self.throttled, self.peak
        return {
            "requests": requests,
            "throttled": throttled,
            "peak_in_flight": peak,
            "busiest_window": self.busiest() if self.delay > 0 else None,
            "busiest_second": self.busiest(1.0),
            "mean_rate": requests / span if span > 0 else None,
        }


_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message></Error>"
)


class _Server(http.server.ThreadingHTTPServer):
    allow_reuse_address = True  # rebind the same port on restart despite TIME_WAIT connections
    ranges: bool
    log: _RequestLog
    traffic: Traffic | None

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hung up mid-answer (a loader cancelling its read-ahead) is no server error."""
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(http.server.SimpleHTTPRequestHandler):
    """SimpleHTTPRequestHandler plus single byte ranges (206/416), request counting and no logging."""

    server: _Server
    _file_response = False

    def parse_request(self) -> bool:
        ok = super().parse_request()
        if ok:
            self.server.log.add(self.command, self.path, self.headers.get("Range"))
        return ok

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._answer(super().do_GET)

    def do_HEAD(self) -> None:
        self._answer(super().do_HEAD)

    def _answer(self, serve: Callable[[], None]) -> None:
        """Serve, or (a throttling server) hold the request, then serve it or answer 503 SlowDown."""
        traffic = self.server.traffic
        if traffic is None:
            serve()
            return
        slow_down = traffic.arrive()
        try:
            time.sleep(traffic.delay)
        finally:
            traffic.leave()
        if not slow_down:
            serve()
            return
        self.send_response(http.HTTPStatus.SERVICE_UNAVAILABLE)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Retry-After", "1")
        self.send_header("Content-Length", str(len(_SLOW_DOWN) if self.command == "GET" else 0))
        self.end_headers()
        if self.command == "GET":
            self.wfile.write(_SLOW_DOWN)

    def end_headers(self) -> None:
        if self._file_response:
            self.send_header("Accept-Ranges", "bytes")
        super().end_headers()

    def send_head(self) -> Any:
        if not self.server.ranges:
            return super().send_head()
        path = self.translate_path(self.path)
        if os.path.isdir(path) or path.endswith("/") or not os.path.isfile(path):
            return super().send_head()  # listing, redirect, index.html or 404, unchanged
        self._file_response = True
        header = self.headers.get("Range")
        if header is None or "If-Range" in self.headers:  # no validators here: answer If-Range in full
            return super().send_head()
        try:
            f = open(path, "rb")
        except OSError:
            return super().send_head()
        try:
            fs = os.fstat(f.fileno())
            size = fs.st_size
            span = parse_range(header, size)
            if span is None:
                f.close()
                return super().send_head()
            if span is False:
                f.close()
                self.send_response(http.HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            assert isinstance(span, tuple)
            first, last = span
            self.send_response(http.HTTPStatus.PARTIAL_CONTENT)
            self.send_header("Content-type", self.guess_type(path))
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
            self.send_header("Content-Length", str(last - first + 1))
            self.send_header("Last-Modified", self.date_time_string(fs.st_mtime))
            self.end_headers()
            f.seek(first)
            return _Slice(f, last - first + 1)
        except BaseException:
            f.close()
            raise


class HTTPServer:
    """http.server serving `directory` on 127.0.0.1:port in a daemon thread, restartable on the same port.

    ranges=True adds single byte-range support (206 + Content-Range, 416 when unsatisfiable);
    ranges=False is plain SimpleHTTPRequestHandler, which ignores Range and always answers 200.
    Requests are counted in `.requests` as (method, raw path, Range header or None).
    `traffic` makes it a server that throttles (503 SlowDown) and records its peak concurrency (`Traffic`).
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        ranges: bool = True,
        port: int | None = None,
        traffic: Traffic | None = None,
    ) -> None:
        self.directory = os.fspath(directory)
        self.ranges = ranges
        self.traffic = traffic
        self.port = port if port is not None else free_port()
        self._log = _RequestLog()
        self._conns = _Connections()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    @property
    def requests(self) -> list[Request]:
        """Requests served so far (kept across restarts; clear() it to start counting afresh)."""
        return self._log.requests

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        """Bind (OSError if the port is taken) and serve in a daemon thread."""
        if self._server is not None:
            raise RuntimeError(f"HTTPServer on port {self.port} is already running")
        handler = functools.partial(_Handler, directory=self.directory)
        server = _Server((HOST, self.port), handler)
        server.ranges, server.log, server.traffic = self.ranges, self._log, self.traffic
        self._conns.attach(server)
        self._thread = threading.Thread(
            target=server.serve_forever, args=(_POLL,), name=f"http-{self.port}", daemon=True
        )
        self._thread.start()
        self._server = server

    def stop(self) -> None:
        """Stop serving and close the listening socket and open connections: the port then refuses."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        self._conns.close_all()
        server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def restart(self) -> None:
        """stop() then start() on the same port."""
        self.stop()
        self.start()


@pytest.fixture
def http_server() -> Iterator[Callable[..., HTTPServer]]:
    """A factory `serve(directory, ranges=True, traffic=None) -> HTTPServer` of started servers, all stopped
    at teardown."""
    servers: list[HTTPServer] = []

    def serve(directory: str | os.PathLike[str], ranges: bool = True, traffic: Traffic | None = None) -> HTTPServer:
        server = HTTPServer(directory, ranges=ranges, traffic=traffic)
        server.start()
        servers.append(server)
        return server

    yield serve
    for server in servers:
        server.stop()
