#!/usr/bin/env bash
# The whole test suite, slow end-to-end tests included, after the habits: ruff (lint and format),
# the type checker on the package, and a strict build of the docs site (into a temporary directory).
# Extra arguments go to pytest (e.g. `bash tools/test.sh -m "not slow"` for the fast part only).
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
echo "ruff check, ruff format --check, mypy" >&2
"$PY" -m ruff check .
"$PY" -m ruff format --check .
"$PY" -m mypy
echo "mkdocs build --strict" >&2
SITE="$(mktemp -d)"
NO_MKDOCS_2_WARNING=1 "$PY" -m mkdocs build --strict --quiet --site-dir "$SITE" || { rm -rf "$SITE"; exit 1; }
rm -rf "$SITE"
exec "$PY" -m pytest tests "$@"
