#!/usr/bin/env python
"""bionemo-wds beside the loaders it replaces, in one run (see --help for what each timing includes)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `benchmarks` is not installed

from benchmarks.run import main

if __name__ == "__main__":
    sys.exit(main())
