"""Lightning: the data module over `load.GenomicDataset` (`datamodule`), its loaders (`split_loaders`,
`loaders`, `epochs`: passes that know their epoch and are resumable) and in-memory eval caching."""
