"""Where `prepare` runs its shard tasks: in a local process pool or on a Dask cluster."""
