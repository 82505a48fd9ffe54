#!/usr/bin/env bash
# The served-decoder targets table (docs/figures.md, "Decoders served on Ray"): tiny_llama in 4
# stages and in 2 over both nodes, small_llama (104 MB) in 2 over both nodes, each served on
# scripts/ray_cluster_test.sh's two-node loopback cluster by scripts/ray_decoder_test.py.
#
#   bash scripts/reports/decoder_serve_table.sh [CLEAVE_BINARY] [TOKENS]
#
# Needs root, and python3 with the cleave package, Ray and the test requirements (as the
# cluster test). Prints the table under "== decoder targets ==" and the figures after it.
set -eu
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$(dirname "$HERE")")
CLEAVE=${1:-$ROOT/target/debug/cleave}
TOKENS=${2:-64}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$ROOT/scripts/testdata/make_decoder_models.py" "$work" --small
"$CLEAVE" partition "$work/tiny_llama.onnx" --stages 4 -o "$work/tiny4" >/dev/null
"$CLEAVE" partition "$work/tiny_llama.onnx" --stages 2 --devices cpu2,npu -o "$work/tiny2" >/dev/null
"$CLEAVE" partition "$work/small_llama.onnx" --stages 2 --devices cpu2,npu -o "$work/small2" >/dev/null
CLEAVE_RAY_DRIVER=decoder CLEAVE_RAY_DECODER_TOKENS="$TOKENS" CLEAVE_RAY_TEST_LIMIT_S=900 \
    bash "$ROOT/scripts/ray_cluster_test.sh" "$work/tiny4/tiny_llama.conn.json" \
    "$work/tiny2/tiny_llama.conn.json" "$work/small2/small_llama.conn.json"
