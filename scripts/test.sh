#!/usr/bin/env bash
# Run every test of cleave: install the renderers the view tests drive, fetch the test models
# (cached), then the whole workspace, then the Python package (scripts/test-python.sh).
# Ends with one line "cleave tests: N passed, M failed" summed over all test binaries.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/install-test-tools.sh
bash scripts/fetch-test-data.sh
# The OpenVINO tests skip themselves where it is missing; here it was just installed, so a
# skip would hide a failure.
export CLEAVE_REQUIRE_OPENVINO=1
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
# The Python package, installed with pip into a fresh venv, and its pytest suite (whole runs).
if [ "$#" -eq 0 ]; then
  bash scripts/test-python.sh 2>&1 | tee -a "$log" || status=$?
fi
# cargo's "test result: ... N passed; M failed" lines and pytest's "N passed, M failed in Ts".
summary=$(awk '/^test result:/ || (/ in [0-9.]+s( =+)?$/ && /(passed|failed|error)/) { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^(failed|errors?)/) f += $i } } END { printf "%d passed, %d failed", p, f }' "$log")
# A whole run (no filter) knows every test binary in use: drop the ones earlier builds left.
if [ "$#" -eq 0 ]; then bash scripts/prune-target.sh "$log"; fi
echo "cleave tests: $summary"
exit "$status"
