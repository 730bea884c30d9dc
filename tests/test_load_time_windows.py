"""Windows cut at load and packed samples from one sequence-layout dataset (issue 25).

The bundled Klebsiella assembly is prepared once with ``--layout sequences``; the same shards then serve
windows of 1 k, 8 k and 131 k tokens and packed samples of 1 M tokens (its longest contig has 366 kb, so a
1 M window is served packed), and every window's and document's bases equal the FASTA.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import KLEBSIELLA, LAMBDA, read_fasta, split_seq_ids
from torch.utils.data import DataLoader

from bionemo_wds import GenomicDataset, GenomicWebDataModule
from bionemo_wds.errors import OptionError
from bionemo_wds.prepare import PrepareOptions, prepare
from bionemo_wds.prepare.windows import window_table

SEED = 3


@pytest.fixture(scope="module")
def sequences(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("seqlayout") / "data"
    prepare([str(KLEBSIELLA)], str(root), PrepareOptions(seed=SEED, layout="sequences", workers=1, progress=False))
    return root


@pytest.fixture(scope="module")
def windows_layout(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("winlayout") / "data"
    opts = PrepareOptions(seq_length=1024, seed=SEED, split=(1.0, 0.0, 0.0), workers=1, progress=False)
    prepare([str(LAMBDA)], str(root), opts)
    return root


@pytest.fixture(scope="module")
def fasta() -> dict[str, str]:
    return read_fasta(KLEBSIELLA)


def compact_batches(root: Path, split: str, **kw) -> list[dict]:
    ds = GenomicDataset(str(root), split, micro_batch_size=4, model_inputs=False, rc_prob=0.0, seed=SEED, **kw)
    return list(DataLoader(ds, batch_size=None))


def window_bases(batch: dict, i: int) -> str:
    return bytes(np.asarray(batch["bases"][i][: int(batch["lengths"][i])])).decode()


@pytest.mark.parametrize("seq_length", [1024, 8192, 131072])
@pytest.mark.parametrize("split", ["train", "val"])
def test_windows_of_any_length_equal_the_fasta(sequences, fasta, seq_length, split):
    stride = seq_length - 3 - 100  # overlapping windows
    batches = compact_batches(sequences, split, seq_length=seq_length, stride=stride)
    found = []
    for batch in batches:
        for i, (name, start) in enumerate(zip(batch["seq_id"], np.asarray(batch["start"]).tolist())):
            if batch["filler"][i] if "filler" in batch else not name:
                continue
            bases = window_bases(batch, i)
            assert bases == fasta[name][start : start + len(bases)], (name, start)
            found.append((name, start, len(bases)))
    # the fixed grid is prepare's: the same windows `window_table` cuts from every sequence of the split
    names = split_seq_ids(sequences, split)
    lengths = np.array([len(fasta[n]) for n in names])
    window = seq_length - 3
    table = window_table(np.arange(len(names)), lengths, window, stride, "end")
    expected = sorted(zip([names[i] for i in table.seq_index.tolist()], table.start.tolist(), table.length.tolist()))
    if split == "train":  # an exact epoch leaves out fewer than one global batch
        assert set(found) <= set(expected) and len(expected) - len(found) < 4
    else:
        assert sorted(found) == expected


def test_random_offsets_cut_afresh_every_epoch(sequences, fasta):
    ds = GenomicDataset(
        str(sequences),
        "train",
        micro_batch_size=4,
        model_inputs=False,
        rc_prob=0.0,
        seq_length=1024,
        window_offset="random",
        seed=SEED,
    )
    starts = []
    for epoch in (0, 1):
        ds.set_epoch(epoch)
        seen = set()
        for batch in DataLoader(ds, batch_size=None):
            for i, (name, start) in enumerate(zip(batch["seq_id"], np.asarray(batch["start"]).tolist())):
                bases = window_bases(batch, i)
                assert bases == fasta[name][start : start + len(bases)]
                seen.add((name, start))
        starts.append(seen)
    assert len(starts[0]) == len(starts[1]) and starts[0] != starts[1]


def test_million_token_packed_samples_hold_the_fasta(sequences, fasta):
    ds = GenomicDataset(
        str(sequences),
        "train",
        micro_batch_size=1,
        model_inputs=False,
        rc_prob=0.0,
        seq_length=1 << 20,
        pack=True,
        seed=SEED,
    )
    docs = 0
    for batch in DataLoader(ds, batch_size=None):
        tokens = np.asarray(batch["tokens"][0])
        pos = 0
        keys = [k for k in batch["keys"][0].split(";") if k]
        for key, size, prefix in zip(keys, np.asarray(batch["doc_tokens"][0]), np.asarray(batch["doc_prefix"][0])):
            name, span = key.rsplit(":", 1)
            start, length = map(int, span.split("+"))
            bases = bytes(tokens[pos + prefix : pos + size - 1]).decode()
            assert len(bases) == length and bases == fasta[name][start : start + length], key
            pos += int(size)
            docs += 1
    assert docs >= len(split_seq_ids(sequences, "train"))


def test_the_data_module_serves_load_time_windows(sequences):
    dm = GenomicWebDataModule(str(sequences), micro_batch_size=2, seq_length=2048, seed=SEED)
    dm.setup("fit")
    batch = dm.on_after_batch_transfer(next(iter(dm.train_dataloader())), 0)
    assert tuple(batch["tokens"].shape) == (2, 2048)
    packed = GenomicWebDataModule(str(sequences), micro_batch_size=2, seq_length=2048, pack=True, seed=SEED)
    packed.setup("fit")
    batch = packed.on_after_batch_transfer(next(iter(packed.train_dataloader())), 0)
    assert tuple(batch["tokens"].shape) == (2, 2048) and "cu_seqlens" in batch


def test_a_seq_length_longer_than_every_sequence_is_refused(sequences):
    with pytest.raises(OptionError, match=r"longer than every sequence of .*longest has 365645 bases.*pack=True"):
        GenomicDataset(str(sequences), "train", seq_length=1 << 20)


def test_a_windows_layout_refuses_load_time_cuts(windows_layout):
    with pytest.raises(OptionError, match=r"stores windows cut at prepare.*pack=True.*--layout sequences"):
        GenomicDataset(str(windows_layout), "train", pack=True)
    with pytest.raises(OptionError, match=r"was cut for seq_length 1024.*--layout sequences"):
        GenomicDataset(str(windows_layout), "train", seq_length=2048)


def test_a_blend_of_packed_datasets_keeps_exact_quotas_in_samples(sequences, tmp_path):
    """Mixing sequence-layout datasets: each dataset's quota is counted in samples (packed samples here),
    exactly, whatever the number of documents a sample holds."""
    lam = tmp_path / "lambda"
    opts = PrepareOptions(seed=SEED, layout="sequences", split=(1.0, 0.0, 0.0), workers=1, progress=False)
    prepare([str(LAMBDA)], str(lam), opts)
    blend = [{"path": str(sequences), "weight": 3.0}, {"path": str(lam), "weight": 1.0}]
    ds = GenomicDataset(
        datasets=blend,
        samples_per_epoch=200,
        micro_batch_size=4,
        seq_length=4096,
        pack=True,
        seed=SEED,
        model_inputs=False,
    )
    counts = np.zeros(2, dtype=np.int64)
    for batch in DataLoader(ds, batch_size=None):
        source = np.asarray(batch["dataset"])
        counts += np.bincount(source[source >= 0], minlength=2)
    assert counts.tolist() == ds.quotas.tolist() == [150, 50]
