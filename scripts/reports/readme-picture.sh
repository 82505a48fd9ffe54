#!/usr/bin/env bash
# Renders docs/img/partition.png, the README's picture: the part graph of the HTML report of a
# real model (MediaPipe's full-range face detector, TFLite) split between an npu and the cpu,
# as headless Chromium draws it. Needs the test data (scripts/testdata/fetch-test-data.sh), chromium and
# a built cleave (CLEAVE=path, default: cargo's debug build).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
data="${CLEAVE_TEST_DATA:-$HOME/.cache/cleave/test-data}"
cleave="${CLEAVE:-${CARGO_TARGET_DIR:-target}/debug/cleave}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '[partition]\nbackends=npu,cpu\ndefault=npu\ncomply=opcode\n\n[OPCODE]\nRESIZE_BILINEAR=cpu\nCONCATENATION=cpu\nRESHAPE=cpu\n' > "$work/face.part"
"$cleave" partition "$data/tflite/face_detection_full_range.tflite" --rules "$work/face.part" -o "$work/out" --report >/dev/null
python3 - "$work/out/face_detection_full_range.report.html" "$work/graph.html" <<'PY'
import re, sys
page = open(sys.argv[1]).read()
style = page[page.index("<style>"):page.index("</style>") + 8]
svg = page[page.index("<svg"):page.index("</svg>") + 6]
w, h = re.search(r'width="(\d+)" height="(\d+)"', svg).groups()
open(sys.argv[2], "w").write(f'<!DOCTYPE html><html><head><meta charset="utf-8">{style}</head>'
                             f'<body style="margin:0;background:#fff;zoom:0.75">{svg}</body></html>')
open(sys.argv[2] + ".size", "w").write(f"{round(int(w) * 0.75)},{round(int(h) * 0.75)}")
PY
size=$(cat "$work/graph.html.size")
chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --force-device-scale-factor=1 \
  --window-size="$size" --screenshot="$work/partition.png" "file://$work/graph.html" 2>/dev/null
mv "$work/partition.png" docs/img/partition.png
echo "wrote docs/img/partition.png ($size px, $(stat -c %s docs/img/partition.png) bytes)"
