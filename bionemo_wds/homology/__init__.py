"""Homology: which sequences are near-identical, for splits that do not leak and for membership queries.

- `sketch`: one FracMinHash sketch per sequence (sourmash, the optional ``[homology]`` extra), kept as
  flat arrays so a million sequences stay a few numpy arrays;
- `kmers`: the exact canonical k-mers of a sequence (numpy), for containment without sampling;
- `similarity`: shared hashes through an inverted index, containment and the ANI it estimates,
  single-linkage clusters (`prepare --group-by similarity:T`) and matches between two sets;
- `stored`: the sequences of a prepared dataset, read back from its shards (`contains`, `leakage`).
"""
