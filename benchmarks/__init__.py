"""Side-by-side benchmark of bionemo-wds against the loaders it replaces (see `run.py`)."""
