#!/usr/bin/env bash
# The whole test suite, slow end-to-end tests included, after the habits: ruff (lint and format)
# and the type checker on the package. Extra arguments go to pytest
# (e.g. `bash tools/test.sh -m "not slow"` for the fast part only).
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
echo "ruff check, ruff format --check, mypy" >&2
"$PY" -m ruff check .
"$PY" -m ruff format --check .
"$PY" -m mypy
exec "$PY" -m pytest tests "$@"
