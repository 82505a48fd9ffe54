#!/usr/bin/env bash
# Big models: partitions a synthetic model with GB gigabytes of external weights into parts
# that share one weights file, and prints the wall time and peak resident memory next to the
# time of reading the weights once, with the ratio, all measured in this one run.
#
#   bash scripts/reports/bench-big-weights.sh [GB] [CLEAVE_BINARY]
#
# Two sources: `one` keeps every weight in one data file (the shared file is a copy of it,
# offsets kept), `many` keeps each in its own file (one streamed copy, tensor by tensor). The read
# time is `cat` of the data files just written, so from the page cache (warm), and with
# O_DIRECT (cold, from the disk). Needs python3 with numpy and onnx, GNU time (apt-get install
# time), and about 2 x GB of free disk under ${TMPDIR:-/tmp}; everything is removed at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
gb="${1:-3}"
cleave="${2:-${CARGO_TARGET_DIR:-$HOME/.cache/cleave/target}/debug/cleave}"
[ -x "$cleave" ] || { echo "error: $cleave is not built (cargo build -p cleave-cli, or pass the binary)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "error: /usr/bin/time missing: apt-get install time" >&2; exit 2; }
dir="$(mktemp -d "${TMPDIR:-/tmp}/cleave-big.XXXXXX")"
trap 'rm -rf "$dir"' EXIT

seconds() { /usr/bin/time -f %e "$@" 2>&1 >/dev/null | tail -n 1; }

for files in one many; do
    src="$dir/$files"
    python3 scripts/testdata/make_big_model.py "$src" --gb "$gb" --files "$files" >/dev/null
    shopt -s nullglob
    data=("$src"/*.weights "$src"/*.bin)
    shopt -u nullglob
    bytes=$(cat "${data[@]}" | wc -c)
    warm=$(seconds cat "${data[@]}")
    cold=$(seconds sh -c 'for f; do dd if="$f" iflag=direct bs=16M status=none; done' sh "${data[@]}")
    log="$dir/time-$files.txt"
    /usr/bin/time -v "$cleave" partition "$src/big.onnx" --stages 4 --external-data shared -o "$src/work" >"$dir/out-$files.txt" 2>"$log"
    wall=$(awk -F': ' '/Elapsed \(wall clock\)/ { n = split($2, t, ":"); s = 0; for (i = 1; i <= n; i++) s = s * 60 + t[i]; print s }' "$log")
    rss_kb=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$log")
    how=$(grep -o 'a copy of[^;]*\|streamed[^;]*' "$dir/out-$files.txt" | head -n 1)
    awk -v f="$files" -v b="$bytes" -v w="$wall" -v r="$rss_kb" -v warm="$warm" -v cold="$cold" -v how="$how" 'BEGIN {
        printf "%-4s %.2f GB of weights: partition --stages 4 --external-data shared %.2f s, peak RSS %.0f MB (%s)\n", f, b / 1e9, w, r / 1024, how
        printf "     read once: cat %.2f s (page cache), O_DIRECT %.2f s (disk); partition / read = %.2f (warm), %.2f (cold)\n", warm, cold, w / (warm > 0 ? warm : 0.01), w / (cold > 0 ? cold : 0.01)
    }'
    rm -rf "$src"
done
