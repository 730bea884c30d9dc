#!/usr/bin/env python
"""Prepare's planning and writing on many short contigs (metagenomic catalogs); see --help."""

import sys

from benchmarks.contigs import main

if __name__ == "__main__":
    sys.exit(main())
