"""Tokenizers at load time: one prepared dataset (bases, one byte each) serves every model family.

- `base`: the interface (`Tokenizer`: name, vocab_size, pad_id, mask_id, special_ids, kmer,
  overlapping, encode, prefix/suffix) and the per-token flags of soft-masked and degenerate bases;
- `characters`: HyenaDNA's and Caduceus's character vocabularies;
- `kmers`: Nucleotide Transformer's 6-mers and DNABERT's overlapping k-mers;
- `hf_file`: any Hugging Face tokenizer (BPE: DNABERT-2, GENA-LM, GROVER), run by the Rust library;
- `exact_bpe`: the library's BPE merges replayed exactly in C (`bpe_native.c`) for DNABERT-2-style files;
- `registry`: names -> tokenizers (``tokenizer=``).
"""

from bionemo_wds.load.tokenize.base import Spans, Tokenizer, id_dtype
from bionemo_wds.load.tokenize.registry import BYTES, resolve_tokenizer, tokenizer_names, vocabulary_only

__all__ = ["BYTES", "Spans", "Tokenizer", "id_dtype", "resolve_tokenizer", "tokenizer_names", "vocabulary_only"]
