"""Packing under real data parallelism (issue 25): gloo process groups on 127.0.0.1 read packed samples of a
metagenome-like catalog (the bundled Klebsiella assembly cut into contigs of log-normal length, median 3 kb)
prepared with ``--layout sequences``. Every base of the train split is trained exactly once per epoch over
2 and 3 ranks, every rank yields the same number of batches, padding stays under 1% of the token slots, a
model-parallel group reads identical batches, and an epoch stopped mid-way resumes with another number of
loader workers (and on another number of ranks) to exactly the rest.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path

import numpy as np
import pytest
from conftest import metagenome_contigs, split_seq_ids
from forked_runs import Zygote

from bionemo_wds.prepare import PrepareOptions, prepare

pytestmark = pytest.mark.slow

SEED = 11
SEQ_LENGTH = 8192
TIMEOUT = 300

SCRIPT = r"""
import argparse, json, sys

from rank_groups import run_forked_ranks

import torch.distributed as dist
from torch.utils.data import DataLoader

from bionemo_wds import GenomicDataset

p = argparse.ArgumentParser()
p.add_argument("--root"); p.add_argument("--out"); p.add_argument("--port", type=int)
p.add_argument("--world", type=int)
p.add_argument("--dp-size", type=int, default=0)
p.add_argument("--workers", type=int, default=0); p.add_argument("--micro", type=int, default=2)
p.add_argument("--epoch", type=int, default=0); p.add_argument("--stop-after", type=int, default=None)
p.add_argument("--state", default=None); p.add_argument("--seq-length", type=int)
args = p.parse_args()


def run(rank, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=rank, world_size=args.world)
    dp = {}
    if args.dp_size:
        dp = {"dp_rank": rank // (args.world // args.dp_size), "dp_size": args.dp_size}
    ds = GenomicDataset(args.root, "train", micro_batch_size=args.micro, seq_length=args.seq_length, pack=True,
                        seed=11, window_offset="random", **dp)
    if args.state:
        with open(args.state) as fh:
            ds.load_state_dict(json.load(fh))
    ds.set_epoch(args.epoch)
    batches = []
    for batch in DataLoader(ds, batch_size=None, num_workers=args.workers):
        batches.append({
            "keys": [str(k) for k in batch["keys"]],
            "pad": int((batch["tokens"] == 1).sum()),
            "slots": int(batch["tokens"].numel()),
            "trained": int(batch["loss_mask"].sum()),
            "empty": sum(1 for key in batch["keys"] if not key),
        })
        if args.stop_after is not None and len(batches) == args.stop_after:
            break
    table = ds.tables[0]
    unfilled = table.n_packed - table.packing(args.epoch).n_bins
    result = {"batches": batches, "len": len(ds), "samples": table.n_windows, "unfilled": unfilled}
    if args.stop_after is not None:
        result["state"] = ds.state_dict(batches=args.stop_after)
    with open(out, "w") as fh:
        json.dump(result, fh)
    dist.destroy_process_group()


# the ranks, forked from this process once its imports are done (`rank_groups`), each writing OUT-rankR.json
sys.exit(1 if any(run_forked_ranks(lambda r: run(r, f"{args.out}-rank{r}.json"), args.world)) else 0)
"""


def contigs(seed: int = SEED) -> dict[str, str]:
    return metagenome_contigs(seed)


@pytest.fixture(scope="module")
def catalog(tmp_path_factory) -> tuple[Path, dict[str, str], list[str]]:
    """(dataset root, the contigs, the train split's contig names)."""
    tmp = tmp_path_factory.mktemp("packing")
    seqs = contigs()
    fasta = tmp / "contigs.fa"
    fasta.write_text("".join(f">{n}\n{s}\n" for n, s in seqs.items()))
    root = tmp / "data"
    opts = PrepareOptions(seq_length=SEQ_LENGTH, seed=SEED, layout="sequences", workers=1, progress=False)
    prepare([str(fasta)], str(root), opts)
    return root, seqs, split_seq_ids(root, "train")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_group(zygote: Zygote, tmp: Path, root: Path, world: int, **kw) -> list[dict]:
    """Run `world` processes of one gloo group (forked by the script, which the `zygote` forks after
    its imports); what each rank read."""
    script = tmp / "script.py"
    script.write_text(SCRIPT)
    port = free_port()
    out = tmp / f"group-{port}"
    argv = ["--root", str(root), "--out", str(out), "--port", str(port)]
    argv += ["--world", str(world), "--seq-length", str(SEQ_LENGTH)]
    for key, value in kw.items():
        if value is not None:
            argv += [f"--{key.replace('_', '-')}", str(value)]
    log = tmp / f"group-{port}.log"
    run = zygote.run(script, argv, log)
    try:
        run.wait(TIMEOUT)
    finally:
        if run.poll() is None:  # a hang: the group's processes with it
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert run.returncode == 0, log.read_text()[-4000:]
    return [json.loads(Path(f"{out}-rank{rank}.json").read_text()) for rank in range(world)]


def documents(batches: list[dict]) -> list[tuple[str, int, int]]:
    """(contig, start, length) of every document of every sample read."""
    docs = []
    for batch in batches:
        for key in batch["keys"]:
            for doc in filter(None, key.split(";")):
                name, span = doc.rsplit(":", 1)
                start, length = span.split("+")
                docs.append((name, int(start), int(length)))
    return docs


def coverage(seqs: dict[str, str], names: list[str], docs: list[tuple[str, int, int]]) -> dict[str, np.ndarray]:
    """How many times each base of each train contig was read."""
    cover = {n: np.zeros(len(seqs[n]), dtype=np.int64) for n in names}
    for name, start, length in docs:
        cover[name][start : start + length] += 1
    return cover


@pytest.mark.parametrize(("world", "workers"), [(2, 0), (3, 2)])
def test_every_base_is_trained_once_per_epoch_in_equal_batches(zygote, catalog, tmp_path, world, workers):
    root, seqs, train = catalog
    ranks = run_group(zygote, tmp_path, root, world, workers=workers, epoch=1)
    counts = {len(r["batches"]) for r in ranks}
    assert len(counts) == 1 and counts == {ranks[0]["len"]}, counts
    cover = coverage(seqs, train, documents([b for r in ranks for b in r["batches"]]))
    assert all((c == 1).all() for c in cover.values()), {
        n: int((c != 1).sum()) for n, c in cover.items() if (c != 1).any()
    }
    # padding: inside the samples the packing fills (under 1%: about 0.01% here), and whole empty samples:
    # those the pass's packing leaves unfilled (its bound minus what it used) and those completing the
    # last global batch (fewer than micro x world), exactly these and no more
    pad = sum(b["pad"] for r in ranks for b in r["batches"])
    slots = sum(b["slots"] for r in ranks for b in r["batches"])
    empty = sum(b["empty"] for r in ranks for b in r["batches"])
    completing = ranks[0]["len"] * 2 * world - ranks[0]["samples"]
    assert 0 <= completing < 2 * world
    assert empty == ranks[0]["unfilled"] + completing, (empty, ranks[0]["unfilled"], completing)
    assert (pad - empty * SEQ_LENGTH) / (slots - empty * SEQ_LENGTH) < 0.01, pad / slots
    trained = sum(b["trained"] for r in ranks for b in r["batches"])
    # every base is a label once, nothing else is; degenerate bases (not A/C/G/T: two in the
    # Klebsiella assembly) are kept out of the loss by default (mask_degenerate_bases)
    real = sum(sum(seqs[n].upper().count(b) for b in "ACGT") for n in train)
    assert trained == real and sum(len(seqs[n]) for n in train) - real < 10


def test_a_model_parallel_group_reads_identical_packed_batches(zygote, catalog, tmp_path):
    root, _, _ = catalog
    ranks = run_group(zygote, tmp_path, root, 4, dp_size=2)
    assert ranks[0]["batches"] == ranks[1]["batches"] and ranks[2]["batches"] == ranks[3]["batches"]
    assert ranks[0]["batches"] != ranks[2]["batches"]


@pytest.mark.parametrize(("world", "then_world", "workers", "then_workers"), [(3, 3, 1, 0), (2, 3, 0, 2)])
def test_a_stopped_epoch_resumes_to_exactly_the_rest(
    zygote, catalog, tmp_path, world, then_world, workers, then_workers
):
    root, seqs, train = catalog
    whole = run_group(zygote, tmp_path, root, world, workers=workers, epoch=2)
    first = run_group(zygote, tmp_path, root, world, workers=workers, epoch=2, stop_after=5)
    assert [r["batches"] for r in first] == [r["batches"][:5] for r in whole]
    state = tmp_path / "state.json"
    state.write_text(json.dumps(first[0]["state"]))
    rest = run_group(zygote, tmp_path, root, then_world, workers=then_workers, state=state, epoch=2)
    if then_world == world:  # the same layout: exactly the batches the uninterrupted run read next
        assert [r["batches"] for r in rest] == [r["batches"][5:] for r in whole]
    read = [b for r in first for b in r["batches"]] + [b for r in rest for b in r["batches"]]
    cover = coverage(seqs, train, documents(read))
    assert all((c == 1).all() for c in cover.values())
