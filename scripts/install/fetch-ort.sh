#!/usr/bin/env bash
# Unpack ONNX Runtime's shared library from the PyPI onnxruntime wheel, where cleave looks for
# it by default (~/.cache/cleave/ort/libonnxruntime.so.1.31.1; ORT_DYLIB_PATH overrides).
set -euo pipefail
VERSION="1.31.1"
dest="${CLEAVE_ORT_DIR:-$HOME/.cache/cleave/ort}"
lib="libonnxruntime.so.$VERSION"
if [ -f "$dest/$lib" ]; then
  echo "ONNX Runtime library already in $dest/$lib"
  exit 0
fi
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "onnxruntime==$VERSION"
whl="$(ls "$tmp"/onnxruntime-*.whl)"
mkdir -p "$dest"
python3 - "$whl" "$lib" "$dest" <<'PY'
import sys, zipfile, pathlib
whl, lib, dest = sys.argv[1:]
with zipfile.ZipFile(whl) as z:
    names = [n for n in z.namelist() if n.endswith("/" + lib)]
    if not names:
        sys.exit(f"{whl}: no {lib} inside")
    out = pathlib.Path(dest) / lib
    tmp = out.with_suffix(".tmp")
    tmp.write_bytes(z.read(names[0]))
    tmp.chmod(0o755)
    tmp.replace(out)
PY
echo "ONNX Runtime library: $dest/$lib"
