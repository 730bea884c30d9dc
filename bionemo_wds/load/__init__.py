"""Load: shards -> the epoch's share of this rank and worker -> stages -> compact batches -> model inputs."""
