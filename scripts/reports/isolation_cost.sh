#!/usr/bin/env bash
# What running LiteRT in a worker process costs (docs/figures.md, "What an engine worker
# costs"): the same commands with the engine in a worker (the default) and in process
# (CLEAVE_ISOLATE=0), interleaved, on MediaPipe's full-range face detector split into parts
# with its ADDs on a second backend (many small parts: the worst case for a cost per call).
#
#   bash scripts/reports/isolation_cost.sh [CLEAVE] [ROUNDS]
#
# Prints, per mode: `cleave bench`'s median latency of the whole model on LiteRT and of the
# parts run one after another (its JSON, over ROUNDS x 20 runs), the part calls per
# request, the cost per call derived from them, and the wall time and peak RSS of a whole
# `cleave run` (/usr/bin/time -v: the worker's start and the model's load included).
set -euo pipefail
cleave="${1:-${CARGO_TARGET_DIR:-target}/debug/cleave}"
rounds="${2:-3}"
data="${CLEAVE_TEST_DATA:-$HOME/.cache/cleave/test-data}"
model="$data/tflite/face_detection_full_range.tflite"
[ -f "$model" ] || { echo "no $model: run scripts/testdata/fetch-test-data.sh" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf '[partition]\nbackends=npu,cpu\ndefault=npu\ncomply=opcode\n\n[OPCODE]\nADD=cpu\n' >"$work/r.part"
"$cleave" partition "$model" --rules "$work/r.part" -o "$work/p" >/dev/null
conn=$(ls "$work"/p/*.conn.json)
parts=$(python3 -c "import json,sys; print(len(json.load(open(sys.argv[1]))['parts']))" "$conn")
echo "model: $(basename "$model"), $parts parts"
for mode in worker in-process; do : >"$work/$mode.run"; done
for r in $(seq "$rounds"); do
  for mode in worker in-process; do
    iso=1; [ "$mode" = in-process ] && iso=0
    CLEAVE_ISOLATE=$iso "$cleave" bench "$conn" --runs 20 --json 2>/dev/null >"$work/$mode.$r.bench"
    CLEAVE_ISOLATE=$iso /usr/bin/time -v "$cleave" run "$conn" -o "$work/out" 2>&1 >/dev/null \
      | awk -F': ' '/Elapsed \(wall clock\)/ {w=$2} /Maximum resident/ {m=$2} END {print w, m}' >>"$work/$mode.run"
  done
done
python3 - "$work" "$parts" <<'PY'
import glob, json, statistics, sys
work, parts = sys.argv[1], int(sys.argv[2])
def wall(s):
    m, sec = s.split(":")[-2:]
    return float(m) * 60 + float(sec)
rows = {}
for mode in ("worker", "in-process"):
    benches = [json.load(open(p)) for p in glob.glob(f"{work}/{mode}.*.bench")]
    med = lambda name: statistics.median(
        next(m["median_ms"] for m in b["modes"] if m["mode"] == name) for b in benches)
    runs = [l.split() for l in open(f"{work}/{mode}.run") if l.strip()]
    rows[mode] = (med("monolithic"), med("partitioned"),
                  statistics.median(wall(w) for w, _ in runs), max(int(k) for _, k in runs) / 1024)
print(f"{'mode':<11} {'whole ms':>9} {'parts ms':>9} {'run s':>7} {'run peak MiB':>13}")
for mode, (m, p, w, k) in rows.items():
    print(f"{mode:<11} {m:9.2f} {p:9.2f} {w:7.2f} {k:13.0f}")
(wm, wp, ww, _), (im, ip, iw, _) = rows["worker"], rows["in-process"]
print(f"per request: whole +{wm - im:.2f} ms (1 call), parts +{wp - ip:.2f} ms ({parts} calls): "
      f"{(wp - ip) / parts * 1e3:.0f} us a call; a whole `cleave run` +{(ww - iw) * 1e3:.0f} ms")
PY
