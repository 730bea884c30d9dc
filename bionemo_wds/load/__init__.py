"""Load: prepared shards -> a rank's and worker's batches -> model inputs, with no framework.

Nothing here imports Lightning (`lightning/` is the thin layer over it). `dataset.GenomicDataset`
is the entry point; the packages under it answer one question each:

- `plan/`: which samples a rank reads in an epoch (pure functions; `plan.modes` is the registry of
  epoch modes);
- `batch/`: how a batch is built from them (the schema, the draws, the one assembly path, model inputs);
- `sources`, `manifest_checks`, `records`, `reader`: opening datasets, checking them, and reading
  the records a plan names; `transfer`: batches from loader workers in shared memory (segments
  named by `shm_segments`, which removes those of killed loaders).
"""
