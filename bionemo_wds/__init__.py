"""bionemo-wds: genomes to WebDataset shards for DNA language models, and back into Lightning."""

__version__ = "0.1.0"
