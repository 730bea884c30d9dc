# Sourced by tools/demo.sh and tools/test.sh: create or reuse a virtualenv and install the package.
# - An active virtualenv ($VIRTUAL_ENV) is used as it is; otherwise .venv at the repo root.
# - torch: 2.13.0 is installed only when no torch is importable, so a user's own torch is never
#   replaced; the build is what the package index serves (the CPU wheel on our CI machines; set
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu for the CPU build from pypi.org).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -n "${VIRTUAL_ENV:-}" ]; then
    PY="$VIRTUAL_ENV/bin/python"
else
    [ -x "$ROOT/.venv/bin/python" ] || python3 -m venv "$ROOT/.venv"
    PY="$ROOT/.venv/bin/python"
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    # the build is whatever the index serves (TORCH_INDEX_URL picks one, e.g. PyTorch's CPU index)
    echo "installing torch 2.13.0 into $("$PY" -c 'import sys; print(sys.prefix)')${TORCH_INDEX_URL:+ from $TORCH_INDEX_URL}" >&2
    "$PY" -m pip install -q "torch==2.13.0" ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"}
fi
STAMP="$("$PY" -c 'import sys; print(sys.prefix)')/.bionemo-wds-installed"
# reinstalled when the package's build inputs change: pyproject.toml, and setup.py with the C
# extensions it compiles (bionemo_wds/**/*.c: the exact BPE encoder, the masked-LM kernel, byte tables)
# (find fails while there is no stamp yet, in a fresh venv: `|| true` keeps set -e from ending here)
NEWER_C="$(find "$ROOT/bionemo_wds" -name '*.c' -newer "$STAMP" 2>/dev/null | head -1 || true)"
if [ ! -f "$STAMP" ] || [ "$ROOT/pyproject.toml" -nt "$STAMP" ] || [ "$ROOT/setup.py" -nt "$STAMP" ] \
    || [ -n "$NEWER_C" ] || ! "$PY" -c "import bionemo_wds" >/dev/null 2>&1; then
    "$PY" -m pip install -q -e "$ROOT[test]" 2>&1 | grep -v "is ignored: it is neither" >&2 || true
    "$PY" -c "import bionemo_wds, torch, lightning, webdataset"  # fail here, loudly, if the install did not work
    "$PY" -c "import bionemo_wds.load.tokenize.bpe_native, bionemo_wds.load.batch.mlm_kernel, bionemo_wds.load.batch.byte_tables" 2>/dev/null \
        || echo "note: the C extensions were not built (no C compiler?): BPE tokenizer files load through the slower tokenizers library, masked-LM masks are drawn by numpy, reverse complements made by bytes.translate" >&2
    touch "$STAMP"
fi
# megatron-core for export-megatron's tests, without its dependencies (beside torch, numpy and
# packaging it needs none on a CPU; as a plain requirement it could pull a CUDA torch)
if ! "$PY" -c "import megatron.core.datasets.indexed_dataset" >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-deps "megatron-core>=0.12" 2>&1 | grep -v "is ignored: it is neither" >&2 || true
    "$PY" -c "import megatron.core.datasets.indexed_dataset" 2>/dev/null \
        || { echo "megatron-core did not install (pip install --no-deps 'megatron-core>=0.12')" >&2; exit 1; }
fi
