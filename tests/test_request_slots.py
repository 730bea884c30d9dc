"""Polite object-store traffic, in units: the bound on requests in flight (`request_slots`), shared by
processes through a directory; jittered waits after throttling answers (`retry`); one read-ahead pool per
process (`shards.read_ahead_pool`). The end-to-end test against a throttling server is in test_remote.py."""

from __future__ import annotations

import contextlib
import errno
import itertools
import multiprocessing as mp
import os
import pickle
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from bionemo_wds.errors import OptionError
from bionemo_wds.storage import shards as shards_module
from bionemo_wds.storage.request_slots import (
    DEFAULT_MAX_REQUESTS,
    ENV_MAX_REQUESTS,
    SLOTS_DIR,
    RequestSlots,
    max_requests,
)
from bionemo_wds.storage.retry import RemoteReadError, RetryPolicy, is_throttled, retrying, timing_random
from bionemo_wds.storage.shards import PARALLEL, RemoteShards, read_ahead_pool
from bionemo_wds.storage.stats import StorageStats
from bionemo_wds.storage.store import Store

FORK = mp.get_context("fork")


# ---------------------------------------------------------------------------------------------------- throttling


class Answer(Exception):
    """An HTTP answer as aiohttp raises it (`status`), for classification."""

    def __init__(self, status: int):
        super().__init__(f"HTTP {status}")
        self.status = status


def _client_error(code: str, status: int) -> BaseException:
    botocore_exceptions = pytest.importorskip("botocore.exceptions")
    response = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return botocore_exceptions.ClientError(response, "GetObject")


def _caused(exc: BaseException, cause: BaseException) -> BaseException:
    exc.__cause__ = cause
    return exc


@pytest.mark.parametrize(
    "make_exc, throttled",
    [
        (lambda: Answer(503), True),
        (lambda: Answer(429), True),
        (lambda: Answer(500), False),
        (lambda: Answer(404), False),
        (lambda: _client_error("SlowDown", 503), True),
        (lambda: _caused(OSError(errno.EBUSY, "busy"), _client_error("SlowDown", 503)), True),  # as s3fs raises it
        (lambda: _client_error("RequestLimitExceeded", 400), True),
        (lambda: _client_error("InternalError", 500), False),
        (lambda: ConnectionResetError("reset"), False),
        (lambda: OSError(errno.ECONNREFUSED, "refused"), False),
    ],
)
def test_throttling_answers_are_told_from_other_failures(make_exc, throttled):
    assert is_throttled(make_exc()) is throttled


def test_jittered_waits_are_bounded_varied_and_capped():
    policy = RetryPolicy(attempts=12, backoff=0.1, max_backoff=2.0)
    rng = random.Random(1)
    chains = []
    for _ in range(200):
        waits, previous = [], None
        for _ in range(10):
            previous = policy.throttled_wait(previous, rng)
            waits.append(previous)
        chains.append(waits)
    base = policy.throttle_base
    assert base == 0.2  # twice the backoff of other failures
    for waits in chains:
        assert base <= waits[0] <= 2 * base
        assert all(base <= w <= policy.max_backoff for w in waits)
        assert all(later <= max(3 * earlier, base) for earlier, later in itertools.pairwise(waits))
    firsts = [w[0] for w in chains]
    assert len(set(firsts)) == len(firsts)  # the crowd does not come back together
    assert any(w[-1] == policy.max_backoff for w in chains)  # long chains reach the cap and stay under it
    assert max(w for waits in chains for w in waits) == policy.max_backoff
    assert RetryPolicy(backoff=0.1, throttle_backoff=1.5, max_backoff=1.0).throttled_wait(None, rng) == 1.0
    with pytest.raises(OptionError, match="throttle_backoff"):
        RetryPolicy(throttle_backoff=-1)


def test_retrying_jitters_after_throttling_and_doubles_after_other_failures():
    errors = [Answer(503), ConnectionResetError("cut"), Answer(429), Answer(503)]
    calls, sleeps, retries, throttled = [], [], [], []

    def call() -> bytes:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return b"ok"

    policy = RetryPolicy(attempts=5, backoff=0.05, max_backoff=10.0)
    out = retrying(call, "s3://b/x", policy, lambda: retries.append(1), sleeps.append, lambda: throttled.append(1))
    assert out == b"ok" and len(calls) == 5 and len(retries) == 4 and len(throttled) == 3
    assert sleeps[1] == 0.1  # the refused connection: the plain doubling schedule (0.05, 0.1, ...)
    jittered = [sleeps[0], sleeps[2], sleeps[3]]
    assert all(w >= policy.throttle_base for w in jittered)
    assert sleeps[0] <= 2 * policy.throttle_base and sleeps[3] <= 3 * sleeps[2]


def test_the_last_throttling_answer_is_counted_and_named():
    throttled: list[int] = []

    def slow_down() -> bytes:
        raise Answer(503)

    said = r"s3://b/x: read failed after 2 attempt\(s\); last error Answer: HTTP 503"
    with pytest.raises(RemoteReadError, match=said):
        retrying(slow_down, "s3://b/x", RetryPolicy(2, 0.0), None, lambda _: None, lambda: throttled.append(1))
    assert len(throttled) == 2


def _first_draw(conn) -> None:
    conn.send(timing_random().random())
    conn.close()


def test_forked_processes_draw_different_waits():
    timing_random()  # made in the parent before the fork
    draws = []
    for _ in range(2):
        ours, theirs = FORK.Pipe()
        child = FORK.Process(target=_first_draw, args=(theirs,))
        child.start()
        draws.append(ours.recv())
        child.join(30)
    draws.append(timing_random().random())
    assert len(set(draws)) == 3


# ---------------------------------------------------------------------------------------------------- the bound


def test_the_bound_comes_from_the_option_then_the_environment(monkeypatch):
    monkeypatch.delenv(ENV_MAX_REQUESTS, raising=False)
    assert max_requests() == DEFAULT_MAX_REQUESTS == 64
    monkeypatch.setenv(ENV_MAX_REQUESTS, "5")
    assert max_requests() == 5 and RequestSlots().limit == 5
    assert max_requests(7) == 7  # the option wins
    monkeypatch.setenv(ENV_MAX_REQUESTS, "many")
    with pytest.raises(OptionError, match=rf"{ENV_MAX_REQUESTS} must be a whole number.*'many'"):
        max_requests()
    monkeypatch.setenv(ENV_MAX_REQUESTS, "0")
    with pytest.raises(OptionError, match=rf"{ENV_MAX_REQUESTS} must be at least 1"):
        max_requests()
    with pytest.raises(OptionError, match="max_requests must be at least 1"):
        RequestSlots(None, 0)


def _hammer(slots: RequestSlots, threads: int, rounds: int, counter, peak, hold: float, start=None) -> None:
    """Threads that each take a slot `rounds` times and count the holders meanwhile (all starting
    together at `start`, a barrier of every thread of every process, when given)."""

    def work() -> None:
        if start is not None:
            start.wait(120)
        for _ in range(rounds):
            with slots.slot():
                with counter.get_lock():
                    counter.value += 1
                    with peak.get_lock():
                        peak.value = max(peak.value, counter.value)
                time.sleep(hold)  # a request in flight
                with counter.get_lock():
                    counter.value -= 1

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()


def _run_hammers(directories: list[Path | None], limit: int) -> int:
    counter, peak = FORK.Value("i", 0), FORK.Value("i", 0)
    start = FORK.Barrier(3 * len(directories))  # every thread starts at once, however slow the forks
    procs = [
        FORK.Process(target=_hammer, args=(RequestSlots(d, limit), 3, 6, counter, peak, 0.03, start))
        for d in directories
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    assert counter.value == 0
    return int(peak.value)


def test_processes_sharing_a_directory_never_hold_more_than_the_bound(tmp_path):
    """4 processes x 3 threads take slots of one directory: never more than 3 holders at once (and more
    than one: it is a bound, not a lock). Each process with a directory of its own is not bounded
    together: the control that shows the count sees a crowd when there is one."""
    peak = _run_hammers([tmp_path] * 4, limit=3)
    assert 2 <= peak <= 3
    assert sorted(p.name for p in (tmp_path / SLOTS_DIR).iterdir()) == ["slot-0", "slot-1", "slot-2"]
    apart = _run_hammers([tmp_path / f"own{i}" for i in range(4)], limit=3)
    assert apart > 3


def test_threads_of_one_process_without_a_directory_share_the_process_bound():
    counter, peak = FORK.Value("i", 0), FORK.Value("i", 0)
    _hammer(RequestSlots(None, 2), 6, 4, counter, peak, 0.005)
    assert 1 <= peak.value <= 2
    assert RequestSlots(None, 2).in_use() == 0


def _hold_all(directory: Path, limit: int, conn) -> None:
    with contextlib.ExitStack() as stack:
        slots = RequestSlots(directory, limit)
        for _ in range(limit):
            stack.enter_context(slots.slot())
        conn.send("holding")
        time.sleep(600)


def test_a_killed_process_gives_its_slots_back(tmp_path):
    slots = RequestSlots(tmp_path, 3)
    ours, theirs = FORK.Pipe()
    child = FORK.Process(target=_hold_all, args=(tmp_path, 3, theirs))
    child.start()
    try:
        assert ours.recv() == "holding"
        assert slots.in_use() == 3
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)
    assert slots.in_use() == 0
    with slots.slot():
        assert slots.in_use() == 1


def _sleep_in_child(conn) -> None:
    conn.send("forked")
    time.sleep(600)


def test_a_slot_freed_after_a_fork_is_free_though_the_child_holds_a_copy_of_its_descriptor(tmp_path):
    """Loader workers are forked while read-ahead threads hold slots: the slot is free once the parent's
    request ends, not when the worker ends."""
    slots = RequestSlots(tmp_path, 2)
    ours, theirs = FORK.Pipe()
    with slots.slot():
        child = FORK.Process(target=_sleep_in_child, args=(theirs,))
        child.start()
        assert ours.recv() == "forked"
    try:
        assert slots.in_use() == 0
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.join(30)


def test_slots_pickle_without_descriptors_and_a_removed_slot_file_is_made_again(tmp_path):
    slots = pickle.loads(pickle.dumps(RequestSlots(tmp_path, 2)))
    with slots.slot():
        pass
    for path in (tmp_path / SLOTS_DIR).iterdir():
        path.unlink()
    with slots.slot():
        assert slots.in_use() == 1


# ---------------------------------------------------------------------------------------------------- the store


class SlotWatchingFS:
    """A filesystem whose cat_file answers from `data` and notes how many slots were held meanwhile,
    failing with 503 `throttle` times first."""

    def __init__(self, data: bytes, slots: RequestSlots, throttle: int = 0):
        self.data, self.slots, self.throttle, self.held = data, slots, throttle, []

    def cat_file(self, url: str, start: int = 0, end: int | None = None) -> bytes:
        self.held.append(self.slots.in_use())
        if self.throttle:
            self.throttle -= 1
            raise Answer(503)
        return self.data[start:end]


def test_each_request_of_a_store_holds_one_slot_and_throttling_is_counted(tmp_path):
    slots = RequestSlots(tmp_path, 4)
    retry = RetryPolicy(4, 0.0, throttle_backoff=0.0)
    store = Store("s3://bucket/run1", retry=retry, stats=StorageStats(), slots=slots)
    fs = SlotWatchingFS(bytes(range(256)), slots, throttle=2)
    store._fs = (os.getpid(), fs)  # the store's per-process filesystem, replaced by the stand-in
    assert store.read_range("train/x.tar", 10, 20) == bytes(range(10, 30))
    assert fs.held == [1, 1, 1]  # each attempt in a slot of its own
    assert slots.in_use() == 0
    counts = store.stats.snapshot()
    assert counts["throttled"] == 2 and counts["retries"] == 2 and counts["requests"] == 1


# ---------------------------------------------------------------------------------------------------- read-ahead


class CountingFS:
    def __init__(self, data: bytes):
        self.data = data

    def cat_file(self, url: str, start: int = 0, end: int | None = None) -> bytes:
        time.sleep(0.002)  # a request in flight, so threads overlap
        return self.data[start:end]


def _remote(n: int) -> RemoteShards:
    store = Store(f"s3://bucket/run{n}", retry=RetryPolicy(1, 0.0))
    store._fs = (os.getpid(), CountingFS(bytes(4096)))
    return RemoteShards(store, [f"s3://bucket/run{n}/train/x.tar"])


def _fetch_threads() -> int:
    return sum(t.name.startswith("bionemo-wds-fetch") for t in threading.enumerate())


def test_every_remote_dataset_of_a_process_shares_one_read_ahead_pool():
    readers = [_remote(n) for n in range(40)]  # a blend of 40 remote datasets
    for reader in readers:
        reader.prefetch([(0, 16 * i, 16) for i in range(20)])
    for n, reader in enumerate(readers):
        assert [reader.read(0, 16 * i, 16) for i in range(20)] == [bytes(16)] * 20, n
    assert readers[0]._executor() is readers[-1]._executor() is read_ahead_pool()
    assert 0 < _fetch_threads() <= PARALLEL
    state = pickle.loads(pickle.dumps(readers[0])).__dict__
    assert not state["_ahead"] and not any(isinstance(v, type(read_ahead_pool())) for v in state.values())
    for reader in readers:
        reader.close()
    assert read_ahead_pool() is shards_module.read_ahead_pool()  # closing a reader keeps the process's pool


def _fetch_in_child(reader: RemoteShards, conn) -> None:
    reader.store._fs = (os.getpid(), CountingFS(bytes(4096)))  # the stand-in, in this process too
    reader.prefetch([(0, 0, 16)])  # the parent's pool has no threads here: this must use a new one
    conn.send(reader.read(0, 0, 16))


def test_a_forked_process_makes_its_own_pool():
    reader = _remote(99)
    reader.prefetch([(0, 0, 16)])
    assert reader.read(0, 0, 16) == bytes(16)
    ours, theirs = FORK.Pipe()
    child = FORK.Process(target=_fetch_in_child, args=(reader, theirs))
    child.start()
    try:
        assert ours.poll(60) and ours.recv() == bytes(16)
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0


def test_a_bad_max_requests_is_named_when_the_loader_is_made(tmp_path):
    from bionemo_wds.lightning.datamodule import GenomicWebDataModule
    from bionemo_wds.load.dataset import GenomicDataset

    said = r"^max_requests must be at least 1 \(requests in flight at once\), got 0$"
    for make in (GenomicWebDataModule, GenomicDataset):
        with pytest.raises(OptionError, match=said):
            make(str(tmp_path / "nowhere"), max_requests=0)


def test_the_range_cache_never_evicts_the_slot_files(tmp_path):
    from bionemo_wds.storage.cache import RangeCache

    slots = RequestSlots(tmp_path, 2)
    with slots.slot(), slots.slot():  # both slot files made
        pass
    cache = RangeCache(tmp_path, limit=100)
    for n in range(10):
        cache.put("s3://b/x.tar", n * 50, 50, bytes(50))
    assert cache.evict() >= 0 and cache.size() <= 100
    assert sorted(p.name for p in (tmp_path / SLOTS_DIR).iterdir()) == ["slot-0", "slot-1"]
