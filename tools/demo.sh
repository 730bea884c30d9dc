#!/usr/bin/env bash
# The main job on the embedded default: prepare the bundled Klebsiella assembly (119 contigs,
# 5.57 Mbp) into shards and print their summary. Output goes to ${DEMO_OUT:-demo_out}.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
OUT="${DEMO_OUT:-demo_out}"
"$PY" -m bionemo_wds.cli prepare --config configs/prepare_default.yaml --out "$OUT" "$@"
"$PY" -m bionemo_wds.cli verify "$OUT"
