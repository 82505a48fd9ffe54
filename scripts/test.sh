#!/usr/bin/env bash
# Run every test of cleave: install the renderers the view tests drive, fetch the test models
# (cached), then the whole workspace, then the Python package (scripts/test-python.sh).
# Prints one line per stage with its wall time, and ends with one line
# "cleave tests: N passed, M failed" summed over all test binaries.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
began=$SECONDS
stage_start=$SECONDS
stage_done() { # name
  echo "test.sh: $1 took $((SECONDS - stage_start)) s"
  stage_start=$SECONDS
}
bash scripts/install/install-test-tools.sh
stage_done "test tools (Chromium, Graphviz, iproute2)"
bash scripts/testdata/fetch-test-data.sh
stage_done "test data and Python oracles"
# The OpenVINO and onert tests skip themselves where those are missing; here they were just
# installed, so a skip would hide a failure.
export CLEAVE_REQUIRE_OPENVINO=1
export CLEAVE_REQUIRE_ONERT=1
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
# Served parts run on cleave's runtime through the Python package's extension, so the Ray
# cluster tests (crates/cli/tests/ray.rs) wait for the package's venv (a whole run only).
ray_tests=(two_node_ray_cluster rays_token)
if [ "$#" -eq 0 ]; then
  cargo test --workspace --locked --no-fail-fast -- "${ray_tests[@]/#/--skip=}" 2>&1 | tee "$log" || status=$?
else
  cargo test --workspace --locked --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
fi
stage_done "cargo test (build and run)"
# The Python package, installed with pip into a fresh venv, and its pytest suite (whole runs).
if [ "$#" -eq 0 ]; then
  bash scripts/test-python.sh 2>&1 | tee -a "$log" || status=$?
  stage_done "Python package (venv, pip install ., pytest)"
  if [ -z "${CLEAVE_SKIP_RAY:-}" ]; then
    venv="${CLEAVE_VENV:-$HOME/.cache/cleave/venv}"
    # Ray beside the wheel, as every node of a cluster has them (from pip's cache after the first time).
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r scripts/install/requirements-ray.txt
    CLEAVE_RAY_VENV="$venv" cargo test --workspace --locked --no-fail-fast --test ray 2>&1 | tee -a "$log" || status=$?
    stage_done "Ray cluster tests (the venv's cleave package and Ray)"
  fi
fi
# cargo's "test result: ... N passed; M failed" lines and pytest's "N passed, M failed in Ts".
summary=$(awk '/^test result:/ || (/ in [0-9.]+s( =+)?$/ && /(passed|failed|error)/) { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^(failed|errors?)/) f += $i } } END { printf "%d passed, %d failed", p, f }' "$log")
# A whole run (no filter) knows every test binary in use: drop the ones earlier builds left.
if [ "$#" -eq 0 ]; then bash scripts/prune-target.sh "$log"; fi
echo "test.sh: all stages took $((SECONDS - began)) s"
echo "cleave tests: $summary"
exit "$status"
