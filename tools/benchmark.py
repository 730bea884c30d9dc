#!/usr/bin/env python
"""bionemo-wds beside the loaders it replaces, in one run (see --help for what each timing includes)."""

import sys

from benchmarks.run import main

if __name__ == "__main__":
    sys.exit(main())
