"""The benchmark's peers for tokenizers at load: bases per second through the loader, against bytes.

Each reads the sequence-layout dataset `ours_windows` reads (its own copy, the same options) with a
``tokenizer=``: ``ours_nt`` (Nucleotide Transformer 6-mers), ``ours_dnabert6`` (DNABERT's
overlapping 6-mers), ``ours_caduceus`` (characters) and ``ours_bpe`` (a BPE of 4,096 ids trained with
`tokenizers`' BpeTrainer on the first 300 kb of the genome when the peer prepares, DNABERT-2's recipe;
its training is not in the load's time). seq_length counts tokens, so a sample holds about 6x the
bases with 6-mers: the targets compare bases per second (each row's ``lengths``), not samples.
``ours_nt_mlm`` is ``ours_nt`` with ``objective="mlm"`` (NT's masked-LM batches, the masks drawn in
the loader workers), against ``ours_nt`` itself: masking's cost with a tokenizer.
"""

from __future__ import annotations

import gzip
import inspect
from pathlib import Path
from typing import Any

from benchmarks.packing_peers import OursWindows

#: The peers of this module, and the tokenizer each reads with (None: a BPE file trained at prepare).
TOKENIZER_PEERS = {
    "ours_nt": "nt",
    "ours_dnabert6": "dnabert6",
    "ours_caduceus": "caduceus",
    "ours_bpe": None,
    "ours_nt_mlm": "nt",
}
#: The peers among them that make masked-LM batches.
MASKED_PEERS = ("ours_nt_mlm",)
#: Bases the BPE is trained on, in lines of this many bases.
BPE_TRAINING_BASES, BPE_LINE = 300_000, 1000


def tokenizer_missing() -> str | None:
    """Why this checkout cannot run these peers (a data module without ``tokenizer``), or None."""
    from bionemo_wds.lightning.datamodule import GenomicWebDataModule

    if "tokenizer" not in inspect.signature(GenomicWebDataModule).parameters:
        return "this checkout's GenomicWebDataModule has no tokenizer option"
    return None


def first_bases(fasta: str | Path, count: int) -> str:
    """The first `count` bases of a (gzip) FASTA, upper case."""
    opener: Any = gzip.open if str(fasta).endswith(".gz") else open
    out, have = [], 0
    with opener(fasta, "rt") as fh:
        for line in fh:
            if not line.startswith(">"):
                out.append(line.strip().upper())
                have += len(out[-1])
                if have >= count:
                    break
    return "".join(out)[:count]


def train_bpe(fasta: str | Path, path: Path) -> None:
    """A BPE tokenizer.json of 4,096 ids trained on the genome's first bases ([CLS] .. [SEP] around a sequence)."""
    from tokenizers import Tokenizer, models, processors, trainers

    text = first_bases(fasta, BPE_TRAINING_BASES)
    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    trainer = trainers.BpeTrainer(vocab_size=4096, special_tokens=specials, initial_alphabet=list("ACGTN"))
    tok.train_from_iterator((text[i : i + BPE_LINE] for i in range(0, len(text), BPE_LINE)), trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)]
    )
    tok.save(str(path))


class OursTokenized(OursWindows):
    """`ours_windows` read with a tokenizer (module docstring)."""

    @property
    def bpe_file(self) -> Path:
        return Path(self.dir).parent / f"{self.name}-tokenizer.json"

    def prepare(self, workers: int) -> None:
        super().prepare(workers)
        if TOKENIZER_PEERS[self.name] is None:
            train_bpe(self.fasta, self.bpe_file)

    def load_options(self) -> dict[str, Any]:
        tokenizer = TOKENIZER_PEERS[self.name] or str(self.bpe_file)
        objective = {"objective": "mlm"} if self.name in MASKED_PEERS else {}
        return {**super().load_options(), "tokenizer": tokenizer, **objective}


def tokenizer_peer(name: str) -> type[OursTokenized]:
    """The peer class of `name` (one of `TOKENIZER_PEERS`)."""
    return type(f"Ours_{name}", (OursTokenized,), {"name": name})


TOKENIZER_CLASSES = [tokenizer_peer(name) for name in TOKENIZER_PEERS]
