#!/usr/bin/env python
"""Our epoch order beside a streaming recipe's buffer shuffle on JSON lines files sorted by length (see --help)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `benchmarks` is not installed

from benchmarks.sorted_files_shuffle import main

if __name__ == "__main__":
    sys.exit(main())
