"""`--remote s3`: our loader reading the benchmark's data from an S3 endpoint on this machine.

moto's S3 server runs in threads of the benchmark's own process, listening on 127.0.0.1 only, on a
port the OS picks; the child processes reach it through ``AWS_ENDPOINT_URL`` and moto's dummy
credentials in their environment (nothing is read from the user's AWS configuration). `ours` is
prepared into ``s3://<BUCKET>/ours`` with the options of the local `ours`, then loaded as two rows:

- ``ours_s3_cold``: ``cache_dir`` is a fresh empty directory for every run, so every record range
  of the pass is fetched with a range GET;
- ``ours_s3_warm``: the same directory, filled by the cold runs just before: every range is a
  cache hit and the pass sends no request.

Each with every ``--workers`` count, the fastest of ``--repeat`` runs and one more run for peak
memory, in fresh processes like the local rows. A loopback endpoint has no network latency or
bandwidth limit, so these rows measure the storage layer's own cost (requests, the cache, read-ahead
threads), not a real bucket's.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import shutil
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

#: The remotes `--remote` accepts.
REMOTES = ("s3",)
HOST = "127.0.0.1"
BUCKET = "bionemo-wds-benchmark"
#: The rows added, in table order.
ROWS = ("ours_s3_cold", "ours_s3_warm")
INSTALL_HINT = "pip install 'bionemo-wds[test]'"
#: Variables that would override or disturb the endpoint and credentials given to the children.
AWS_CONFLICTS = (
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_ENDPOINT_URL_S3",
    "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS",
    "AWS_REGION",
)

#: `run._measure`'s signature: (action, peer, args, fasta, workers, per_run=..., env=...) -> result.
Measure = Callable[..., dict[str, Any]]


class RemoteUnavailable(RuntimeError):
    """The packages a remote run needs are not installed."""


def check_available(remote: str) -> None:
    """Raise `RemoteUnavailable` (naming the install command) unless `remote` can run here."""
    if remote not in REMOTES:
        raise ValueError(f"unknown remote {remote!r}; choose from {', '.join(REMOTES)}")
    # children read and write through s3fs (botocore); moto's server runs on flask
    for module in ("s3fs", "boto3", "moto.server", "flask"):
        try:
            found = importlib.util.find_spec(module) is not None
        except ImportError:  # moto.server's parent `moto` is missing
            found = False
        if not found:
            what = module if module in ("s3fs", "boto3") else "moto's S3 server (moto[server])"
            raise RemoteUnavailable(f"--remote {remote} needs {what}, which is not installed: {INSTALL_HINT}")


class S3Endpoint:
    """moto's S3 server on 127.0.0.1 (an OS-chosen port) in daemon threads of this process."""

    def __init__(self) -> None:
        self._moto: Any = None
        self.port = 0
        self._log_level = logging.NOTSET

    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> None:
        check_available("s3")
        try:
            from moto.server import ThreadedMotoServer
        except ImportError as exc:
            raise RemoteUnavailable(
                f"--remote s3 runs moto's S3 server (moto[server]), which is not installed ({exc}): {INSTALL_HINT}"
            ) from exc
        quiet = logging.getLogger("werkzeug")  # werkzeug logs every request at INFO, to stderr
        self._log_level = quiet.level
        quiet.setLevel(logging.WARNING)
        moto = ThreadedMotoServer(ip_address=HOST, port=0, verbose=False)  # port 0: bound to a free one
        moto.start()
        self._moto = moto
        self.port = int(moto.get_host_and_port()[1])

    def stop(self) -> None:
        moto, self._moto = self._moto, None
        if moto is None:
            return
        moto.stop()
        server = getattr(moto, "_server", None)  # moto's stop() leaves the listening socket open
        if server is not None:
            server.server_close()
        logging.getLogger("werkzeug").setLevel(self._log_level)

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """`base` (default: this process's environment) pointing boto3/s3fs at this endpoint only."""
        env = {k: v for k, v in (os.environ if base is None else base).items() if k not in AWS_CONFLICTS}
        no_proxy = ",".join(p for p in (env.get("NO_PROXY") or env.get("no_proxy"), HOST) if p)
        env.update(
            AWS_ENDPOINT_URL=self.endpoint,
            AWS_ACCESS_KEY_ID="testing",
            AWS_SECRET_ACCESS_KEY="testing",
            AWS_DEFAULT_REGION="us-east-1",
            NO_PROXY=no_proxy,  # a proxy from the environment must not see loopback requests
            no_proxy=no_proxy,
        )
        return env

    def make_bucket(self, name: str) -> None:
        """Create a bucket (an unsigned PUT: moto does not check credentials; no proxy)."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(urllib.request.Request(f"{self.endpoint}/{name}", method="PUT"), timeout=30):
            pass


@contextmanager
def s3_endpoint() -> Iterator[S3Endpoint]:
    """A started `S3Endpoint` holding an empty-or-earlier `BUCKET`; stopped afterwards."""
    s3 = S3Endpoint()
    s3.start()
    try:
        s3.make_bucket(BUCKET)
        yield s3
    finally:
        s3.stop()


def measure_remote(
    args: argparse.Namespace,
    fasta: Path,
    workers: list[int],
    measure: Measure,
    step: Callable[[str], None] = lambda what: None,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, dict[str, Any]]]]:
    """Prepare `ours` into S3 and load it cold and warm with each worker count.

    Returns (what was run: endpoint and URL, the prepare result, row name -> workers -> load result);
    `step(what)` is told before each measurement and after it (what="" then), for a progress bar.
    """
    check_available(args.remote)
    url = f"s3://{BUCKET}/ours"
    caches = Path(args.workdir) / "s3_cache"
    loads: dict[str, dict[str, dict[str, Any]]] = {row: {} for row in ROWS}
    with s3_endpoint() as s3:
        env = s3.env()
        info = {"remote": args.remote, "endpoint": s3.endpoint, "url": url, "server": "moto, in the benchmark process"}
        step("ours prepare into s3")
        prep = measure("prepare", "ours", args, fasta, max(workers), per_run=lambda: ["--url", url], env=env)
        step("")
        for w in workers:
            cache = caches / f"workers{w}"
            reads = ["--url", url, "--cache-dir", str(cache)]

            def cold(cache: Path = cache, reads: list[str] = reads) -> list[str]:
                shutil.rmtree(cache, ignore_errors=True)  # every cold run starts with an empty cache
                return reads

            step(f"ours_s3_cold load workers={w}")
            loads["ours_s3_cold"][str(w)] = measure("load", "ours", args, fasta, w, per_run=cold, env=env)
            step("")
            # the cold runs' last pass (the memory run) left every range of the epoch in `cache`
            step(f"ours_s3_warm load workers={w}")
            loads["ours_s3_warm"][str(w)] = measure("load", "ours", args, fasta, w, per_run=lambda r=reads: r, env=env)
            step("")
    shutil.rmtree(caches, ignore_errors=True)
    return info, prep, loads


def storage_cells(load: dict[str, Any]) -> list[str]:
    """The table's MB-fetched and GETs cells of a load ("-" for a local one)."""
    stats = load.get("storage")
    if not stats:
        return ["-", "-"]
    return [f"{stats['bytes_fetched'] / 1e6:,.2f}", f"{stats['requests']:,}"]
