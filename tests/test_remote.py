"""Datasets in object stores and on web servers, end to end over real local servers (moto S3, http.server).

`prepare` writes into ``s3://``; `GenomicWebDataModule` reads ``s3://`` and ``http://`` and must yield exactly the
batches it yields from the same shards on local disk; the range cache, retries, resume after an outage and
skip-and-count are checked against the servers' own request logs.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import re
import shutil
import socket
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
import servers
import torch
from conftest import KLEBSIELLA, TINY_FIT
from servers import HTTPServer, S3Server, Traffic

from bionemo_wds import Split, WebDataModule
from bionemo_wds.cli.main import main as cli_main
from bionemo_wds.format import MANIFEST_NAME, read_manifest, read_split_index
from bionemo_wds.format.manifest import ManifestError
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.load.shard_errors import CorruptShardError
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.outdir import PLAN_NAME
from bionemo_wds.prepare.report import verify
from bionemo_wds.storage.atomic import atomic_write
from bionemo_wds.storage.request_slots import RequestSlots
from bionemo_wds.storage.retry import RemoteReadError
from bionemo_wds.storage.store import Store

pytestmark = pytest.mark.slow  # real S3 and HTTP servers, end to end

pytest.importorskip("s3fs")
pytest.importorskip("aiohttp")

s3_server = servers.s3_server
http_server = servers.http_server

BUCKET = "bucket"
S3_ROOT = f"s3://{BUCKET}/kleb"
#: 1024-token samples of the Klebsiella assembly; 50 windows per record keeps the range requests few (~100 per pass)
PREPARE = {"seq_length": 1024, "stride": 1000, "samples_per_shard": 400, "windows_per_record": 50, "progress": False}
#: fast failure: 2 attempts, 0.05 s apart
FAST_FAIL = {"retries": 2, "retry_backoff": 0.05}
#: botocore without retries of its own (by default up to 5 attempts with back-off, under our own
#: `retries`): a test of what happens once our retries are spent does not wait for its too
NO_CLIENT_RETRIES = {"config_kwargs": {"retries": {"max_attempts": 1, "mode": "standard"}}}


# ---------------------------------------------------------------------------------------------------- harness

#: Servers of this process whose listening socket forked children must not keep (see `_children_do_not_listen`).
_SERVERS: list[Any] = []


def _listening_socket(server: Any) -> socket.socket | None:
    """The socket a servers.S3Server or servers.HTTPServer listens on now (None when stopped)."""
    if isinstance(server, S3Server):
        return server._moto._server.socket if server._moto is not None else None
    return server._server.socket if server._server is not None else None


def _children_do_not_listen() -> None:
    """(in a forked child) Point the fds of the in-process servers' listening sockets at /dev/null.

    The stand-in servers run in threads of the test process, so loader workers forked from it inherit their
    listening sockets: after `stop()` in the parent the port would still be bound and accept connections that
    nobody answers (each read then waits for its timeout, and `start()` fails with "address in use"). A real
    server is another process; this makes these behave like one. The fd number stays taken (no reuse).
    """
    for server in list(_SERVERS):
        sock = _listening_socket(server)
        if sock is None or sock.fileno() < 0:
            continue
        devnull = os.open(os.devnull, os.O_RDWR)
        try:
            os.dup2(devnull, sock.fileno())
        finally:
            os.close(devnull)


os.register_at_fork(after_in_child=_children_do_not_listen)


@pytest.fixture
def own_process(request) -> Callable[[Any], Any]:
    """Registers a server for `_children_do_not_listen` until the test ends."""

    def register(server: Any) -> Any:
        _SERVERS.append(server)
        request.addfinalizer(lambda: _SERVERS.remove(server))
        return server

    return register


@pytest.fixture
def serve(http_server, own_process) -> Callable[..., HTTPServer]:
    """http_server's factory, its servers registered with `own_process`."""
    return lambda directory, ranges=True, traffic=None: own_process(http_server(directory, ranges, traffic))


def options(**kw: Any) -> PrepareOptions:
    return PrepareOptions(**{**PREPARE, **kw})


def make(root: str | Path, **kw: Any) -> GenomicWebDataModule:
    dm = GenomicWebDataModule(str(root), **{"micro_batch_size": 16, "seed": 7, "shuffle_buffer": 256, **kw})
    dm.setup("fit")
    return dm


def keys_of(batches: list[dict[str, Any]]) -> list[list[str]]:
    return [list(b["keys"]) for b in batches]


def assert_same_batches(got: list[dict[str, Any]], want: list[dict[str, Any]]) -> None:
    """Batch by batch, field by field: keys, bases (the tokens), lengths, tags, rc flags, filler."""
    assert len(got) == len(want) > 0
    for n, (g, w) in enumerate(zip(got, want)):
        assert set(g) == set(w), n
        for field, value in w.items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(g[field], value), (n, field)
            else:
                assert list(g[field]) == list(value), (n, field)


def shard_requests(requests: list[servers.Request], method: str = "GET") -> list[servers.Request]:
    """The requests of `method` for shard bytes (``.tar`` objects), query strings ignored."""
    return [r for r in requests if r[0] == method and r[1].split("?")[0].endswith(".tar")]


def cache_bytes(directory: Path) -> int:
    """Bytes of complete entries in a range cache directory (tolerates entries evicted while counting)."""
    total = 0
    for dirpath, _, files in os.walk(directory):
        for name in files:
            if name.startswith("."):
                continue  # the cache lock and temporaries
            try:
                total += os.stat(os.path.join(dirpath, name)).st_size
            except FileNotFoundError:
                pass
    return total


@pytest.fixture(scope="module")
def local_dataset(tmp_path_factory) -> Path:
    """The dataset prepared on local disk (the reference; also what the HTTP server serves)."""
    out = tmp_path_factory.mktemp("remote") / "kleb"
    prepare([KLEBSIELLA], out, options())
    return out


@pytest.fixture(scope="module")
def reference(local_dataset) -> dict[int, dict[str, list[dict[str, Any]]]]:
    """Local-disk batches of every test below: workers -> {"train", "val", "train2" (the next epoch)}."""
    out = {}
    for workers in (0, 2):
        dm = make(local_dataset, num_workers=workers)
        train = list(dm.train_dataloader())
        out[workers] = {"train": train, "val": list(dm.val_dataloader()), "train2": list(dm.train_dataloader())}
    assert keys_of(out[0]["train"]) == keys_of(out[2]["train"])  # any number of workers, the same batches
    assert keys_of(out[0]["train"]) != keys_of(out[0]["train2"])
    return out


@pytest.fixture
def s3_dataset(s3_server: S3Server, own_process) -> str:
    """The dataset prepared into a fresh bucket of the S3 server (request log cleared afterwards)."""
    own_process(s3_server)
    s3_server.make_bucket(BUCKET)
    result = prepare([KLEBSIELLA], S3_ROOT, options())
    assert result.status == "written"
    s3_server.requests.clear()
    return S3_ROOT


def s3_objects(s3_server: S3Server, prefix: str = "kleb/") -> dict[str, bytes]:
    client = s3_server.client()
    listing = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read() for o in listing}


# ---------------------------------------------------------------------------------------------------- prepare


def test_prepare_into_a_bucket(s3_server, local_dataset):
    s3_server.make_bucket(BUCKET)
    result = prepare([KLEBSIELLA], S3_ROOT, options())
    assert result.status == "written" and result.out == S3_ROOT
    manifest = result.manifest
    objects = s3_objects(s3_server)
    shards = {f"kleb/{sh.path}": sh for info in manifest.splits.values() for sh in info.shards}
    indexes = {f"kleb/{info.record_index.path}": info.record_index for info in manifest.splits.values()}
    assert len(indexes) == 3  # no plan, cache or temporary left behind:
    assert set(objects) == {"kleb/manifest.json", "kleb/sequences.tsv", *shards, *indexes}
    assert objects["kleb/sequences.tsv"] == (local_dataset / "sequences.tsv").read_bytes()  # the sequence table
    assert json.loads(objects["kleb/manifest.json"]) == read_manifest(S3_ROOT).to_json() == manifest.to_json()
    local = read_manifest(local_dataset)
    for key, entry in {**shards, **indexes}.items():
        assert len(objects[key]) == entry.bytes and hashlib.sha256(objects[key]).hexdigest() == entry.sha256
        assert (local_dataset / entry.path).read_bytes() == objects[key]  # the bytes of a local run
    assert manifest.splits == local.splits
    puts = [r[1].split("?")[0] for r in s3_server.requests if r[0] == "PUT"]
    assert puts[-1] == "/bucket/kleb/manifest.json"  # last: it names only shards (and index files) that exist
    assert {p.removeprefix("/bucket/") for p in puts[-4:-1]} == set(indexes)  # each index file one object
    assert len(shard_requests(s3_server.requests, "PUT")) == len(shards)
    # the same request again does nothing
    s3_server.requests.clear()
    assert prepare([KLEBSIELLA], S3_ROOT, options()).status == "unchanged"
    assert not [r for r in s3_server.requests if r[0] in ("PUT", "POST", "DELETE")]


def test_prepare_resumes_in_a_bucket_writing_only_the_missing_shard(s3_server):
    s3_server.make_bucket(BUCKET)
    first = prepare([KLEBSIELLA], S3_ROOT, options())
    before = s3_objects(s3_server)
    client = s3_server.client()
    # an interrupted run: the plan is there, the manifest and one shard are not
    missing = "kleb/" + first.manifest.splits["train"].shards[3].path
    client.delete_object(Bucket=BUCKET, Key="kleb/manifest.json")
    client.delete_object(Bucket=BUCKET, Key=missing)
    plan = json.dumps({"request": first.manifest.request}).encode()
    client.put_object(Bucket=BUCKET, Key=f"kleb/{PLAN_NAME}", Body=plan)
    s3_server.requests.clear()
    again = prepare([KLEBSIELLA], S3_ROOT, options())
    assert again.status == "resumed" and again.shards_written == 1
    n_shards = len([key for key in before if key.endswith(".tar")])
    assert again.shards_reused == n_shards - 1  # every shard but the missing one
    shard_puts = {r[1].split("?")[0] for r in shard_requests(s3_server.requests, "PUT")}
    assert shard_puts == {f"/{BUCKET}/{missing}"}  # no other shard uploaded again
    assert not [r for r in s3_server.requests if r[0] == "POST" and ".tar" in r[1]]  # nor in parts
    assert s3_objects(s3_server) == before  # byte for byte the first run, manifest included, plan gone


def test_a_failed_upload_leaves_no_object(s3_server):
    s3_server.make_bucket(BUCKET)
    client = s3_server.client()
    with atomic_write(f"s3://{BUCKET}/out/whole.bin") as fh:  # the control: a clean exit publishes
        fh.write(b"x" * 1000)
    assert client.get_object(Bucket=BUCKET, Key="out/whole.bin")["Body"].read() == b"x" * 1000

    class Killed(Exception):
        pass

    with pytest.raises(Killed):
        with atomic_write(f"s3://{BUCKET}/out/small.bin") as fh:
            fh.write(b"y" * 1000)
            raise Killed
    # large enough for a multipart upload with parts already sent: the upload is aborted
    with pytest.raises(Killed):
        with atomic_write(f"s3://{BUCKET}/out/large.bin", block_size=5 << 20) as fh:
            for _ in range(3):
                fh.write(os.urandom(5 << 20))
            assert any(m == "PUT" and "partNumber=" in p for m, p, _ in s3_server.requests)  # parts were sent
            raise Killed
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET).get("Contents", [])}
    assert keys == {"out/whole.bin"}
    assert client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


# ---------------------------------------------------------------------------------------------------- reading


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_from_s3_equal_batches_from_local_disk(s3_server, s3_dataset, local_dataset, reference, workers):
    dm = make(s3_dataset, num_workers=workers)
    assert dm.manifest.splits == read_manifest(local_dataset).splits  # the same shards (sizes, sha256, index)
    assert_same_batches(list(dm.train_dataloader()), reference[workers]["train"])
    assert_same_batches(list(dm.val_dataloader()), reference[workers]["val"])
    stats = dm.storage_stats
    ranged = [r for r in shard_requests(s3_server.requests) if r[2] is not None]
    assert ranged and len(ranged) == len(shard_requests(s3_server.requests))  # records by range, never whole
    assert stats["requests"] >= len(ranged) and stats["bytes_fetched"] > 0 and stats["retries"] == 0


def test_the_record_index_file_is_fetched_once_per_split_and_checked(s3_server, s3_dataset, local_dataset):
    """Version 4 from a bucket: each split's record index file is one GET of the whole object (not a
    memory map), its sha256 checked as it is read anyway; rows as on local disk."""
    dm = make(s3_dataset)
    gets = [r[1] for r in s3_server.requests if r[0] == "GET" and r[1].endswith("record-index.npy")]
    assert sorted(gets) == [f"/{BUCKET}/kleb/train/record-index.npy", f"/{BUCKET}/kleb/val/record-index.npy"]
    assert dm.storage_stats["requests"] == 0  # the counters count shard reads, not the dataset's metadata
    remote = read_split_index(Store(s3_dataset), dm.manifest, "train")
    local = read_split_index(Store(local_dataset), read_manifest(local_dataset), "train")
    assert remote is not None and local is not None and not isinstance(remote.rows, np.memmap)
    assert np.array_equal(remote.rows, local.rows) and np.array_equal(remote.first, local.first)
    # one value changed in the object, same size: the remote read (whole, hashed) refuses it, verify names it
    client = s3_server.client()
    key = "kleb/train/record-index.npy"
    data = bytearray(client.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    data[-1] ^= 0xFF
    client.put_object(Bucket=BUCKET, Key=key, Body=bytes(data))
    with pytest.raises(ManifestError, match=re.escape(f"{S3_ROOT}/train/record-index.npy: sha256 ")):
        make(s3_dataset)
    problems = verify(S3_ROOT, progress=False).problems
    assert (
        problems[0].startswith(f"{S3_ROOT}/train/record-index.npy: sha256 ")
        and "changed after it was written" in (problems[0])
    )
    assert len(problems) == 2 and "fails its crc32 check" in problems[1]  # the last record's crc32, in the last shard


def test_a_blend_reads_a_bucket_beside_local_disk(s3_server, s3_dataset, local_dataset, tmp_path):
    """Mixing with a URL: a blend of the bucket's dataset and a local one yields exactly the batches of
    the same blend over two local copies (the bucket's records by range, counted), with each source's
    val split read from where it lives."""
    copy = tmp_path / "copy"
    shutil.copytree(local_dataset, copy)
    blend = {"micro_batch_size": 16, "seed": 7, "shuffle_buffer": 256, "samples_per_epoch": 480}

    def batches(first: str) -> tuple[GenomicWebDataModule, list[dict[str, Any]], list[list[dict[str, Any]]]]:
        datasets = [{"path": first, "weight": 0.7}, {"path": str(copy), "weight": 0.3}]
        dm = GenomicWebDataModule(datasets=datasets, **blend)
        dm.setup("fit")
        return dm, list(dm.train_dataloader()), [list(loader) for loader in dm.val_dataloader()]

    dm, train, val = batches(s3_dataset)
    _, want_train, want_val = batches(str(local_dataset))
    assert_same_batches(train, want_train)
    for got, want in zip(val, want_val, strict=True):
        assert_same_batches(got, want)
    assert torch.cat([b["dataset"] for b in train]).bincount().tolist() == [336, 144]
    ranged = shard_requests(s3_server.requests)
    assert ranged and all(r[2] is not None for r in ranged)
    assert dm.storage_stats["requests"] >= len(ranged) > 0


def test_http_dataset_served_with_directory_listings_loads(local_dataset, serve):
    server = serve(local_dataset.parent)
    dm = make(f"{server.url}/{local_dataset.name}")
    assert len(dm.train_dataloader()) > 0


@pytest.mark.parametrize("workers", [0, 2])
def test_batches_from_http_equal_batches_from_local_disk(local_dataset, reference, serve, workers):
    server = serve(local_dataset.parent)
    dm = make(f"{server.url}/{local_dataset.name}", num_workers=workers)
    assert_same_batches(list(dm.train_dataloader()), reference[workers]["train"])
    assert_same_batches(list(dm.val_dataloader()), reference[workers]["val"])
    gets = shard_requests(server.requests)
    assert gets and all(r[2] is not None and r[2].startswith("bytes=") for r in gets)
    assert dm.storage_stats["requests"] >= len(gets)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_cache_serves_the_second_epoch_without_a_request(s3_server, s3_dataset, reference, tmp_path, workers):
    dm = make(s3_dataset, num_workers=workers, cache_dir=str(tmp_path / "cache"))
    assert_same_batches(list(dm.train_dataloader()), reference[workers]["train"])
    first = dm.storage_stats
    assert first["cache_misses"] > 0 and first["requests"] > 0
    n_gets = len(shard_requests(s3_server.requests))
    assert n_gets > 0
    assert_same_batches(list(dm.train_dataloader()), reference[workers]["train2"])
    second = dm.storage_stats
    assert len(shard_requests(s3_server.requests)) == n_gets  # the server saw no read of shard bytes
    assert second["requests"] == first["requests"] and second["bytes_fetched"] == first["bytes_fetched"]
    assert second["cache_misses"] == first["cache_misses"]
    n_train_records = dm.manifest.splits["train"].record_index.records
    assert second["cache_hits"] - first["cache_hits"] >= n_train_records


def test_a_cache_smaller_than_the_dataset_evicts_and_yields_the_right_bytes(s3_server, s3_dataset, reference, tmp_path):
    limit = 1 << 20
    cache = tmp_path / "cache"
    dm = make(s3_dataset, cache_dir=str(cache), cache_limit=limit)
    total = sum(sh.bytes for sh in dm.manifest.splits["train"].shards)
    largest = int(dm.records[Split.train].index.rows["size"].max())
    assert total > 4 * limit
    for epoch in ("train", "train2"):
        batches, peak = [], 0
        for batch in dm.train_dataloader():
            batches.append(batch)
            peak = max(peak, cache_bytes(cache))
        assert_same_batches(batches, reference[0][epoch])
        # near the limit: a pass evicts after each eighth of it added; prefetch threads may add a few records meanwhile
        assert 0 < peak <= limit + limit // 4 + 8 * largest, epoch
        assert cache_bytes(cache) <= limit + limit // 4 + 8 * largest
    stats = dm.storage_stats
    assert stats["bytes_fetched"] > 1.5 * total  # evicted ranges were fetched again in the second epoch
    assert len(shard_requests(s3_server.requests)) == stats["requests"]


# ---------------------------------------------------------------------------------------------------- outages


@pytest.fixture(params=["s3", "http"])
def served(request, local_dataset, serve) -> tuple[Any, str]:
    if request.param == "s3":
        request.getfixturevalue("s3_dataset")
        return request.getfixturevalue("s3_server"), S3_ROOT
    server = serve(local_dataset.parent)
    return server, f"{server.url}/{local_dataset.name}"


@pytest.mark.parametrize("workers", [0, 2])
def test_an_outage_is_a_clear_error_and_a_resume_finishes_the_epoch(served, reference, workers):
    server, root = served
    full = keys_of(reference[0]["train"])
    client = {"storage_options": NO_CLIENT_RETRIES} if root.startswith("s3://") else {}
    dm = make(root, num_workers=workers, **client, **FAST_FAIL)
    loader = dm.train_dataloader()
    taken = []
    it = iter(loader)
    for _ in range(3):
        taken.append(list(next(it)["keys"]))
    server.stop()
    with pytest.raises(RemoteReadError) as info:
        for batch in it:  # what was fetched ahead still arrives, then the error
            taken.append(list(batch["keys"]))
    message = str(info.value)
    assert f"{root}/train/wdshards-" in message and "after 2 attempt(s)" in message
    assert dm.storage_stats["retries"] > 0
    assert len(taken) < len(full)
    assert taken == full[: len(taken)]  # nothing wrong arrived before the error
    state = dm.state_dict()
    assert state["epoch"] == 0 and state["consumed"] == [[1, 16, len(taken)]]
    server.start()
    again = make(root, num_workers=workers, **FAST_FAIL)
    again.load_state_dict(state)
    rest = keys_of(list(again.train_dataloader()))
    assert taken + rest == full  # no sample lost or repeated


@pytest.mark.parametrize("workers", [0, 2])
def test_skip_and_count_when_the_server_is_gone(s3_server, s3_dataset, reference, workers):
    want = keys_of(reference[0]["train"])
    dm = make(s3_dataset, num_workers=workers, handler="warn", storage_options=NO_CLIENT_RETRIES, **FAST_FAIL)
    loader = dm.train_dataloader()
    got = []
    it = iter(loader)
    got.append(list(next(it)["keys"]))
    s3_server.stop()
    # loader workers warn in their own processes; without them the warning reaches this one
    with pytest.warns(UserWarning, match="could not be fetched") if workers == 0 else contextlib.nullcontext():
        got.extend(list(b["keys"]) for b in it)
    assert len(got) == len(loader) == len(want)  # the planned number of batches
    assert dm.skipped > 0 and dm.storage_stats["shards_skipped"] > 0
    flat_got, flat_want = [k for b in got for k in b], [k for b in want for k in b]
    assert all(g in ("", w) for g, w in zip(flat_got, flat_want))  # real windows in place, filler for the rest
    assert "" in flat_got and got[0] == want[0]


# ---------------------------------------------------------------------------------------------------- throttling


def test_a_throttling_server_gets_at_most_max_requests_at_once_and_the_batches_of_local_disk(
    local_dataset, reference, serve, tmp_path
):
    """A server that answers 503 SlowDown to every 4th request and holds each request 20 ms: with two
    loader workers (three processes sharing the bound through the cache directory, each with 8 read-ahead
    threads) it never sees more than `max_requests` at once, nor more in any 20 ms; the epoch is the
    one read from local disk; every throttling answer was retried and counted."""
    traffic = Traffic(every=4, delay=0.02)
    server = serve(local_dataset.parent, traffic=traffic)
    dm = make(
        f"{server.url}/{local_dataset.name}",
        num_workers=2,
        cache_dir=str(tmp_path / "cache"),
        max_requests=3,
        retries=8,
        retry_backoff=0.01,
    )
    assert_same_batches(list(dm.train_dataloader()), reference[2]["train"])
    assert_same_batches(list(dm.val_dataloader()), reference[2]["val"])
    seen = traffic.summary()
    assert seen["throttled"] == seen["requests"] // 4 > 0
    assert 2 <= seen["peak_in_flight"] <= 3 and seen["busiest_window"] <= 3
    stats = dm.storage_stats
    # the store's counters leave out the metadata reads (manifest, record index): at most the server's count
    assert 0 < stats["throttled"] <= seen["throttled"] and stats["retries"] >= stats["throttled"]
    assert RequestSlots(tmp_path / "cache", 3).in_use() == 0  # every slot given back


# ---------------------------------------------------------------------------------------------------- no range requests


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("cached", [False, True], ids=["no-cache-dir", "cache-dir"])
def test_a_server_without_range_requests_gives_the_batches_of_local_disk(
    local_dataset, reference, serve, tmp_path, workers, cached
):
    """``python -m http.server`` (SimpleHTTPRequestHandler) ignores Range and sends whole files: each shard is
    then fetched whole, once, into the cache (a temporary one without cache_dir), and the epochs are those
    read from disk. The warning that range reads would be cheaper comes once (in a worker's own stderr with
    loader workers)."""
    server = serve(local_dataset.parent, ranges=False)
    cache = tmp_path / "cache"
    root = f"{server.url}/{local_dataset.name}"
    dm = make(root, num_workers=workers, cache_dir=str(cache) if cached else None, **FAST_FAIL)
    server.requests.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        train, val = list(dm.train_dataloader()), list(dm.val_dataloader())
    assert_same_batches(train, reference[workers]["train"])
    assert_same_batches(val, reference[workers]["val"])
    said = [str(w.message) for w in caught if "does not answer range requests" in str(w.message)]
    if workers == 0:
        assert said == [f"{root} does not answer range requests: " + said[0].split(": ", 1)[1]]
        assert "fetched whole, once" in said[0] and "\n" not in said[0]
    gets = shard_requests(server.requests)
    n_shards = sum(len(dm.manifest.splits[s].shards) for s in ("train", "val"))
    assert len(gets) == len({path for _, path, _ in gets}) == n_shards  # every shard once, whole
    stats = dm.storage_stats
    assert stats["whole_shards"] == n_shards and stats["retries"] == 0
    assert_same_batches(list(dm.train_dataloader()), reference[workers]["train2"])
    assert len(shard_requests(server.requests)) == n_shards  # the next epoch from the cache
    if cached:
        total = sum(sh.bytes for s in ("train", "val") for sh in dm.manifest.splits[s].shards)
        assert cache_bytes(cache) == total  # the shards, whole
    else:  # the temporary directory goes with the data module
        spare = [r.shards._spare for r in dm.records.values()]
        assert spare and all(os.path.isdir(path) for path in spare)
        del dm, train, val
        gc.collect()
        assert not any(os.path.exists(path) for path in spare)


def test_a_server_without_range_requests_and_a_cache_limit_below_a_shard_is_a_clear_error(
    local_dataset, serve, tmp_path
):
    server = serve(local_dataset.parent, ranges=False)
    dm = make(f"{server.url}/{local_dataset.name}", cache_dir=str(tmp_path / "cache"), cache_limit=100_000)
    with pytest.raises(
        ValueError, match=r"wdshards-\d+\.tar is \d+ bytes, more than cache_limit \(100000 bytes\)"
    ) as info:
        next(iter(dm.train_dataloader()))
    assert "its server ignores range requests" in str(info.value) and "\n" not in str(info.value)
    assert cache_bytes(tmp_path / "cache") == 0  # nothing was cached


def test_a_server_without_range_requests_keeps_the_cache_limit(local_dataset, reference, serve, tmp_path):
    """A limit of two shards: shards are evicted whole and fetched again, the batches stay right."""
    server = serve(local_dataset.parent, ranges=False)
    cache = tmp_path / "cache"
    largest = max(sh.bytes for sh in read_manifest(local_dataset).splits["train"].shards)
    limit = 2 * largest
    dm = make(f"{server.url}/{local_dataset.name}", cache_dir=str(cache), cache_limit=limit)
    batches, peak = [], 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for batch in dm.train_dataloader():
            batches.append(batch)
            peak = max(peak, cache_bytes(cache))
    assert_same_batches(batches, reference[0]["train"])
    # a shard is evicted once another is added past the limit; prefetch threads may hold one more each
    assert 0 < peak <= limit + 8 * largest
    assert cache_bytes(cache) <= limit + 8 * largest
    n_shards = len(dm.manifest.splits["train"].shards)
    assert dm.storage_stats["whole_shards"] > n_shards  # evicted shards were fetched again


def test_a_missing_shard_is_named_before_any_read(s3_server, s3_dataset):
    manifest = read_manifest(s3_dataset)
    path = manifest.splits["val"].shards[0].path
    s3_server.client().delete_object(Bucket=BUCKET, Key=f"kleb/{path}")
    with pytest.raises(CorruptShardError, match=rf"{S3_ROOT}/{path} is listed in .*{MANIFEST_NAME} but missing"):
        make(s3_dataset)


# ---------------------------------------------------------------------------------------- compat WebDataModule


def webdatamodule_samples(directory: str) -> list[bytes]:
    """Every train record the first-release `WebDataModule` yields from `directory` (its decoded msgpack,
    packed again for comparison), in order."""
    dm = WebDataModule(
        {Split.train: directory, Split.val: directory},
        None,
        "msgpack",
        1,
        kwargs_wds={Split.train: {"shardshuffle": False}, Split.val: {"shardshuffle": False}},
        kwargs_wld={Split.train: {"num_workers": 0}, Split.val: {"num_workers": 0}},
    )
    dm.setup("fit")
    return [msgpack.packb(record) for (record,) in dm.train_dataloader()]


def test_webdatamodule_reads_shard_directories_from_s3_and_http(local_dataset, s3_dataset, serve):
    local = webdatamodule_samples(str(local_dataset / "train"))
    assert len(local) > 1
    assert webdatamodule_samples(f"{s3_dataset}/train") == local
    server = serve(local_dataset.parent)
    assert webdatamodule_samples(f"{server.url}/{local_dataset.name}/train") == local


# ---------------------------------------------------------------------------------------- LightningCLI fit


def test_lightning_cli_fit_from_a_bucket_with_the_s3_config(s3_server, own_process, tmp_path):
    """`bionemo-wds fit --config configs/fit_s3.yaml` trains from s3:// (the config's bucket, made here)."""
    own_process(s3_server)
    s3_server.make_bucket("my-bucket")
    prepare([KLEBSIELLA], "s3://my-bucket/run1", options(seq_length=512, stride=500))
    cache = tmp_path / "cache"
    code = cli_main(
        [
            "fit",
            "--config",
            str(Path(__file__).resolve().parents[1] / "configs" / "fit_s3.yaml"),
            *TINY_FIT,
            "--trainer.logger.init_args.save_dir",
            str(tmp_path / "logs"),
            "--data.cache_dir",
            str(cache),
        ]
    )
    assert code == 0
    assert any((tmp_path / "logs").rglob("metrics.csv"))
    assert cache_bytes(cache) > 0  # the ranges trained on came through the cache
    assert shard_requests(s3_server.requests)  # and from the bucket


def test_a_cache_dir_for_a_local_dataset_is_not_silently_ignored(local_dataset, tmp_path):
    with pytest.warns(UserWarning, match="cache_dir is for remote datasets"):
        make(local_dataset, cache_dir=str(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists()


def test_packed_samples_of_a_sequence_layout_in_a_bucket_equal_local_disk(s3_server, own_process, tmp_path):
    """Issue 25: a sequence-layout dataset in S3, read as packed samples and as windows cut at load (with
    loader workers, so the read-ahead works out which pieces the documents span): the batches of local disk."""
    own_process(s3_server)
    s3_server.make_bucket(BUCKET)
    seqs = {"seq_length": 2048, "layout": "sequences", "progress": False}
    prepare([KLEBSIELLA], f"s3://{BUCKET}/seqs", PrepareOptions(**seqs))
    prepare([KLEBSIELLA], tmp_path / "seqs", PrepareOptions(**seqs))
    for cut in ({"pack": True}, {"seq_length": 4096, "stride": 3000}):
        remote = make(f"s3://{BUCKET}/seqs", num_workers=2, **cut)
        local = make(tmp_path / "seqs", num_workers=0, **cut)
        assert_same_batches(list(remote.train_dataloader()), list(local.train_dataloader()))
        assert remote.storage_stats["bytes_fetched"] > 0
