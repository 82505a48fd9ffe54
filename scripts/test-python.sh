#!/usr/bin/env bash
# The Python package's tests, as a user gets it: `pip install .` into a fresh virtual
# environment (the source tree is never on sys.path), then the pytest suite in python/tests.
#
# The wheel is built from the test build's artifacts: pyproject.toml gives maturin the dev profile, and the
# same target directory (cargo's default, or CARGO_TARGET_DIR), so tract and the engines are
# not compiled a second time.
# The venv sees the system's site-packages for the oracles (onnx, onnxruntime, LiteRT, Ray,
# installed by fetch-test-data.sh); pytest and mypy come into the venv itself.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv="${CLEAVE_VENV:-$HOME/.cache/cleave/venv}"
rm -rf "$venv"
python3 -m venv --system-site-packages "$venv"
py="$venv/bin/python"
"$py" -m pip install --quiet --disable-pip-version-check pytest==8.4.2 mypy==1.18.2
start=$SECONDS
built=$("$py" -m pip install --disable-pip-version-check -v . 2>&1) \
  || { echo "$built" | tail -n 60; exit 1; }
if grep -q 'Compiling tract' <<<"$built"; then
  echo "$built" | grep Compiling
  echo "error: the wheel build compiled tract again after the test build" >&2
  exit 1
fi
echo "pip install . took $((SECONDS - start)) s"
# Out of the source tree, so only the installed package can be imported as `cleave`.
PATH="$venv/bin:$PATH" "$py" -m pytest -q -p no:cacheprovider python/tests "$@"
