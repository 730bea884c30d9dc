#!/usr/bin/env python
"""Prepare's planning and writing on many short contigs (metagenomic catalogs); see --help."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `benchmarks` is not installed

from benchmarks.contigs import main

if __name__ == "__main__":
    sys.exit(main())
