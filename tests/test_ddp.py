"""GenomicWebDataModule under real data parallelism: processes on gloo (CPU), Lightning DDP, kill and resume.

Every test starts Python processes that run `SCRIPT` (written to the test's tmp_path): they join a
``torch.distributed`` group over gloo on 127.0.0.1, or run a Lightning Trainer, and write what each
rank read to JSON files, which the test compares.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from conftest import KLEBSIELLA, LAMBDA
from forked_runs import ForkedRun, Zygote

from bionemo_wds.format import read_manifest
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.prepare import PrepareOptions, prepare

pytestmark = pytest.mark.slow

SEED = 5
#: Seconds one group of processes may take before the test calls it a hang.
TIMEOUT = 240

SCRIPT = r"""
import argparse, json, os, sys, time

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import ModelCheckpoint

from bionemo_wds.lightning.datamodule import GenomicWebDataModule

p = argparse.ArgumentParser()
p.add_argument("mode", choices=["iterate", "group", "ddp_fit", "fit"])
p.add_argument("--root", required=True)
p.add_argument("--out", required=True)
p.add_argument("--seed", type=int, default=0)
p.add_argument("--micro", type=int, default=4)
p.add_argument("--workers", type=int, default=0)
# iterate: one process of a torch.distributed group
p.add_argument("--rank", type=int, default=0)
p.add_argument("--world", type=int, default=1)
p.add_argument("--port", type=int, default=0)
p.add_argument("--dp-size", type=int, default=None)
p.add_argument("--stop-after", type=int, default=None)  # consume this many train batches, save the state
p.add_argument("--state", default=None)  # a saved state to restore before iterating
# fit
p.add_argument("--max-steps", type=int, default=-1)
p.add_argument("--every", type=int, default=0)
p.add_argument("--ckpt-dir", default=None)
p.add_argument("--resume", default=None)
p.add_argument("--hang-after", type=int, default=None)
args = p.parse_args()


def keys(batch):
    return [str(k) for k in batch["keys"]]


def iterate():
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=args.world
    )
    dp = {} if args.dp_size is None else {"dp_rank": args.rank // (args.world // args.dp_size), "dp_size": args.dp_size}
    dm = GenomicWebDataModule(args.root, micro_batch_size=args.micro, num_workers=args.workers, seed=args.seed, **dp)
    dm.setup("fit")
    if args.state:
        with open(args.state) as fh:
            dm.load_state_dict(json.load(fh))
    train_loader = dm.train_dataloader()
    train = []
    for b in train_loader:
        train.append(keys(b))
        if args.stop_after is not None and len(train) == args.stop_after:
            with open(args.out + ".state", "w") as fh:
                json.dump(dm.state_dict(), fh)
            break
    val_batches = list(dm.val_dataloader())
    out = {
        "world": [dm.world.rank, dm.world.size],
        "train_len": len(train_loader),
        "train": train,
        "val": [keys(b) for b in val_batches],
        "val_filler": [[bool(f) for f in b["filler"]] for b in val_batches],
    }
    with open(args.out, "w") as fh:
        json.dump(out, fh)
    dist.barrier()
    dist.destroy_process_group()


class Tiny(L.LightningModule):
    def __init__(self, record=None, hang_after=None):
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.record, self.hang_after = record, hang_after
        self.steps, self.train_keys, self.val_batches = [], [], 0

    def forward(self, batch):
        return self.layer(batch["loss_mask"].sum(1, keepdim=True).float() / 1000).pow(2).mean()

    def training_step(self, batch, idx):
        step = self.trainer.global_step
        self.steps.append(step)
        self.train_keys.append(keys(batch))
        if self.record is not None:
            self.record.write(json.dumps({"step": step, "epoch": self.current_epoch, "keys": keys(batch)}) + "\n")
            self.record.flush()
            if self.hang_after is not None and step >= self.hang_after:
                time.sleep(3600)  # until the test kills the process
        return self(batch)

    def validation_step(self, batch, idx):
        self.val_batches += 1
        self.log("val_loss", self(batch), sync_dist=True, batch_size=len(batch["keys"]))

    def on_train_start(self):
        self.estimated = self.trainer.estimated_stepping_batches

    def on_train_end(self):
        if args.mode != "ddp_fit":
            return
        rank = self.trainer.global_rank
        with open(os.path.join(args.out, f"rank-{rank}.json"), "w") as fh:
            json.dump(
                {
                    "global_step": self.trainer.global_step,
                    "steps": self.steps,
                    "train": self.train_keys,
                    "val_batches": self.val_batches,
                    "estimated": self.estimated,
                    "world": [self.trainer.datamodule.world.rank, self.trainer.datamodule.world.size],
                    "world_size": self.trainer.world_size,
                },
                fh,
            )

    def configure_optimizers(self):
        # a schedule sized from the trainer's estimate: it fails if the loader's length is wrong
        opt = torch.optim.SGD(self.parameters(), lr=0.01)
        total = self.trainer.estimated_stepping_batches
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def quiet(**kw):
    return dict(
        accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False, **kw
    )


def ddp_fit():
    dm = GenomicWebDataModule(args.root, micro_batch_size=args.micro, num_workers=args.workers, seed=args.seed)
    trainer = L.Trainer(**quiet(devices=2, strategy="ddp", max_epochs=2, enable_checkpointing=False))
    trainer.fit(Tiny(), datamodule=dm)


def fit():
    dm = GenomicWebDataModule(args.root, micro_batch_size=args.micro, num_workers=args.workers, seed=args.seed)
    ckpt = ModelCheckpoint(dirpath=args.ckpt_dir, every_n_train_steps=args.every, save_top_k=-1)
    trainer = L.Trainer(
        **quiet(devices=1, max_steps=args.max_steps, callbacks=[ckpt], num_sanity_val_steps=0, limit_val_batches=2)
    )
    with open(args.out, "a") as record:
        trainer.fit(Tiny(record, args.hang_after), datamodule=dm, ckpt_path=args.resume)


def group():
    # `iterate` on ranks 0..world-1, forked from this process once its imports are done
    # (`rank_groups`): rank r writes OUT/rank-r.json and its output to OUT/rank-r.log
    from rank_groups import run_forked_ranks

    out_dir = args.out

    def rank_main(rank):
        log = os.open(os.path.join(out_dir, f"rank-{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(log, 1)
        os.dup2(log, 2)
        args.rank, args.out = rank, os.path.join(out_dir, f"rank-{rank}.json")
        iterate()

    codes = run_forked_ranks(rank_main, args.world)
    print("rank exit codes", codes, flush=True)
    sys.exit(1 if any(codes) else 0)


{"iterate": iterate, "group": group, "ddp_fit": ddp_fit, "fit": fit}[args.mode]()
"""


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ddp") / "lambda_kleb"
    prepare(
        [LAMBDA, KLEBSIELLA],
        out,
        PrepareOptions(seq_length=2048, stride=1900, samples_per_shard=150, progress=False, workers=1),
    )
    return out


@pytest.fixture(scope="module")
def windows(dataset) -> dict[str, list[str]]:
    """Every window key of the train and val splits, read by one process in batches of one."""
    manifest = read_manifest(dataset)
    dm = GenomicWebDataModule(str(dataset), micro_batch_size=1, seed=SEED, dp_rank=0, dp_size=1)
    dm.setup("fit")
    out = {}
    for split, loader in (("train", dm.train_dataloader()), ("val", dm.val_dataloader())):
        keys = [k for b in loader for k in b["keys"]]
        assert len(keys) == len(set(keys)) == manifest.splits[split].n_samples and "" not in keys
        out[split] = keys
    return out


@pytest.fixture(scope="module")
def script(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("script") / "ddp_script.py"
    path.write_text(SCRIPT)
    return path


@pytest.fixture(scope="module")
def group(script, dataset, tmp_path_factory, zygote):
    """Runs a gloo group iterating the loaders (`iterate`), once per layout for the whole module."""
    runs: dict[tuple, list[dict]] = {}

    def run(world: int, workers: int, micro: int = 8, dp_size: int | None = None) -> list[dict]:
        layout = (world, workers, micro, dp_size)
        if layout not in runs:
            runs[layout] = iterate(zygote, script, dataset, tmp_path_factory.mktemp("group"), *layout)
        return runs[layout]

    return run


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env() -> dict[str, str]:
    """The scripts' environment: ``tests/`` on the path (`rank_groups`), output unbuffered."""
    path = os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}


def run_group(procs: list[subprocess.Popen] | list[ForkedRun], logs: list[Path], timeout: float = TIMEOUT) -> None:
    """Wait for every process. A hang (past `timeout`) or a failure of one kills them all (with their
    loader workers: each was started in its own session) and fails the test with their logs."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs):
        failed = any(p.returncode for p in procs if p.returncode is not None)
        if failed or time.monotonic() > deadline:
            for p in procs:
                if p.poll() is None:
                    os.killpg(p.pid, signal.SIGKILL)
                    p.wait()
            if not failed:
                pytest.fail(f"processes hung for {timeout} s:\n" + tails(logs))
            break
        time.sleep(0.2)
    codes = [p.returncode for p in procs]
    if any(codes):
        pytest.fail(f"exit codes {codes}:\n" + tails(logs))


def start(cmd: list[str], log: Path, cwd: Path | None = None, **env_extra: str) -> subprocess.Popen:
    with open(log, "w") as fh:
        return subprocess.Popen(
            cmd, stdout=fh, stderr=subprocess.STDOUT, env={**env(), **env_extra}, cwd=cwd, start_new_session=True
        )


def tails(logs: list[Path]) -> str:
    return "\n".join(f"--- {log} ---\n{log.read_text()[-3000:]}" for log in logs if log.exists())


def iterate(zygote, script, dataset, tmp_path, world, workers, micro, dp_size=None, extra=()) -> list[dict]:
    """Each rank of a gloo group of `world` processes iterates one train and one val pass (the
    script's `group` mode, run by the `zygote`, forks the ranks)."""
    run = tmp_path / f"iterate-w{world}-n{workers}-m{micro}-dp{dp_size}"
    run.mkdir()
    argv = ["group", "--root", str(dataset), "--out", str(run)]
    argv += ["--seed", str(SEED), "--micro", str(micro), "--workers", str(workers)]
    argv += ["--world", str(world), "--port", str(free_port())]
    if dp_size is not None:
        argv += ["--dp-size", str(dp_size)]
    argv += list(extra)
    logs = [run / "group.log", *(run / f"rank-{rank}.log" for rank in range(world))]
    run_group([zygote.run(script, argv, logs[0], cwd=run)], logs)
    return [json.loads((run / f"rank-{rank}.json").read_text()) for rank in range(world)]


def flat(batches: list[list[str]]) -> list[str]:
    return [k for b in batches for k in b]


# --- a torch.distributed group iterating the loaders ----------------------------------------------


@pytest.mark.parametrize(("world", "workers"), [(2, 0), (3, 1), (4, 3)])
def test_ranks_read_disjoint_windows_in_equal_batches(group, windows, world, workers):
    micro = 8
    ranks = group(world, workers, micro)
    assert [r["world"] for r in ranks] == [[rank, world] for rank in range(world)]
    n_train = len(windows["train"])
    steps = n_train // (micro * world)
    # train: the same number of full batches everywhere, no window twice, fewer than a global batch left out
    assert [len(r["train"]) for r in ranks] == [steps] * world
    assert [r["train_len"] for r in ranks] == [steps] * world  # len(loader) is what a pass yields
    assert all(len(b) == micro for r in ranks for b in r["train"])
    read = [k for r in ranks for k in flat(r["train"])]
    twice = [k for k, c in Counter(read).items() if c > 1]
    assert not twice, f"{len(twice)} windows read twice, e.g. {twice[:3]}"
    assert set(read) <= set(windows["train"])
    assert 0 <= n_train - len(read) < micro * world
    # val: every window exactly once over the ranks (filler aside), the same number of batches everywhere
    assert len({len(r["val"]) for r in ranks}) == 1
    for r in ranks:
        for keys, filler in zip(r["val"], r["val_filler"]):
            assert [k == "" for k in keys] == filler
    val = [k for r in ranks for k in flat(r["val"]) if k]
    assert sorted(val) == sorted(windows["val"])
    assert len(ranks[0]["val"]) == -(-len(windows["val"]) // (micro * world))


def test_a_ranks_batches_do_not_depend_on_loader_workers(group):
    without, with_workers = group(2, 0), group(2, 3)
    for rank, (a, b) in enumerate(zip(without, with_workers)):
        assert a["train"] == b["train"], f"rank {rank}: train batches differ between 0 and 3 workers"
        assert a["val"] == b["val"], f"rank {rank}: val batches differ between 0 and 3 workers"
    assert without[0]["train"] != without[1]["train"]


def test_ranks_of_one_model_parallel_group_read_identical_batches(group, windows):
    """4 processes, dp_size 2 (dp_rank = rank // 2): a group's ranks read the same, the groups disjoint."""
    ranks = group(4, 1, dp_size=2)
    assert [r["world"] for r in ranks] == [[0, 2], [0, 2], [1, 2], [1, 2]]
    assert ranks[0]["train"] == ranks[1]["train"] and ranks[2]["train"] == ranks[3]["train"]
    assert ranks[0]["val"] == ranks[1]["val"] and ranks[2]["val"] == ranks[3]["val"]
    assert len(ranks[0]["train"]) == len(ranks[2]["train"]) == len(windows["train"]) // 16
    assert not set(flat(ranks[0]["train"])) & set(flat(ranks[2]["train"]))
    val = [k for r in (ranks[0], ranks[2]) for k in flat(r["val"]) if k]
    assert sorted(val) == sorted(windows["val"])


# --- Lightning DDP -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def one_shard_per_split(tmp_path_factory) -> Path:
    """Shards larger than any split: every split of these small genomes is one shard (fewer than ranks)."""
    out = tmp_path_factory.mktemp("ddp_one") / "lambda_kleb"
    options = PrepareOptions(seq_length=2048, stride=1900, samples_per_shard=100_000, progress=False, workers=1)
    prepare([LAMBDA, KLEBSIELLA], out, options)
    assert all(len(info.shards) == 1 for info in read_manifest(out).splits.values())
    return out


def test_lightning_ddp_validates_on_both_ranks_with_one_val_shard(script, one_shard_per_split, tmp_path):
    """2 ranks, 1 val shard, sync_dist logging: today's hang. Both ranks validate the same number of
    batches, train the same number of steps, and a OneCycleLR from estimated_stepping_batches ends."""
    out = tmp_path / "ddp_one"
    out.mkdir()
    log = out / "fit.log"
    cmd = [sys.executable, str(script), "ddp_fit", "--root", str(one_shard_per_split), "--out", str(out)]
    cmd += ["--seed", str(SEED), "--micro", "4", "--workers", "0"]
    proc = start(cmd, log, cwd=out, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    run_group([proc], [log])
    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(2)]
    per_epoch = read_manifest(one_shard_per_split).splits["train"].n_samples // (4 * 2)
    assert [r["global_step"] for r in ranks] == [2 * per_epoch] * 2
    assert [r["estimated"] for r in ranks] == [2 * per_epoch] * 2
    assert ranks[0]["val_batches"] == ranks[1]["val_batches"] > 0


def test_lightning_ddp_fit_finishes_with_equal_steps_on_every_rank(script, dataset, windows, tmp_path):
    out = tmp_path / "ddp_fit"
    out.mkdir()
    log = out / "fit.log"
    cmd = [sys.executable, str(script), "ddp_fit", "--root", str(dataset), "--out", str(out)]
    cmd += ["--seed", str(SEED), "--micro", "4", "--workers", "1"]
    # Lightning starts the second rank itself (in this session: a hang kills both)
    proc = start(cmd, log, cwd=out, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    run_group([proc], [log])
    ranks = [json.loads((out / f"rank-{r}.json").read_text()) for r in range(2)]
    per_epoch = len(windows["train"]) // (4 * 2)
    assert [r["world"] for r in ranks] == [[0, 2], [1, 2]] and [r["world_size"] for r in ranks] == [2, 2]
    assert [r["global_step"] for r in ranks] == [2 * per_epoch] * 2
    assert ranks[0]["steps"] == ranks[1]["steps"] == list(range(2 * per_epoch))
    assert [r["estimated"] for r in ranks] == [2 * per_epoch] * 2
    assert ranks[0]["val_batches"] == ranks[1]["val_batches"] > 0
    for epoch in range(2):  # within an epoch the two ranks read disjoint windows
        a, b = (flat(r["train"][epoch * per_epoch : (epoch + 1) * per_epoch]) for r in ranks)
        assert len(set(a) | set(b)) == len(a) + len(b) == 8 * per_epoch
    assert ranks[0]["train"][:per_epoch] != ranks[0]["train"][per_epoch:]  # a new epoch, a new order


# --- kill and resume -----------------------------------------------------------------------------


def read_record(path: Path) -> dict[int, list[str]]:
    """step -> keys of the training batches a fit recorded (complete lines only)."""
    out = {}
    for line in path.read_text().splitlines():
        if line.endswith("}"):
            entry = json.loads(line)
            out[entry["step"]] = entry["keys"]
    return out


def fit_argv(dataset, run: Path, workers: int, **extra) -> list[str]:
    argv = ["fit", "--root", str(dataset), "--out", str(run / "record.jsonl")]
    argv += ["--seed", str(SEED), "--micro", str(MICRO_RESUME), "--workers", str(workers)]
    argv += ["--max-steps", str(MAX_STEPS), "--every", str(EVERY), "--ckpt-dir", str(run / "ckpt")]
    for name, value in extra.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv


#: 2413 train windows in batches of 128: 18 batches per epoch, so 30 steps cross into the second epoch
MICRO_RESUME, MAX_STEPS, EVERY = 128, 30, 7


def fit_whole(zygote: Zygote, script: Path, argv: list[str], log: Path) -> None:
    """One fit (the script's `fit` mode, forked by the `zygote`) from start to end (a failure fails
    the test with its log)."""
    assert zygote.run(script, argv, log).wait(TIMEOUT) == 0, tails([log])


def resume(zygote: Zygote, script: Path, dataset, run: Path, workers: int, ckpt: Path) -> dict[int, list[str]]:
    run.mkdir()
    fit_whole(zygote, script, fit_argv(dataset, run, workers, resume=ckpt), run / "log")
    return read_record(run / "record.jsonl")


def test_killed_fit_resumes_with_exactly_the_batches_an_uninterrupted_fit_reads(
    zygote, script, dataset, windows, tmp_path
):
    per_epoch = len(windows["train"]) // MICRO_RESUME
    assert EVERY < per_epoch < 3 * EVERY < MAX_STEPS  # checkpoints in the first and in the second epoch
    # the uninterrupted run
    whole = tmp_path / "whole"
    whole.mkdir()
    fit_whole(zygote, script, fit_argv(dataset, whole, 0), whole / "log")
    reference = read_record(whole / "record.jsonl")
    assert sorted(reference) == list(range(MAX_STEPS))
    epoch0 = [k for s in range(per_epoch) for k in reference[s]]
    assert len(set(epoch0)) == len(epoch0)  # sanity: one exact epoch
    # the run that is killed: it stops in its training step (never finishes) once past the first checkpoint
    killed = tmp_path / "killed"
    killed.mkdir()
    ckpt = killed / "ckpt" / f"epoch=0-step={EVERY}.ckpt"
    run = zygote.run(script, fit_argv(dataset, killed, 0, hang_after=EVERY + 2), killed / "log")
    try:
        deadline, ready = time.monotonic() + TIMEOUT, False
        while not ready and time.monotonic() < deadline and run.running():
            time.sleep(0.1)
            record = killed / "record.jsonl"
            # training went on past the checkpoint (saved synchronously): the file is complete
            ready = ckpt.exists() and record.exists() and EVERY + 2 in read_record(record)
    finally:
        os.kill(run.pid, signal.SIGKILL)
    assert run.wait(TIMEOUT) == -signal.SIGKILL, tails([killed / "log"])
    assert ready, "the checkpoint did not appear:\n" + tails([killed / "log"])
    assert sorted(p.name for p in ckpt.parent.glob("*.ckpt")) == [ckpt.name]
    before_kill = read_record(killed / "record.jsonl")
    assert sorted(before_kill) == list(range(EVERY + 3))
    assert all(before_kill[s] == reference[s] for s in before_kill)
    # the restart, from the checkpoint in the first epoch, with loader workers now
    after = resume(zygote, script, dataset, tmp_path / "resumed", 2, ckpt)
    assert sorted(after) == list(range(EVERY, MAX_STEPS))
    for step in range(EVERY, MAX_STEPS):
        assert after[step] == reference[step], f"step {step}: the resumed run read other windows"
    # and from the uninterrupted run's checkpoint in the second epoch, with one worker
    later = 3 * EVERY
    after = resume(
        zygote, script, dataset, tmp_path / "resumed_later", 1, whole / "ckpt" / f"epoch=1-step={later}.ckpt"
    )
    assert sorted(after) == list(range(later, MAX_STEPS))
    for step in range(later, MAX_STEPS):
        assert after[step] == reference[step], f"step {step}: resumed in the second epoch, it read other windows"


def test_elastic_resume_from_2_to_3_ranks_reads_exactly_what_was_left(zygote, script, dataset, windows, tmp_path):
    """Two gloo ranks (micro 6) consume 5 batches each and save the state; three ranks (micro 4, the
    same global batch of 12) restore it: the multiset of all keys is the train split, each once, less
    fewer than one global batch."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = iterate(zygote, script, dataset, tmp_path / "a", 2, 0, 6, extra=["--stop-after", "5"])
    states = [
        json.loads((tmp_path / "a" / "iterate-w2-n0-m6-dpNone" / f"rank-{r}.json.state").read_text()) for r in range(2)
    ]
    assert states[0] == states[1] and states[0]["consumed"] == [[2, 6, 5]]
    state_file = tmp_path / "state.json"
    state_file.write_text(json.dumps(states[0]))
    rest = iterate(zygote, script, dataset, tmp_path / "b", 3, 1, 4, extra=["--state", str(state_file)])
    consumed = [k for r in first for k in flat(r["train"])]
    remaining = [k for r in rest for k in flat(r["train"])]
    every = Counter(consumed + remaining)
    assert len(consumed) == 2 * 5 * 6 and max(every.values()) == 1
    assert set(every) <= set(windows["train"]) and len(windows["train"]) - len(every) < 12
    assert len({len(r["train"]) for r in rest}) == 1  # the new ranks yield equal batch counts
