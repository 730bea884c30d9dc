#!/usr/bin/env bash
# The main job on the embedded default, from FASTA to a trained model:
#  1. prepare the bundled Klebsiella assembly (119 contigs, 5.57 Mbp) into shards, print the summary,
#     and verify every shard against the manifest;
#  2. train a small tiny DNA LM on them for about a minute (CPU, start-up included), printing the
#     training and validation loss and the throughput;
#  3. say how to use the environment it installed into, or how to install into one's own.
# Output (shards, CSV logs) goes to ./demo_out.
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$ROOT"
"$PY" -m bionemo_wds.cli prepare --config configs/prepare_demo.yaml --out demo_out/shards "$@"
"$PY" -m bionemo_wds.cli verify demo_out/shards --quiet
"$PY" -m bionemo_wds.cli fit --config configs/fit_demo.yaml
echo
echo "Done: shards in demo_out/shards, training logs (metrics.csv) in demo_out/logs."
if [ -n "${VIRTUAL_ENV:-}" ]; then
    echo "bionemo-wds is installed in your active environment ($VIRTUAL_ENV): try  bionemo-wds --help"
else
    echo "To use the environment the demo made:  source .venv/bin/activate   then  bionemo-wds --help"
fi
echo "To install into an environment of your own:  pip install -e .   (with extras: pip install -e '.[test]',"
echo "  '.[remote]' for s3:// and https:// datasets; see pyproject.toml for the others)"
