"""`prepare --executor dask`: the same bytes as the local executor from a real `LocalCluster`
(2 single-threaded worker processes on 127.0.0.1), to disk and to a real S3 endpoint; a worker
killed mid-run and a cluster lost mid-run still end in the complete, verified output."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import servers
from conftest import KLEBSIELLA, tree_bytes
from servers import S3Server

from bionemo_wds.cli import main
from bionemo_wds.errors import BadInputError
from bionemo_wds.format import read_manifest
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.executors import dask_client
from bionemo_wds.prepare.executors.dask_client import local_cluster
from bionemo_wds.prepare.report import verify

pytestmark = pytest.mark.slow  # real Dask LocalClusters, end to end

distributed = pytest.importorskip("distributed")
s3_server = servers.s3_server

#: 1 kb windows of the Klebsiella assembly in many small shards: ~45 tasks
SMALL = dict(seq_length=1024, stride=1000, samples_per_shard=128, windows_per_record=16, progress=False)
#: slow enough per shard (zstd at a high level) that a kill lands while tasks are running
SLOW = dict(seq_length=1024, stride=1000, samples_per_shard=64, progress=False)
SLOW.update(compress="zstd", compress_level=19)


@pytest.fixture(scope="module")
def cluster():
    """A LocalCluster of 2 worker processes with one thread each, as the issue names it."""
    with local_cluster(2) as local:
        yield local


@pytest.fixture(scope="module")
def local_kleb(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("local") / "kleb"
    prepare([KLEBSIELLA], out, PrepareOptions(**SMALL, workers=2))
    return out


def test_a_local_cluster_writes_the_bytes_of_the_local_executor(tmp_path, cluster, local_kleb):
    out = tmp_path / "dask"
    result = prepare([KLEBSIELLA], out, PrepareOptions(**SMALL, executor="dask", scheduler=cluster.scheduler_address))
    assert result.status == "written" and result.shards_written == len(
        [sh for s in read_manifest(local_kleb).splits.values() for sh in s.shards]
    )
    assert result.shards_written > 20
    assert tree_bytes(out) == tree_bytes(local_kleb)
    assert verify(out, progress=False).ok


def test_our_local_clusters_run_without_the_dashboards_profiler_and_fast_ticks(cluster):
    """`LOCAL_CLUSTER_CONFIG` reaches every worker process (through its nanny), and the settings in
    force outside the cluster are left as they were (the scheduler, in this process, read them as
    it started)."""
    import dask
    from distributed import Client

    from bionemo_wds.prepare.executors.dask_client import LOCAL_CLUSTER_CONFIG

    def settings() -> list:
        import dask

        return [dask.config.get(key) for key in sorted(LOCAL_CLUSTER_CONFIG)]

    wanted = [LOCAL_CLUSTER_CONFIG[key] for key in sorted(LOCAL_CLUSTER_CONFIG)]
    with Client(cluster.scheduler_address) as client:
        assert list(client.run(settings).values()) == [wanted, wanted]
    assert dask.config.get("distributed.worker.profile.enabled") is True  # Dask's default, here


def test_our_local_clusters_workers_drop_only_the_heartbeat_loss_line(cluster):
    """Each worker of a cluster we start filters the line a heartbeat logs when the scheduler has
    gone (a shutdown after a failed run raced it into the CLI's one-line error) and nothing else."""
    import logging

    from distributed import Client

    def kept(message: str) -> bool:
        log = logging.getLogger("distributed.worker")
        return bool(log.filter(log.makeRecord(log.name, logging.ERROR, "worker.py", 1, message, (), None)))

    with Client(cluster.scheduler_address) as client:
        assert list(client.run(kept, "Failed to communicate with scheduler during heartbeat.").values()) == [
            False,
            False,
        ]
        assert list(client.run(kept, "Unexpected exception during heartbeat. Closing worker.").values()) == [
            True,
            True,
        ]
    assert kept("Failed to communicate with scheduler during heartbeat.")  # this process's log is as it was


def test_the_cli_starts_a_local_cluster_when_no_scheduler_is_given(tmp_path, local_kleb):
    out = tmp_path / "cli"
    argv = ["prepare", str(KLEBSIELLA), "--out", str(out), "--quiet", "--executor", "dask", "--workers", "2"]
    opts = ["--seq-length", "1024", "--stride", "1000", "--samples-per-shard", "128", "--windows-per-record", "16"]
    assert main([*argv, *opts]) == 0
    assert tree_bytes(out) == tree_bytes(local_kleb)


def test_one_worker_and_two_workers_give_the_same_bytes(tmp_path, local_kleb):
    with local_cluster(1) as one:
        out = tmp_path / "one"
        prepare([KLEBSIELLA], out, PrepareOptions(**SMALL, executor="dask", scheduler=one.scheduler_address))
    assert tree_bytes(out) == tree_bytes(local_kleb)


def test_a_worker_with_two_threads_writes_the_same_bytes(tmp_path, local_kleb):
    """`dask worker` runs a task per core in threads by default: each thread reads through its own
    source reader, so concurrent tasks in one process write what the pool writes."""
    with local_cluster(1, threads=2) as threads:
        out = tmp_path / "threads"
        prepare([KLEBSIELLA], out, PrepareOptions(**SMALL, executor="dask", scheduler=threads.scheduler_address))
    assert tree_bytes(out) == tree_bytes(local_kleb)


def test_into_a_bucket_from_the_cluster(tmp_path, local_kleb, s3_server: S3Server):
    """The workers write the shards straight into the bucket (the S3 settings reach them through the
    environment, as on a real cluster); the objects are the local files, byte for byte."""
    s3_server.make_bucket("bucket")
    with local_cluster(2) as local:  # started after the fixture set the endpoint's environment
        result = prepare(
            [KLEBSIELLA],
            "s3://bucket/kleb",
            PrepareOptions(**SMALL, executor="dask", scheduler=local.scheduler_address),
        )
    assert result.status == "written"
    client = s3_server.client()
    listing = client.list_objects_v2(Bucket="bucket", Prefix="kleb/").get("Contents", [])
    objects = {
        o["Key"][len("kleb/") :]: client.get_object(Bucket="bucket", Key=o["Key"])["Body"].read() for o in listing
    }
    assert objects == {k: v for k, v in tree_bytes(local_kleb).items()}


def _worker_pids(client) -> dict[str, int]:
    return client.run(os.getpid)


def _wait_for_shards(out: Path, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while len(list(out.rglob("*.tar"))) < n:
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {n} shards under {out} after {timeout} s")
        time.sleep(0.01)


@pytest.fixture(scope="module")
def slow_local(tmp_path_factory) -> Path:
    """The `SLOW` dataset from the local pool: what every interrupted Dask run must end in."""
    out = tmp_path_factory.mktemp("slow") / "local"
    prepare([KLEBSIELLA], out, PrepareOptions(**SLOW, workers=2))
    return out


@pytest.mark.slow
def test_a_worker_killed_mid_run_still_ends_in_the_complete_verified_output(tmp_path, cluster, slow_local):
    """SIGKILL one of the two workers of the module's cluster once a few shards exist: the nanny
    starts a new one, the scheduler runs the dead worker's tasks again, and the output equals the
    local executor's."""
    local = slow_local
    out = tmp_path / "dask"
    with distributed.Client(cluster) as client:
        victim = next(iter(_worker_pids(client).values()))
        outcome: dict = {}

        def run() -> None:
            try:
                outcome["result"] = prepare(
                    [KLEBSIELLA], out, PrepareOptions(**SLOW, executor="dask", scheduler=cluster.scheduler_address)
                )
            except BaseException as exc:  # reported below
                outcome["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        _wait_for_shards(out, 3)
        assert not (out / "manifest.json").exists(), "the run finished before the kill: make the shards slower"
        os.kill(victim, signal.SIGKILL)
        thread.join(timeout=600)
        assert "error" not in outcome, outcome.get("error")
        assert victim not in _worker_pids(client).values()  # the worker really died (and was replaced)
    assert outcome["result"].status == "written"
    assert tree_bytes(out) == tree_bytes(local)
    assert verify(out, progress=False).ok


@pytest.mark.slow
def test_a_rerun_after_a_lost_cluster_writes_only_the_missing_shards(tmp_path, slow_local):
    local = slow_local
    out = tmp_path / "dask"
    cluster = local_cluster(2)
    outcome: dict = {}

    def run() -> None:
        try:
            prepare([KLEBSIELLA], out, PrepareOptions(**SLOW, executor="dask", scheduler=cluster.scheduler_address))
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    _wait_for_shards(out, 3)
    cluster.close()  # the whole cluster is lost: scheduler and workers
    thread.join(timeout=600)
    assert "error" in outcome, "the run finished before the cluster was lost"
    assert isinstance(outcome["error"], RuntimeError)
    assert "lost the Dask cluster" in str(outcome["error"]) and "run prepare again" in str(outcome["error"])
    assert not (out / "manifest.json").exists()
    done = len(list(out.rglob("*.tar")))
    again = prepare([KLEBSIELLA], out, PrepareOptions(**SLOW, executor="dask", workers=2))
    assert again.status == "resumed" and again.shards_reused == done
    assert again.shards_written + again.shards_reused == len(
        [sh for s in read_manifest(local).splits.values() for sh in s.shards]
    )
    assert tree_bytes(out) == tree_bytes(local)
    assert verify(out, progress=False).ok


def test_an_unreachable_scheduler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(dask_client, "CONNECT_TIMEOUT", 2)
    with pytest.raises(BadInputError, match=r"--scheduler tcp://127\.0\.0\.1:9: cannot reach the Dask scheduler"):
        prepare([KLEBSIELLA], tmp_path / "o", PrepareOptions(**SMALL, executor="dask", scheduler="tcp://127.0.0.1:9"))


def test_a_scheduler_without_the_dask_executor_is_refused(tmp_path):
    with pytest.raises(BadInputError, match=r"--scheduler tcp://127\.0\.0\.1:8786 needs --executor dask"):
        prepare([KLEBSIELLA], tmp_path / "o", PrepareOptions(**SMALL, scheduler="tcp://127.0.0.1:8786"))
    assert not (tmp_path / "o").exists()


def test_without_dask_installed_the_executor_says_what_to_install(tmp_path, monkeypatch):
    """(dask is installed here: its absence is simulated by hiding the module from `import`.)"""
    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(BadInputError, match=r"pip install 'bionemo-wds\[dask\]'"):
        prepare([KLEBSIELLA], tmp_path / "o", PrepareOptions(**SMALL, executor="dask"))
    assert not (tmp_path / "o").exists()  # refused before anything was written
