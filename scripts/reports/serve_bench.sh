#!/usr/bin/env bash
# The serving table of issue 45 in one command: resnet50 (random weights) cut into 1, 2 and 4
# pipeline stages, each served on a one-node Ray cluster (all of this machine's cores) on each
# data plane by `cleave bench --ray`, timed from outside over HTTP (.npz bodies) at 1..16
# requests in flight; then, the deployments deleted, the whole model's best throughput on ONNX
# Runtime on the same cores (the physical limit), and every row against it; then the 1-stage
# cut with one replica per core.
#
#   scripts/reports/serve_bench.sh [CLEAVE_BIN]
#
# Needs root (unshare), a python3 first on PATH with the cleave package (pip install .) and
# scripts/install/requirements-ray.txt, and the test data
# (scripts/testdata/fetch-test-data.sh: light-random/light_resnet50.onnx). Environment:
# CLEAVE_SERVE_BENCH_PLANES (default handles,compiled), CLEAVE_SERVE_BENCH_REQUESTS (per row,
# default 40), CLEAVE_SERVE_BENCH_IN_FLIGHT (default 1,2,4,8,16), CLEAVE_SERVE_BENCH_STAGES
# (default 1,2,4), CLEAVE_SERVE_BENCH_MODEL (another ONNX model), CLEAVE_SERVE_BENCH_THREADS
# (each part's intra-op threads, as --threads takes them; default: serving's own), CLEAVE_SERVE_BENCH_VIA
# (http: the ingress's own listener, the default; proxy: through Serve's HTTP proxy),
# CLEAVE_SERVE_BENCH_HOP_MIB (instead of resnet50, a chain of elementwise ops whose every
# boundary is one tensor of that many MiB, scripts/reports/hop_model.py: the parts compute next
# to nothing, so the rows time the hops).
set -eu
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$(dirname "$HERE")")
if [ "${CLEAVE_RAY_NS:-}" != 1 ]; then
    [ "$(id -u)" = 0 ] || { echo "serve_bench: needs root for unshare" >&2; exit 2; }
    BIN=${1:-${CLEAVE_BIN:-$ROOT/target/release/cleave}}
    [ -x "$BIN" ] || { echo "serve_bench: no cleave binary at $BIN (give its path)" >&2; exit 2; }
    DATA=${CLEAVE_TEST_DATA:-$HOME/.cache/cleave/test-data}
    MODEL=${CLEAVE_SERVE_BENCH_MODEL:-$DATA/light-random/light_resnet50.onnx}
    TMP=$(mktemp -d /tmp/csb.XXXXXX)
    trap 'rm -rf "$TMP"' EXIT
    if [ -n "${CLEAVE_SERVE_BENCH_HOP_MIB:-}" ]; then
        MODEL=$TMP/hops_${CLEAVE_SERVE_BENCH_HOP_MIB}mib.onnx
        python3 "$HERE/hop_model.py" "$MODEL" "$CLEAVE_SERVE_BENCH_HOP_MIB" || exit 2
    fi
    [ -f "$MODEL" ] || { echo "serve_bench: $MODEL not found (scripts/testdata/fetch-test-data.sh)" >&2; exit 2; }
    stem=$(basename "$MODEL" .onnx)
    devices=(cpu npu cpu2 npu2)
    conns=()
    IFS=, read -ra stages <<<"${CLEAVE_SERVE_BENCH_STAGES:-1,2,4}"
    for k in "${stages[@]}"; do
        devs=$(IFS=,; echo "${devices[*]:0:$k}")
        "$BIN" partition "$MODEL" --stages "$k" --devices "$devs" -o "$TMP/$stem-s$k" >/dev/null
        conns+=("$TMP/$stem-s$k/$stem.conn.json")
    done
    one=""
    [ "${stages[0]}" = 1 ] && one=${conns[0]}
    timeout --kill-after=20 3000 unshare --net --pid --fork --kill-child --mount-proc \
        env CLEAVE_RAY_NS=1 CLEAVE_RAY_TMP="$TMP" CLEAVE_BIN_IN="$BIN" CLEAVE_ONE="$one" bash "$0" "${conns[@]}"
    exit $?
fi

# ---- inside the namespaces: loopback only ----
T=$CLEAVE_RAY_TMP
ip link set lo up
# Loopback only, so no token: without this, a ~/.ray/auth_token left by any earlier local
# ray.init (Ray >= 2.59) makes `ray start` demand it of every client.
export RAY_AUTH_MODE=disabled
export RAY_USAGE_STATS_ENABLED=0 RAY_DISABLE_DOCKER_CPU_WARNING=1 RAY_BACKEND_LOG_LEVEL=error
export RAY_SERVE_QUEUE_LENGTH_RESPONSE_DEADLINE_S=1
CORES=$(nproc)
rc=0
trap 'ray stop --force >/dev/null 2>&1' EXIT
ray start --head --node-ip-address=127.0.0.1 --port=6379 --num-cpus="$CORES" --temp-dir="$T/h" \
    --include-dashboard=false --disable-usage-stats >"$T/head.log" 2>&1 || { tail "$T/head.log"; exit 1; }
IFS=, read -ra planes <<<"${CLEAVE_SERVE_BENCH_PLANES:-handles,compiled}"
common=(--ray 127.0.0.1:6379 --resources '{"*": {}}' --runs "${CLEAVE_SERVE_BENCH_REQUESTS:-40}"
    --in-flight "${CLEAVE_SERVE_BENCH_IN_FLIGHT:-1,2,4,8,16}" --via "${CLEAVE_SERVE_BENCH_VIA:-http}"
    ${CLEAVE_SERVE_BENCH_THREADS:+--threads "$CLEAVE_SERVE_BENCH_THREADS"})
for plane in "${planes[@]}"; do
    echo "== the $plane data plane"
    "$CLEAVE_BIN_IN" bench "$@" "${common[@]}" --data-plane "$plane" || rc=$?
    # The 1-stage cut once more with a replica per core: lanes side by side instead of stages.
    if [ -n "$CLEAVE_ONE" ]; then
        "$CLEAVE_BIN_IN" bench "$CLEAVE_ONE" "${common[@]}" --data-plane "$plane" --replicas "$CORES" \
            >"$T/lanes.txt" || rc=$?
        grep -v '^on \|^p50@1: ' "$T/lanes.txt" || true
    fi
done
exit $rc
