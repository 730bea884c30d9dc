#!/usr/bin/env bash
# The main job on the embedded default, from FASTA to a trained model:
#  1. prepare the bundled Klebsiella assembly (119 contigs, 5.57 Mbp) into shards, print the summary,
#     and verify every shard against the manifest;
#  2. train the tiny DNA LM on them for about a minute (CPU), printing loss and throughput.
# Output (shards, CSV logs) goes to ./demo_out.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
"$PY" -m bionemo_wds.cli prepare --config configs/prepare_demo.yaml --out demo_out/shards "$@"
"$PY" -m bionemo_wds.cli verify demo_out/shards --quiet
"$PY" -m bionemo_wds.cli fit --config configs/fit_demo.yaml
