#!/usr/bin/env python
"""Write a seeded synthetic genome with a realistic contig-length mix (see --help)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `benchmarks` is not installed

from benchmarks.synthetic import main

if __name__ == "__main__":
    sys.exit(main())
