#!/usr/bin/env bash
# Self-test of scripts/check_tflite_parts.py on partitions made by scripts/tflite_split_demo.py
# (cleave does not write TFLite parts yet): every right partition must pass, every broken one
# must be refused with the message that names its fault (a crash does not count as a refusal).
#
#   CLEAVE_TEST_DATA  where scripts/tflite_models.py fetched the models (default: ~/.cache/cleave/test-data)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${CLEAVE_TEST_DATA:-$HOME/.cache/cleave/test-data}"
models="$dest/tflite"
quant="$dest/tflite-quant"
python3 "$here/tflite_models.py" list "$dest" >/dev/null
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
split() { python3 "$here/tflite_split_demo.py" "$@" >/dev/null; }
check() { python3 "$here/check_tflite_parts.py" "$@"; }
passed=0

expect_pass() { # conn.json, check flags...
  local out
  if ! out="$(check "$@" 2>&1)"; then
    echo "FAIL: check_tflite_parts.py $* refused a right partition:" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "ok   ${out}"
  passed=$((passed + 1))
}

expect_refusal() { # expected message (grep -E), conn.json, check flags...
  local want="$1" out rc=0
  shift
  out="$(check "$@" 2>&1)" || rc=$?
  if [ "$rc" -ne 1 ] || ! grep -qE "$want" <<<"$out"; then
    echo "FAIL: check_tflite_parts.py $* exited $rc, expected 1 with /$want/:" >&2
    echo "$out" >&2
    exit 1
  fi
  echo "ok   refused: $(grep -E "$want" <<<"$out" | head -1 | cut -c1-200)"
  passed=$((passed + 1))
}

# The source as its own single part.
for m in "$models"/*.tflite; do
  s="$(basename "$m" .tflite)"
  split "$m" "$work/one/$s" --parts 1
  expect_pass "$work/one/$s/$s.conn.json"
done

# Three parts of each model, listed last to first (the checker finds the order), and four
# parts of each quantized model (int8 boundaries with their scales).
for m in "$models"/*.tflite; do
  s="$(basename "$m" .tflite)"
  split "$m" "$work/three/$s" --parts 3 --reverse
  expect_pass "$work/three/$s/$s.conn.json"
done
for m in "$quant"/*.tflite; do
  s="$(basename "$m" .tflite)"
  split "$m" "$work/q/$s" --parts 4
  expect_pass "$work/q/$s/$s.conn.json"
done

# A detector whose float16 weights are dequantized by a LiteRT part and whose body runs in
# onert as a .circle part (onert cannot DEQUANTIZE float16, nor RESHAPE without a shape input:
# the last 6 operators stay in LiteRT), run both ways.
s=face_detection_front
split "$models/$s.tflite" "$work/onert" --hoist DEQUANTIZE --cuts 84 --circle 2
expect_pass "$work/onert/$s.conn.json" --circle-onert
expect_pass "$work/onert/$s.conn.json"
# A quantized .circle part in onert: uint8 input, int8 output; onert's int8 CONV_2D rounds one
# step away from LiteRT's, which the next part carries further.
s=face_landmark_uint8
split "$quant/$s.tflite" "$work/qonert" --cuts 2 --circle 1
expect_refusal "integer values differ by up to 1 \(--int-tol 0\)" "$work/qonert/$s.conn.json" --circle-onert
expect_pass "$work/qonert/$s.conn.json" --circle-onert --int-tol 1 --chain-int-tol 8

# Dynamic dims: iris_landmark with its input's height and width -1 in shape_signature. Taken
# as 1 they are too small for the model (a clear refusal); --shape sets them.
python3 - "$models/iris_landmark.tflite" "$work/iris_dyn.tflite" <<'EOF'
import sys
from ai_edge_litert.tools import flatbuffer_utils as fu
m = fu.read_model(sys.argv[1])
g = m.subgraphs[0]
g.tensors[g.inputs[0]].shapeSignature = [1, -1, -1, 3]
fu.write_model(m, sys.argv[2])
EOF
split "$work/iris_dyn.tflite" "$work/dyn" --parts 2
expect_refusal "dynamic dims are taken as 1" "$work/dyn/iris_dyn.conn.json"
expect_pass "$work/dyn/iris_dyn.conn.json" --shape input_1=1,64,64,3

# Broken partitions.
s=face_detection_back
split "$models/$s.tflite" "$work/w1" --parts 3 --wrong rename-output
expect_refusal "its outputs are not the connection file's: the file lacks \['activation_11'\], has besides \['activation_11_renamed'\]" "$work/w1/$s.conn.json"
split "$models/$s.tflite" "$work/w2" --parts 3 --wrong swap-weights
expect_refusal "part outputs differ from the source; first: $s.00001_cpu.tflite \(LiteRT\), fed the source's values" "$work/w2/$s.conn.json"
split "$models/$s.tflite" "$work/w3" --parts 3 --wrong drop-output
expect_refusal "no part is runnable; waiting on \{'$s.00002_cpu.tflite': \['depthwise_conv2d_11/Kernel_dequantize'\]" "$work/w3/$s.conn.json"
split "$models/$s.tflite" "$work/w4" --parts 3 --wrong cycle
expect_refusal "model partition or configuration has problems: no part is runnable" "$work/w4/$s.conn.json"
s=face_detection_front
split "$models/$s.tflite" "$work/w5" --hoist DEQUANTIZE --cuts 84 --circle 2 --wrong miswire --wrong-part 2
expect_refusal "$s.00002_onert.circle \(onert\), fed the source's values" "$work/w5/$s.conn.json" --circle-onert
s=iris_landmark_uint8
split "$quant/$s.tflite" "$work/w6" --parts 3 --wrong requant
expect_refusal "has quantization \(\[[0-9.]+\], \[-?[0-9]+\], 0\), \(\[[0-9.]+\], \[-?[0-9]+\], 0\) in the source" "$work/w6/$s.conn.json"

# Another model as the part: iris_landmark in place of face_landmark (same input name).
mkdir -p "$work/other"
cp "$models/face_landmark.tflite" "$models/iris_landmark.tflite" "$work/other/"
cat >"$work/other/face_landmark.conn.json" <<'EOF'
{
  "source" : { "file" : "face_landmark.tflite", "inputs" : [ "input_1" ], "outputs" : [ "conv2d_20", "conv2d_30" ] },
  "parts" : [ { "file" : "iris_landmark.tflite", "inputs" : [ "input_1" ], "outputs" : [ "conv2d_20", "conv2d_30" ] } ]
}
EOF
expect_refusal "iris_landmark.tflite: its outputs are not the connection file's" "$work/other/face_landmark.conn.json"
# A connection file naming one tensor as two parts' output.
cat >"$work/other/twice.conn.json" <<'EOF'
{
  "source" : { "file" : "face_landmark.tflite", "inputs" : [ "input_1" ], "outputs" : [ "conv2d_20", "conv2d_30" ] },
  "parts" : [ { "file" : "face_landmark.tflite", "inputs" : [ "input_1" ], "outputs" : [ "conv2d_20", "conv2d_30" ] },
              { "file" : "face_landmark.tflite", "inputs" : [ "input_1" ], "outputs" : [ "conv2d_20", "conv2d_30" ] } ]
}
EOF
expect_refusal "conv2d_20 is an output of both" "$work/other/twice.conn.json"

echo "tflite self-test: $passed checks behaved"
