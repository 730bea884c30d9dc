"""Units of the storage layer: location checks, retry classification and backoff, the range cache, the counters."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import multiprocessing as mp
import os
import pickle
import threading
import time
from pathlib import Path

import pytest

from bionemo_wds.errors import BadInputError
from bionemo_wds.storage import cache as cache_module
from bionemo_wds.storage.cache import LOCK_NAME, STALE_TEMPORARY_SECONDS, CacheTooSmall, RangeCache
from bionemo_wds.storage.location import (
    check_location,
    default_options,
    filesystem,
    is_url,
    join,
    local_path,
    protocol_of,
)
from bionemo_wds.storage.retry import RemoteReadError, RetryPolicy, ShortRead, is_transient, retrying
from bionemo_wds.storage.stats import FIELDS, StorageStats
from bionemo_wds.storage.store import Store

# ---------------------------------------------------------------------------------------------------- locations


def test_local_paths_pass_unchanged():
    for path in ("/data/run1", "run1", "./a/b", "C:/data/run1", "file:///data/run1"):
        assert check_location(path) == path
        assert check_location(path, write=True) == path
    assert check_location(Path("/data/run1")) == "/data/run1"
    assert not is_url("/data/run1") and not is_url("file:///data/run1") and not is_url("C:/data")
    assert local_path("file:///data/a%20b") == "/data/a b"
    assert local_path("/data/x") == "/data/x"


def test_urls_are_recognised():
    assert is_url("s3://bucket/run1") and is_url("http://127.0.0.1:80/x") and is_url("HTTPS://host/x")
    assert protocol_of("s3://bucket/run1") == "s3"
    assert protocol_of("HTTPS://host/x") == "https"
    assert protocol_of("s3:/bucket") == "" and protocol_of("/a/b") == ""
    assert check_location("s3://bucket/run1", write=True) == "s3://bucket/run1"
    assert check_location("http://127.0.0.1:8000/run1") == "http://127.0.0.1:8000/run1"


def test_join():
    assert join("s3://bucket/run1/", "train", "/wdshards-000000.tar") == "s3://bucket/run1/train/wdshards-000000.tar"
    assert join("/data", "", "x") == "/data/x"


@pytest.mark.parametrize("url", ["s3:/bucket/run1", "s3:bucket/run1", "https:/host/x"])
def test_a_url_with_one_slash_is_refused_not_a_local_directory(url):
    with pytest.raises(BadInputError, match=r"not a valid URL") as info:
        check_location(url, what="--out")
    assert "--out" in str(info.value) and url.split("/")[0] in str(info.value)


def test_unknown_protocol_and_missing_bucket_are_refused():
    with pytest.raises(BadInputError, match=r"unknown protocol nosuchproto://"):
        check_location("nosuchproto://bucket/x")
    with pytest.raises(BadInputError, match=r"names no bucket or host"):
        check_location("s3:///run1")


def test_http_is_read_only():
    check_location("https://host/run1")  # reading is fine
    with pytest.raises(BadInputError, match=r"read-only"):
        check_location("https://host/run1", write=True)
    with pytest.raises(BadInputError, match=r"read-only"):
        Store("http://host/run1", write=True)


def test_a_protocol_whose_package_is_missing_names_it():
    import importlib.util

    if importlib.util.find_spec("gcsfs") is not None:
        pytest.skip("gcsfs is installed")
    with pytest.raises(BadInputError, match=r"needs gcsfs, which is not installed"):
        check_location("gs://bucket/run1")


def test_prepare_into_a_malformed_url_writes_nothing(tmp_path, monkeypatch):
    from conftest import LAMBDA

    from bionemo_wds.prepare import PrepareOptions, prepare

    monkeypatch.chdir(tmp_path)
    with pytest.raises(BadInputError, match=r"not a valid URL"):
        prepare([LAMBDA], "s3:/bucket/run1", PrepareOptions(seq_length=1024, progress=False))
    assert list(tmp_path.iterdir()) == []  # no directory "s3:" appeared


def test_readers_make_one_botocore_attempt_and_user_options_merge_deeply():
    reader = default_options("s3", own_retries=True)
    assert reader["config_kwargs"]["retries"] == {"max_attempts": 1}
    assert default_options("s3", own_retries=False) == {} and default_options("http", own_retries=True) == {}
    fs = filesystem("s3://bucket/x", {"config_kwargs": {"connect_timeout": 3}, "anon": True})
    assert fs.config_kwargs["retries"] == {"max_attempts": 1}  # kept, though the user set config_kwargs
    assert fs.config_kwargs["connect_timeout"] == 3  # the user's value wins
    assert fs.config_kwargs["read_timeout"] == reader["config_kwargs"]["read_timeout"]


# ---------------------------------------------------------------------------------------------------- retries


def test_backoff_doubles_up_to_the_cap():
    assert list(RetryPolicy(attempts=6, backoff=0.5, max_backoff=3.0).waits()) == [0.5, 1.0, 2.0, 3.0, 3.0]
    assert list(RetryPolicy(attempts=1).waits()) == []
    assert list(RetryPolicy(attempts=3, backoff=0.0).waits()) == [0.0, 0.0]
    with pytest.raises(ValueError, match="at least 1 attempt"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="non-negative"):
        RetryPolicy(backoff=-1)


def _caused(exc: BaseException, cause: BaseException) -> BaseException:
    exc.__cause__ = cause
    return exc


def _client_error(code: str, status: int):
    botocore_exceptions = pytest.importorskip("botocore.exceptions")
    response = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return botocore_exceptions.ClientError(response, "GetObject")


@pytest.mark.parametrize(
    "make_exc, transient",
    [
        (lambda: ConnectionRefusedError(errno.ECONNREFUSED, "refused"), True),
        (lambda: ConnectionResetError("reset"), True),
        (lambda: TimeoutError("slow"), True),
        (lambda: asyncio.TimeoutError(), True),
        (lambda: ShortRead("asked for 10 bytes, got 3"), True),
        (lambda: OSError(errno.ECONNRESET, "reset"), True),
        (lambda: OSError(errno.EIO, "io"), True),  # an EIO on its own: the network
        (lambda: FileNotFoundError("s3://bucket/x"), False),
        (lambda: PermissionError("denied"), False),
        (lambda: IsADirectoryError("dir"), False),
        (lambda: ValueError("bad"), False),
        (lambda: OSError(errno.EINVAL, "invalid"), False),
        # what s3fs raises: an OSError translated from the botocore error, chained to it
        (lambda: _caused(OSError(errno.EIO, "io"), _client_error("InternalError", 500)), True),
        (lambda: _caused(OSError(errno.EIO, "io"), _client_error("InvalidRange", 416)), False),
        (lambda: _caused(OSError(errno.EBUSY, "busy"), _client_error("SlowDown", 503)), True),
        (lambda: _client_error("AccessDenied", 403), False),
        (lambda: _client_error("Whatever", 502), True),
        (lambda: _client_error("TooMany", 429), True),
        # a wrapper raised from a network error: the chain decides
        (lambda: _caused(RuntimeError("wrapped"), ConnectionResetError("reset")), True),
        # a missing object reported first is final, whatever it was raised from
        (lambda: _caused(FileNotFoundError("gone"), ConnectionResetError("reset")), False),
    ],
)
def test_transient_failures_are_told_from_final_ones(make_exc, transient):
    assert is_transient(make_exc()) is transient


def test_aiohttp_errors_are_classified():
    aiohttp = pytest.importorskip("aiohttp")
    assert is_transient(aiohttp.ClientResponseError(None, (), status=503))
    assert is_transient(aiohttp.ClientResponseError(None, (), status=429))
    assert not is_transient(aiohttp.ClientResponseError(None, (), status=404))
    assert not is_transient(aiohttp.ClientResponseError(None, (), status=416))
    assert is_transient(aiohttp.ServerDisconnectedError())
    assert is_transient(aiohttp.ClientPayloadError("cut"))


def test_a_cyclic_exception_chain_ends():
    a, b = ValueError("a"), ValueError("b")
    a.__cause__, b.__context__ = b, a
    assert is_transient(a) is False


class Flaky:
    """A call that fails with `errors` in turn, then returns `value`."""

    def __init__(self, errors: list[BaseException], value: object = b"ok"):
        self.errors, self.value, self.calls = list(errors), value, 0

    def __call__(self) -> object:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.value


def test_retrying_backs_off_then_succeeds():
    sleeps: list[float] = []
    retries: list[int] = []
    call = Flaky([ConnectionResetError("1"), TimeoutError("2"), ShortRead("3")])
    policy = RetryPolicy(attempts=4, backoff=0.25, max_backoff=0.6)
    out = retrying(call, "s3://bucket/x", policy, on_retry=lambda: retries.append(1), sleep=sleeps.append)
    assert out == b"ok" and call.calls == 4
    assert sleeps == [0.25, 0.5, 0.6] and len(retries) == 3


def test_retrying_gives_up_with_an_error_naming_url_attempts_and_cause():
    sleeps: list[float] = []
    last = ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")
    call = Flaky([ConnectionResetError("first"), ConnectionResetError("second"), last])
    with pytest.raises(RemoteReadError) as info:
        retrying(call, "s3://bucket/run1/train/x.tar", RetryPolicy(3, 0.05), sleep=sleeps.append)
    err = info.value
    assert call.calls == 3 and sleeps == [0.05, 0.1]
    assert err.url == "s3://bucket/run1/train/x.tar" and err.attempts == 3 and err.cause is last
    assert err.__cause__ is last
    text = str(err)
    assert "s3://bucket/run1/train/x.tar" in text and "3 attempt(s)" in text and "ConnectionRefusedError" in text


def test_retrying_passes_final_errors_through_at_once():
    sleeps: list[float] = []
    missing = FileNotFoundError("s3://bucket/x")
    call = Flaky([missing])
    with pytest.raises(FileNotFoundError) as info:
        retrying(call, "s3://bucket/x", RetryPolicy(5, 1.0), sleep=sleeps.append)
    assert info.value is missing and call.calls == 1 and sleeps == []


def test_a_single_attempt_fails_without_sleeping():
    sleeps: list[float] = []
    with pytest.raises(RemoteReadError, match=r"1 attempt\(s\)"):
        retrying(Flaky([ConnectionResetError("x")]), "s3://b/x", RetryPolicy(1), sleep=sleeps.append)
    assert sleeps == []


def test_remote_read_error_survives_pickling_and_reraise_by_message():
    """Loader workers hand errors to the main process: by pickle, or rebuilt from the message (torch)."""
    err = RemoteReadError("s3://bucket/x.tar", 2, ConnectionRefusedError("refused"))
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is RemoteReadError and str(again) == str(err)
    rebuilt = RemoteReadError(f"Caught RemoteReadError in DataLoader worker process 0.\nOriginal {err}")
    assert "s3://bucket/x.tar" in str(rebuilt) and "2 attempt(s)" in str(rebuilt)


class FakeFS:
    """A filesystem whose cat_file answers from `data`, wrongly sized `short` times first.

    A stand-in (not a real server) because no real server here cuts a response short on demand; the
    real-server tests in test_remote.py cover the outage and no-Range cases end to end."""

    def __init__(self, data: bytes, short: int = 0, extra: bool = False):
        self.data, self.short, self.extra, self.calls = data, short, extra, 0

    def cat_file(self, url: str, start: int = 0, end: int | None = None) -> bytes:
        self.calls += 1
        if self.extra:
            return self.data  # a server that ignores Range: the whole object
        if self.short:
            self.short -= 1
            return self.data[start : end - 1]
        return self.data[start:end]


def _store_with(fs: FakeFS, attempts: int) -> Store:
    store = Store("s3://bucket/run1", retry=RetryPolicy(attempts, 0.0), stats=StorageStats())
    store._fs = (os.getpid(), fs)  # the store's per-process filesystem, replaced by the fake
    return store


def test_read_range_retries_a_short_response_and_counts():
    data = bytes(range(256)) * 4
    fs = FakeFS(data, short=2)
    store = _store_with(fs, attempts=3)
    assert store.read_range("train/x.tar", 100, 50) == data[100:150]
    counts = store.stats.snapshot()
    assert fs.calls == 3 and counts["retries"] == 2 and counts["requests"] == 1 and counts["bytes_fetched"] == 50


def test_read_range_from_a_server_without_ranges_is_a_clear_error():
    fs = FakeFS(bytes(1000), extra=True)
    store = _store_with(fs, attempts=2)
    with pytest.raises(RemoteReadError, match=r"range requests") as info:
        store.read_range("train/x.tar", 10, 20)
    assert "s3://bucket/run1/train/x.tar" in str(info.value) and "after 1 attempt(s)" in str(info.value)
    assert fs.calls == 1  # not retried: another attempt gets the whole object again
    assert store.stats.snapshot()["bytes_fetched"] == 0  # nothing counted as fetched


# ---------------------------------------------------------------------------------------------------- range cache

URL = "s3://bucket/run1/train/wdshards-000000.tar"


def _age(cache: RangeCache, url: str, offset: int, size: int, seconds_ago: float) -> None:
    t = time.time() - seconds_ago
    os.utime(cache.path(url, offset, size), (t, t))


def test_put_then_get(tmp_path):
    cache = RangeCache(tmp_path / "c")
    assert cache.get(URL, 0, 5) is None
    cache.put(URL, 0, 5, b"hello")
    cache.put(URL, 5, 5, b"world")
    cache.put(URL + "2", 0, 5, b"other")
    assert cache.get(URL, 0, 5) == b"hello" and cache.get(URL, 5, 5) == b"world" and cache.get(URL + "2", 0, 5)
    assert cache.get(URL, 0, 4) is None  # another range is another entry
    assert cache.size() == 15
    assert cache.path(URL, 0, 5).parent != cache.path(URL + "2", 0, 5).parent  # one directory per object
    assert not list((tmp_path / "c").rglob(".*.tmp-*"))  # the temporaries were renamed into place


def test_a_wrongly_sized_entry_is_a_miss_and_a_new_put_replaces_it(tmp_path):
    cache = RangeCache(tmp_path)
    cache.put(URL, 0, 5, b"hello")
    path = cache.path(URL, 0, 5)
    for damaged in (b"hel", b"hello!"):  # truncated, or too long, behind the cache's back
        path.write_bytes(damaged)
        assert cache.get(URL, 0, 5) is None
        cache.put(URL, 0, 5, b"hello")  # what the caller does after a miss: fetch, put
        assert cache.get(URL, 0, 5) == b"hello"


def test_a_wrongly_sized_entry_is_dropped_by_the_get_that_finds_it(tmp_path):
    cache = RangeCache(tmp_path)
    cache.put(URL, 0, 5, b"hello")
    path = cache.path(URL, 0, 5)
    path.write_bytes(b"hel")
    assert cache.get(URL, 0, 5) is None
    assert not path.exists()


def test_eviction_keeps_the_cache_within_its_limit_least_recently_used_first(tmp_path):
    cache = RangeCache(tmp_path, limit=None)
    for i in range(5):
        cache.put(URL, i * 100, 100, bytes([i]) * 100)
        _age(cache, URL, i * 100, 100, 100 - i)  # entry 0 oldest ... entry 4 newest
    assert cache.evict() == 0 and cache.size() == 500  # no limit: nothing to do
    assert cache.get(URL, 0, 100) == bytes([0]) * 100  # a hit makes entry 0 the most recently used
    cache.limit = 300
    assert cache.evict() == 200
    assert cache.size() == 300
    kept = [i for i in range(5) if cache.get(URL, i * 100, 100) is not None]
    assert kept == [0, 3, 4]  # 1 and 2 were the least recently used


def test_put_evicts_once_enough_was_added(tmp_path):
    cache = RangeCache(tmp_path, limit=800)  # an eviction pass after every 100 bytes added
    for i in range(20):
        cache.put(URL, i * 100, 100, bytes(100))
        _age(cache, URL, i * 100, 100, 1000 - i)
        assert cache.size() <= 800
    assert cache.size() == 800
    assert cache.get(URL, 1900, 100) is not None and cache.get(URL, 0, 100) is None


def test_a_reader_holding_an_entry_prevents_its_eviction(tmp_path, monkeypatch):
    cache = RangeCache(tmp_path, limit=None)
    cache.put(URL, 0, 100, b"a" * 100)
    cache.put(URL, 100, 100, b"b" * 100)
    _age(cache, URL, 0, 100, 100)  # the held entry is the oldest: first to go, were it not held
    inside, release = threading.Event(), threading.Event()
    real_pread, main = os.pread, threading.current_thread()

    def slow_pread(fd: int, n: int, offset: int) -> bytes:
        if threading.current_thread() is not main:  # only the reader thread blocks, mid-read
            inside.set()
            assert release.wait(10)
        return real_pread(fd, n, offset)

    monkeypatch.setattr(cache_module.os, "pread", slow_pread)
    got: list[bytes | None] = []
    thread = threading.Thread(target=lambda: got.append(cache.get(URL, 0, 100)))
    thread.start()
    try:
        assert inside.wait(10)
        cache.limit = 0
        assert cache.evict() == 100  # only the entry nobody reads
        assert cache.path(URL, 0, 100).exists() and not cache.path(URL, 100, 100).exists()
        cache.drop(URL, 0, 100)  # dropping a held entry waits for its reader too
        assert cache.path(URL, 0, 100).exists()
    finally:
        release.set()
        thread.join(10)
    assert got == [b"a" * 100]  # the reader got its bytes whole
    assert cache.evict() == 100 and cache.size() == 0  # released: now it goes


def test_an_entry_replaced_while_a_reader_opened_it_is_a_miss(tmp_path, monkeypatch):
    """Evicted (or fetched again) between the reader's open and its lock: the reader must not trust its fd."""
    cache = RangeCache(tmp_path)
    cache.put(URL, 0, 5, b"hello")
    real_flock = fcntl.flock

    def flock_after_replacement(fd: int, op: int) -> None:
        if op == fcntl.LOCK_SH:
            path = cache.path(URL, 0, 5)
            path.unlink()
            path.write_bytes(b"HELLO")  # a new file under the same name
        real_flock(fd, op)

    monkeypatch.setattr(cache_module.fcntl, "flock", flock_after_replacement)
    assert cache.get(URL, 0, 5) is None
    monkeypatch.setattr(cache_module.fcntl, "flock", real_flock)
    assert cache.get(URL, 0, 5) == b"HELLO"


def test_one_evictor_at_a_time(tmp_path):
    cache = RangeCache(tmp_path, limit=None)
    cache.put(URL, 0, 100, bytes(100))
    cache.limit = 0
    with open(tmp_path / LOCK_NAME, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process is evicting
        assert cache.evict() == 0 and cache.size() == 100
    assert cache.evict() == 100 and cache.size() == 0


def test_eviction_clears_stale_temporaries_only(tmp_path):
    cache = RangeCache(tmp_path, limit=1 << 20)
    cache.put(URL, 0, 10, bytes(10))
    group = cache.path(URL, 0, 10).parent
    stale, fresh = group / ".20-10.tmp-99999", group / ".30-10.tmp-99998"
    stale.write_bytes(bytes(10))
    fresh.write_bytes(bytes(10))
    old = time.time() - STALE_TEMPORARY_SECONDS - 60
    os.utime(stale, (old, old))
    assert cache.size() == 10  # temporaries are not entries
    cache.evict()
    assert not stale.exists() and fresh.exists() and cache.get(URL, 0, 10) == bytes(10)


def test_a_negative_limit_is_refused(tmp_path):
    with pytest.raises(ValueError, match="non-negative"):
        RangeCache(tmp_path, limit=-1)


# ---------------------------------------------------------------------------------------------------- counters


def _child_adds(stats: StorageStats) -> None:
    stats.add(bytes_fetched=1000, requests=3)
    stats.add(cache_hits=2, retries=1, shards_skipped=1, throttled=1)


def test_counts_from_a_forked_process_reach_the_parent():
    context = mp.get_context("fork")
    stats = StorageStats(context)
    stats.add(requests=1, cache_misses=4)
    before = stats.snapshot()
    children = [context.Process(target=_child_adds, args=(stats,)) for _ in range(2)]
    for child in children:
        child.start()
    for child in children:
        child.join(30)
        assert child.exitcode == 0
    now = stats.snapshot()
    assert list(now) == list(FIELDS)
    assert now == {
        "bytes_fetched": 2000,
        "requests": 7,
        "cache_hits": 4,
        "cache_misses": 4,
        "retries": 2,
        "shards_skipped": 2,
        "whole_shards": 0,
        "throttled": 2,
    }
    assert StorageStats.since(now, before) == {
        "bytes_fetched": 2000,
        "requests": 6,
        "cache_hits": 4,
        "cache_misses": 0,
        "retries": 2,
        "shards_skipped": 2,
        "whole_shards": 0,
        "throttled": 2,
    }
    line = StorageStats.describe(StorageStats.since(now, before))
    assert "6 request(s)" in line and "4 hit(s)" in line and "2 retries" in line and "2 shard(s) skipped" in line
    assert "2 throttled" in line


def test_an_unknown_counter_is_an_error():
    with pytest.raises(ValueError):
        StorageStats().add(nonsense=1)


# ---------------------------------------------------------------------------------------------------- whole objects


def test_a_whole_object_serves_its_ranges_and_counts_against_the_limit(tmp_path):
    data = bytes(range(256)) * 40  # 10,240 bytes
    cache = RangeCache(tmp_path, limit=25_000)
    assert cache.read_whole(URL, 10, 20) is None
    cache.put_whole(URL, data)
    assert cache.read_whole(URL, 10, 20) == data[10:30]
    assert cache.read_whole(URL, len(data) - 5, 10) is None  # past its end: a miss, and the entry is dropped
    assert not cache.whole_path(URL).exists()
    for n in range(3):  # three objects of 10,240 bytes under a 25,000-byte limit: the oldest goes
        cache.put_whole(f"{URL}.{n}", data)
        os.utime(cache.whole_path(f"{URL}.{n}"), (time.time() - 100 + n, time.time() - 100 + n))
    cache.evict()
    assert cache.size() <= 25_000
    assert [cache.read_whole(f"{URL}.{n}", 0, 4) is not None for n in range(3)] == [False, True, True]


def test_a_whole_object_larger_than_the_limit_is_refused_naming_it(tmp_path):
    cache = RangeCache(tmp_path, limit=1000)
    with pytest.raises(CacheTooSmall, match=rf"{URL} is 1001 bytes, more than cache_limit \(1000 bytes\)"):
        cache.put_whole(URL, bytes(1001))
    assert cache.size() == 0


def test_fetching_is_one_holder_at_a_time(tmp_path):
    cache = RangeCache(tmp_path)
    inside, overlaps = [0], []

    def hold() -> None:
        with cache.fetching(URL):
            inside[0] += 1
            overlaps.append(inside[0])
            time.sleep(0.02)
            inside[0] -= 1

    threads = [threading.Thread(target=hold) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert overlaps == [1, 1, 1, 1]


def test_a_local_listing_gives_each_files_size_and_leaves_out_folders(tmp_path, monkeypatch):
    """Names in listing order with their sizes; a folder inside is not a file; a missing folder lists
    nothing; the same answer where the platform has no ``dir_fd`` for `os.stat`."""
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name, size in (("a.tar", 3), ("b.tar", 0), ("c.npy", 70_000)):
        (tmp_path / "d" / name).write_bytes(b"x" * size)
    (tmp_path / "d" / "link.tar").symlink_to(tmp_path / "d" / "a.tar")  # followed, as a listing's stat does
    store = Store(str(tmp_path))
    names, sizes = store.listing("d")
    expected = {"a.tar": 3, "b.tar": 0, "c.npy": 70_000, "link.tar": 3}
    assert dict(zip(names, sizes)) == expected and len(names) == 4
    assert names == [e.name for e in os.scandir(tmp_path / "d") if e.is_file()]
    assert store.listing("missing") == ([], []) and store.sizes("d") == expected
    monkeypatch.setattr(os, "supports_dir_fd", set())
    assert store.listing("d") == (names, sizes)
