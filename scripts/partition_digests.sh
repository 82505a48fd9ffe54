#!/usr/bin/env bash
# Partitions the bundled example and the 9 randomised light models (seeded random 3-backend
# [OPNAME] rules, and --devices myriad,cpu) with CLEAVE_BIN into OUT, then prints the sha256 of
# every file written. Two builds that print the same lines write the same bytes: the check
# for refactorings that must not change results.
#
#   bash scripts/partition_digests.sh CLEAVE_BIN OUT > digests.txt
set -euo pipefail
bin="$(realpath "$1")"
out="$2"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
data="${CLEAVE_TEST_DATA:-$HOME/.cache/cleave/test-data}"
rm -rf "$out"
mkdir -p "$out/parts"
"$bin" partition "$here/../examples/tiny_cnn.onnx" --part "$here/../examples/tiny_cnn.part" \
  -o "$out/tiny" --quiet >"$out/tiny.log"
for m in "$data"/light-random/*.onnx; do
  s=$(basename "$m" .onnx)
  python3 "$here/random_part.py" "$m" npu,gpu,cpu 7 >"$out/parts/$s.part"
  "$bin" partition "$m" --part "$out/parts/$s.part" -o "$out/$s" --quiet >"$out/$s.log"
  "$bin" partition "$m" --devices myriad,cpu -o "$out/$s.myriad" --quiet >"$out/$s.myriad.log"
done
cd "$out" && find . -type f ! -name '*.log' ! -path './parts/*' | sort | xargs sha256sum
