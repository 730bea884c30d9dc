#!/usr/bin/env bash
# The whole test suite, slow end-to-end tests included. Extra arguments go to pytest
# (e.g. `bash tools/test.sh -m "not slow"` for the fast part only).
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
exec "$PY" -m pytest tests "$@"
