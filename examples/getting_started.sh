#!/usr/bin/env bash
# Getting started, from the repository root with the package installed:
# prepare the bundled Klebsiella assembly, look at the result, check every shard, train your own model.
# Usage: bash examples/getting_started.sh [OUTPUT_DIR]   (default: data/)
set -euo pipefail
OUT="${1:-data}"

bionemo-wds prepare bionemo_wds/data/klebsiella_fragmented_assembly.fa.gz \
    --out "$OUT" --seq-length 512
bionemo-wds inspect "$OUT"          # splits, shards, samples, tokens, bytes per token
bionemo-wds verify "$OUT" --quiet   # re-read every shard against the manifest
bionemo-wds show "$OUT" --split val -n 2   # two windows as text: what the model will see
python examples/own_model.py "$OUT" # Trainer.fit of a model written in the example
