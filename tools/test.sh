#!/usr/bin/env bash
# The whole test suite, slow end-to-end tests included, after the habits: ruff (lint and format) and
# the type checker on the package. The docs site's strict build is a test (tests/test_docs.py).
# pytest runs the test files in parallel, one worker process per core (pytest-xdist: -n auto, each
# file's tests on one worker so module fixtures are built once); BIONEMO_WDS_TEST_WORKERS sets the
# count (0: in this process). Extra arguments go to pytest: `bash tools/test.sh -m "not slow"` for the
# fast part only, `-n 0` to run serially, a path or `-k` to pick tests.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
echo "ruff check, ruff format --check, mypy" >&2
"$PY" -m ruff check .
"$PY" -m ruff format --check .
# mypy's cache lives with the environment: a fresh clone with a built environment re-checks only our
# modules, not torch's and lightning's stubs again (a minute on 2 cores)
"$PY" -m mypy --cache-dir "$("$PY" -c 'import sys; print(sys.prefix)')/.mypy_cache"
# bytecode caches on: a machine that sets PYTHONDONTWRITEBYTECODE (ours do) made every test process
# compile the package again and pytest rewrite every test module in each worker (about 12 s of CPU
# per worker's collection, a fraction of a second per process the tests start); the caches go into
# the clone's __pycache__ folders, which git ignores
unset PYTHONDONTWRITEBYTECODE
# one compute thread per test process (tests/conftest.py says why); set from here too so numpy's BLAS
# in the test processes, which reads it when it loads, starts with one thread as well
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
# --no-loadscope-reorder: xdist would hand out the files with the most tests first; the order of
# tests/conftest.py (its LONGEST_FILES, by measured CPU, first) keeps a long file from starting last
exec "$PY" -m pytest -n "${BIONEMO_WDS_TEST_WORKERS:-auto}" --dist loadfile --no-loadscope-reorder "$@"
