"""``mlm_draws="device"``: masked-LM masks drawn where the batch is expanded equal the workers' draws.

The tensor form (`mlm_device.device_mask_tokens`) runs here on torch's CPU kernels, the same ops an
accelerator runs; on a machine with CUDA the same tests run on the GPU too (``DEVICES``). CI has no
GPU: the `placed` test gives a stand-in Trainer whose root device is ``cuda`` (it only asks the
device's type) to show "auto" choosing the device side.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from conftest import LAMBDA, tool_module
from test_mlm import CADUCEUS, batch, dnabert

from bionemo_wds import GenomicDataset
from bionemo_wds.core.tokenizer import PAD_ID
from bionemo_wds.errors import OptionError
from bionemo_wds.lightning.datamodule import GenomicWebDataModule
from bionemo_wds.load.batch.mlm import mask_tokens, maskable
from bionemo_wds.load.batch.mlm_device import device_mask_tokens, document_bases, draw_candidates
from bionemo_wds.load.batch.mlm_rule import MaskingRule, Vocabulary
from bionemo_wds.load.batch.options import SampleOptions
from bionemo_wds.load.batch.packed_columns import base_columns
from bionemo_wds.prepare import PrepareOptions, prepare

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
BYTES_MASK = Vocabulary("bytes-with-mask", 256, PAD_ID, 5, frozenset(range(256)) - frozenset(b"ACGTNacgtn"))
RULES = [
    ("caduceus-bert", CADUCEUS, {}),
    ("caduceus-mask", CADUCEUS, {"replace": "mask", "probability": 0.4}),
    *[(f"dnabert{k}-span", dnabert(k), {"probability": 0.05}) for k in (3, 4, 5, 6)],
    ("dnabert6-no-span", dnabert(6), {"span": False}),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,vocab,options", RULES, ids=[r[0] for r in RULES])
def test_device_draws_equal_the_numpy_draws(name, vocab, options, device):
    """Every rule: the tensor form gives `mask_tokens`'s matrix element for element, specials among
    the ids included (looked up by both), over salts whose high bits are set."""
    rule = MaskingRule.of(vocab, **options)
    ids, lengths, salts = batch(vocab, 24, 700, seed=len(name))
    ids[:, ::11] = min(vocab.special_ids)  # a special among the tokens: never chosen
    candidates = np.arange(ids.shape[1]) < lengths[:, None]
    assert (salts >= np.uint64(1 << 63)).any()
    want = mask_tokens(ids, candidates, salts, rule, specials=True)
    got = device_mask_tokens(
        torch.from_numpy(ids).to(device),
        torch.from_numpy(candidates).to(device),
        torch.from_numpy(salts.view(np.int64)),
        rule,
    )
    assert got.device.type == device
    np.testing.assert_array_equal(got.cpu().numpy(), want)
    assert (want != -1).sum() > 100  # the rule chose tokens: the comparison is not of empty matrices
    np.testing.assert_array_equal(want, mask_tokens(ids, maskable(ids, lengths, rule), salts, rule))


@pytest.mark.parametrize("device", DEVICES)
def test_packed_base_columns_by_tensor_ops_equal_numpy(device):
    """A packed row's base columns (`document_bases`) equal `packed_columns.base_columns` over random layouts:
    empty document slots, documents of one token, rows with padding after their last document."""
    rng = np.random.default_rng(7)
    for trial in range(30):
        rows, docs, width = int(rng.integers(1, 6)), int(rng.integers(1, 7)), int(rng.integers(20, 200))
        prefix = rng.integers(1, 4, size=(rows, docs)).astype(np.int32)
        sizes = np.zeros((rows, docs), dtype=np.int32)
        for r in range(rows):
            room = width - int(rng.integers(0, 10))
            for d in range(int(rng.integers(1, docs + 1))):
                size = min(int(rng.integers(prefix[r, d] + 1, prefix[r, d] + 60)), room)
                if size <= prefix[r, d]:
                    break
                sizes[r, d], room = size, room - size
        want = base_columns(sizes, prefix, width)
        got = document_bases(torch.from_numpy(sizes).to(device), torch.from_numpy(prefix).to(device), width)
        np.testing.assert_array_equal(got.cpu().numpy(), want, err_msg=f"trial {trial}")


@pytest.fixture(scope="module")
def lambda_sets(tmp_path_factory) -> dict[str, Path]:
    """The lambda genome in 256-base windows and as whole sequences (for packing), without tags."""
    base = tmp_path_factory.mktemp("mlm_device")
    out = {"windows": base / "windows", "sequences": base / "sequences"}
    prepare([LAMBDA], out["windows"], PrepareOptions(seq_length=256, stride=200, split=(1, 0, 0), progress=False))
    opts = PrepareOptions(seq_length=256, layout="sequences", split=(1, 0, 0), progress=False)
    prepare([LAMBDA], out["sequences"], opts)
    return out


CASES = {
    "windows-bytes": ("windows", {"tokenizer": BYTES_MASK}),
    "windows-megatron": ("windows", {"tokenizer": BYTES_MASK, "batch_format": "megatron"}),
    "packed-bytes": ("sequences", {"tokenizer": BYTES_MASK, "pack": True}),
    "dnabert6": ("windows", {"tokenizer": "dnabert6", "control_tags": False}),
    "caduceus": ("windows", {"tokenizer": "caduceus", "control_tags": False, "mlm_replace": "mask"}),
    "packed-nt": ("sequences", {"tokenizer": "nt", "pack": True, "control_tags": False}),
}


def dataset(root: Path, draws: str, options: dict, model_inputs: bool = True) -> GenomicDataset:
    settings = {"batch_format": "hf", "objective": "mlm", "seed": 5, "rc_prob": 0.5} | options
    return GenomicDataset(str(root), micro_batch_size=4, model_inputs=model_inputs, mlm_draws=draws, **settings)


@pytest.mark.parametrize("case", list(CASES))
def test_device_draws_give_the_batches_of_worker_draws(lambda_sets, case):
    """The same dataset with masks drawn in the workers and at expansion: the compact batch carries
    ``mlm`` or ``mlm_salts`` (8 bytes a row), and every model input is equal, batch for batch (on a
    CPU the expansion draws with numpy); the tensor form over the compact batch's own candidates
    (windows, packed rows, a tokenizer's rows) gives the workers' ``mlm`` matrix too."""
    layout, options = CASES[case]
    root = lambda_sets[layout]
    workers, device = dataset(root, "workers", options), dataset(root, "device", options)
    got, want = list(device), list(workers)
    assert len(got) == len(want) > 3
    for a, b in zip(got, want):
        assert sorted(a) == sorted(b)
        for name in a:
            if isinstance(a[name], torch.Tensor):
                assert torch.equal(a[name], b[name]), name
    compact_w = next(iter(dataset(root, "workers", options, model_inputs=False)))
    compact_d = next(iter(dataset(root, "device", options, model_inputs=False)))
    assert "mlm" in compact_w and "mlm_salts" not in compact_w
    assert "mlm_salts" in compact_d and "mlm" not in compact_d and compact_d["mlm_salts"].dtype == torch.int64
    rule = SampleOptions.pick({"objective": "mlm", **options}).masking_rule
    ids, candidates = draw_candidates(compact_d, isinstance(options["tokenizer"], str))
    drawn = device_mask_tokens(ids, candidates, compact_d["mlm_salts"], rule)
    assert torch.equal(drawn, compact_w["mlm"])


def test_auto_draws_on_the_device_of_the_trainer(lambda_sets):
    """``mlm_draws="auto"`` (the default): the workers for a CPU Trainer or none, the device side for a
    Trainer on an accelerator (a stand-in Trainer with a ``cuda`` root device: CI has no GPU); an
    explicit choice is kept; an unknown place is refused."""
    options = SampleOptions(objective="mlm", tokenizer=BYTES_MASK)
    assert options.mlm_draws == "auto" and not options.draws_on_device
    cuda = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cuda", 0)))
    cpu = SimpleNamespace(strategy=SimpleNamespace(root_device=torch.device("cpu")))
    assert options.placed(cuda).draws_on_device
    assert options.placed(cpu).mlm_draws == "workers" and options.placed(None).mlm_draws == "workers"
    assert SampleOptions(objective="mlm", tokenizer=BYTES_MASK, mlm_draws="device").placed(cpu).draws_on_device
    assert not SampleOptions(mlm_draws="device").draws_on_device  # nothing to draw without masked-LM
    dm = GenomicWebDataModule(str(lambda_sets["windows"]), objective="mlm", tokenizer=BYTES_MASK, batch_format="hf")
    dm.setup("fit")
    assert "mlm" in next(iter(dm.train_dataloader()))  # no Trainer: the workers draw
    with pytest.raises(OptionError, match="mlm_draws must be one of workers, device, auto, got 'gpu'"):
        GenomicDataset(str(lambda_sets["windows"]), objective="mlm", tokenizer=BYTES_MASK, mlm_draws="gpu")


@pytest.mark.slow
def test_gpu_check_runs_on_a_cpu_and_both_draw_places_train_alike(tmp_path, capsys):
    """`tools/gpu_check.py` (its figures come from a GPU) keeps working here with a tiny model on the
    CPU: the transfer pass and two ``Trainer.fit`` runs, masks drawn at expansion and in the workers;
    the same masks and seed give the same losses, step for step."""
    args = ["--device", "cpu", "--steps", "6", "--warmup", "1", "--micro-batch-size", "2", "--seq-length", "128"]
    args += ["--workers", "0", "--hidden", "32", "--layers", "1", "--batches", "5", "--workdir", str(tmp_path)]
    assert tool_module("gpu_check").main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.startswith("transfer pin_memory=False 5 batches") for line in lines)
    trained = {line.split()[1]: line.split("loss ")[1] for line in lines if line.startswith("train ")}
    assert set(trained) == {"mlm_draws=device", "mlm_draws=workers"}
    assert trained["mlm_draws=device"] == trained["mlm_draws=workers"]
