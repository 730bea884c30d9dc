#!/usr/bin/env python
"""Write a seeded synthetic genome with a realistic contig-length mix (see --help)."""

import sys

from benchmarks.synthetic import main

if __name__ == "__main__":
    sys.exit(main())
