#!/usr/bin/env bash
# Run cleave's fuzz targets (cargo-fuzz, libFuzzer) for SECONDS each, seeded with the test
# models, and fail if any target finds a crash (a panic, an overflow, a timeout).
#
#   bash scripts/fuzz.sh [SECONDS] [TARGET ...]      default: 60 s, every target
#
# Targets (fuzz/fuzz_targets): load_onnx (bytes → model → IR → inference), pipeline_onnx
# (the same, then assignment, fusion groups, partitioning, validation and each part built in
# memory; its mutator edits attributes, initializers, wiring, op types and opsets of decoded
# models), part_rules (ONE .part files; backend names that would leave the output folder),
# tensor_files (.npy and TensorProto .pb inputs), load_tflite (TFLite/circle bytes → IR, then the
# whole model, a part and the other format written back). Needs the nightly toolchain and cargo-fuzz, which it
# installs when missing. Builds with debug assertions, so integer overflow is a crash.
# engine_mutants is not a cargo-fuzz target: mutants of valid TFLite and circle models run through
# `cleave verify` on LiteRT and onert for SECONDS per format (crates/cli/tests/engine_mutants.rs,
# on the test build: nothing is compiled for it here).
# Seeds: the ONNX node-test models, the examples and the small TFLite test models
# (scripts/testdata/fetch-test-data.sh first).
# Inputs found, crash artifacts and the instrumented build live under ~/.cache/cleave/.
set -euo pipefail

secs="${1:-60}"
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(engine_mutants load_onnx pipeline_onnx part_rules tensor_files load_tflite)

status=0
fuzz_targets=()
for t in "${targets[@]}"; do
  if [ "$t" = engine_mutants ]; then
    echo "fuzzing engine_mutants for ${secs}s per format"
    found="$HOME/.cache/cleave/fuzz-artifacts/engine_mutants.found"
    mkdir -p "$(dirname "$found")"
    if (cd "$(dirname "${BASH_SOURCE[0]}")/.." && CLEAVE_MUTATE_SECS="$secs" CLEAVE_MUTATE_FOUND="$found" \
        cargo test --locked -q -p cleave-cli --test engine_mutants -- --nocapture 2>&1 \
        | grep -E '^(engine mutants|Crash|Hang|EngineCrash|test result)'); then
      echo "engine_mutants: ok, no crash"
    else
      status=1
      echo "engine_mutants: CRASH (lines to keep in crates/cli/tests/data/engine_mutants.txt: $found)"
    fi
  else
    fuzz_targets+=("$t")
  fi
done
targets=("${fuzz_targets[@]}")
[ ${#targets[@]} -gt 0 ] || exit $status

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$HOME/.cache/cleave"
data="${CLEAVE_TEST_DATA:-$cache/test-data}"

if ! rustup toolchain list | grep -q '^nightly'; then
  rustup toolchain install nightly --profile minimal
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  cargo +nightly install cargo-fuzz --locked --version 0.13.2
fi

seeds="$cache/fuzz-seeds"
if [ ! -f "$seeds/.complete-3" ]; then
  rm -rf "$seeds"
  mkdir -p "$seeds/onnx" "$seeds/part" "$seeds/tflite" "$seeds/tensor"
  [ -d "$data/node" ] || { echo "no test data in $data: run scripts/testdata/fetch-test-data.sh" >&2; exit 1; }
  find "$data/node" -name model.onnx -size -64k | while read -r m; do
    cp "$m" "$seeds/onnx/$(basename "$(dirname "$m")").onnx"
  done
  cp "$root"/examples/*.onnx "$seeds/onnx/"
  cp "$root"/examples/*.part "$seeds/part/"
  printf '[partition]\nbackends=npu,cpu\ndefault=cpu\ncomply=opname\n\n[OPNAME]\nconv1=npu\n' >"$seeds/part/opname.part"
  printf '[partition]\nbackends=acl_cl,cpu\ndefault=cpu\ncomply=opcode\n\n[OPCODE]\nDIV=acl_cl\n_=cpu\n' >"$seeds/part/opcode.part"
  printf '[partition]\nbackends=cpu,../../evil\ndefault=cpu\n[OPCODE]\nConv=../../evil\n' >"$seeds/part/pathlike.part"
  find "$data/node" -path '*test_data_set_0*' -name '*.pb' -size -16k | awk 'NR <= 200' | while read -r f; do
    cp "$f" "$seeds/tensor/$(basename "$(dirname "$(dirname "$f")")")_$(basename "$f")"
  done
  python3 - "$seeds/tensor" <<'PY'
import struct, sys
# .npy files by hand (numpy need not be installed): version 1, a dict header, the raw data.
for name, descr, shape, data in [("f32", "<f4", "(2, 3)", bytes(24)), ("i64", "<i8", "(4,)", bytes(32)),
                                 ("b1", "|b1", "()", b"\x01"), ("u8", "|u1", "(0, 5)", b"")]:
    header = ("{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)).encode() + b"\n"
    with open(f"{sys.argv[1]}/{name}.npy", "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + data)
PY
  find "$data/tflite" "$data/tflite-quant" -name '*.tflite' -size -256k -exec cp {} "$seeds/tflite/" \;
  [ -n "$(ls "$seeds/tflite")" ] || { echo "no TFLite test models in $data: run scripts/testdata/fetch-test-data.sh" >&2; exit 1; }
  touch "$seeds/.complete-3"
fi

export CARGO_TARGET_DIR="$cache/fuzz-target"
flags=(-O -a --sanitizer none)
cd "$root/fuzz"
cargo +nightly fuzz build "${flags[@]}"

for t in "${targets[@]}"; do
  case "$t" in
    part_rules) seed="$seeds/part" ;;
    tensor_files) seed="$seeds/tensor" ;;
    load_tflite) seed="$seeds/tflite" ;;
    *) seed="$seeds/onnx" ;;
  esac
  found="$cache/fuzz-corpus/$t"
  artifacts="$cache/fuzz-artifacts/$t/"
  mkdir -p "$found" "$artifacts"
  log="$(mktemp)"
  echo "fuzzing $t for ${secs}s (seeds: $(find "$seed" -type f | wc -l) files)"
  if cargo +nightly fuzz run "${flags[@]}" "$t" "$found" "$seed" -- \
      -max_total_time="$secs" -timeout=20 -rss_limit_mb=4096 -max_len=262144 \
      -artifact_prefix="$artifacts" -print_final_stats=1 >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    echo "$t: ok, $runs inputs run, no crash"
  else
    status=1
    grep -E -A1 'panicked|ERROR|Test unit written|timeout' "$log" | head -20
    echo "$t: CRASH (artifacts in $artifacts; reproduce: cd fuzz && cargo +nightly fuzz run ${flags[*]} $t ARTIFACT)"
  fi
  rm -f "$log"
done
exit $status
