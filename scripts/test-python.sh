#!/usr/bin/env bash
# The Python package's tests, as a user gets it: `pip install .` into a fresh virtual
# environment (the source tree is never on sys.path), then the pytest suite in python/tests.
#
# The wheel is built from the test build's artifacts: pyproject.toml gives maturin the dev profile, and the
# same target directory (cargo's default, or CARGO_TARGET_DIR), so tract and the engines are
# not compiled a second time.
# The venv holds its own oracles (onnx, onnxruntime, LiteRT, OpenVINO: scripts/install/
# requirements-pytest.txt), installed from pip's cache after the first time: whether the user runs this
# inside an activated venv or with the system's Python, the tests see the same packages.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
venv="${CLEAVE_VENV:-$HOME/.cache/cleave/venv}"
rm -rf "$venv"
python3 -m venv "$venv"
py="$venv/bin/python"
start=$SECONDS
"$py" -m pip install --quiet --disable-pip-version-check -r scripts/install/requirements-pytest.txt
echo "test venv $venv: oracles installed in $((SECONDS - start)) s"
start=$SECONDS
built=$("$py" -m pip install --disable-pip-version-check -v . 2>&1) \
  || { echo "$built" | tail -n 60; exit 1; }
if grep -q 'Compiling tract' <<<"$built"; then
  echo "$built" | grep Compiling
  echo "error: the wheel build compiled tract again after the test build" >&2
  exit 1
fi
echo "pip install . took $((SECONDS - start)) s"
# The package's own checks, configured in pyproject.toml: ruff on the package and its tests,
# mypy on the package, and the stub checked against the module as built.
"$venv/bin/ruff" check python
# Without its incremental cache: a cache left by another set of packages in the venv (Ray's
# protobuf, say) can crash mypy (`Cannot find module for google`), and a clean clone has none.
"$py" -m mypy --no-incremental
# (PEP 800's @disjoint_base needs typing_extensions in the stub; every class is @final anyway.)
"$py" -m mypy.stubtest cleave._cleave --ignore-disjoint-bases
# Out of the source tree, so only the installed package can be imported as `cleave`. Every
# engine the tests use is installed above: a skipped test fails the run (conftest.py).
CLEAVE_NO_SKIPS=1 PATH="$venv/bin:$PATH" "$py" -m pytest -q python/tests "$@"
