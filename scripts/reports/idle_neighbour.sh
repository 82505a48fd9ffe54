#!/usr/bin/env bash
# What idle compiled deployments cost the work beside them: on a one-node Ray cluster (all of
# this machine's cores, in a loopback namespace), the whole of resnet50 (random weights) on ONNX
# Runtime at Ray's worker niceness (15), its best throughput as `bench --ray` measures the limit;
# then again with three idle compiled deployments (1, 2 and 4 stages) up. The compiled plane's
# waiting threads spin; compiled.py's WAIT_AS_IDLE says whether they wait under SCHED_IDLE.
#
#   scripts/reports/idle_neighbour.sh [CLEAVE_BIN]
#
# Needs root (unshare), scripts/install/requirements-ray.txt and the test data
# (scripts/testdata/fetch-test-data.sh). CLEAVE_SERVE_BENCH_MODEL: another ONNX model.
set -eu
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$(dirname "$HERE")")
if [ "${CLEAVE_RAY_NS:-}" != 1 ]; then
    [ "$(id -u)" = 0 ] || { echo "idle_neighbour: needs root for unshare" >&2; exit 2; }
    BIN=${1:-${CLEAVE_BIN:-$ROOT/target/release/cleave}}
    [ -x "$BIN" ] || { echo "idle_neighbour: no cleave binary at $BIN (give its path)" >&2; exit 2; }
    DATA=${CLEAVE_TEST_DATA:-$HOME/.cache/cleave/test-data}
    MODEL=${CLEAVE_SERVE_BENCH_MODEL:-$DATA/light-random/light_resnet50.onnx}
    [ -f "$MODEL" ] || { echo "idle_neighbour: $MODEL not found (scripts/testdata/fetch-test-data.sh)" >&2; exit 2; }
    TMP=$(mktemp -d /tmp/cin.XXXXXX)
    trap 'rm -rf "$TMP"' EXIT
    devices=(cpu npu cpu2 npu2)
    for k in 1 2 4; do
        devs=$(IFS=,; echo "${devices[*]:0:$k}")
        "$BIN" partition "$MODEL" --stages "$k" --devices "$devs" -o "$TMP/s$k" >/dev/null
    done
    # The serve package as a plain package for the limit's measurement (as the binary carries it).
    mkdir -p "$TMP/py/ray_app"
    cp "$ROOT"/python/cleave/serve/*.py "$TMP/py/ray_app/"
    timeout --kill-after=20 1200 unshare --net --pid --fork --kill-child --mount-proc \
        env CLEAVE_RAY_NS=1 CLEAVE_RAY_TMP="$TMP" CLEAVE_BIN_IN="$BIN" CLEAVE_MODEL="$MODEL" bash "$0"
    exit $?
fi

# ---- inside the namespaces: loopback only ----
T=$CLEAVE_RAY_TMP
ip link set lo up
# Loopback only, so no token: without this, a ~/.ray/auth_token left by any earlier local
# ray.init (Ray >= 2.59) makes `ray start` demand it of every client.
export RAY_AUTH_MODE=disabled
export RAY_USAGE_STATS_ENABLED=0 RAY_DISABLE_DOCKER_CPU_WARNING=1 RAY_BACKEND_LOG_LEVEL=error
CORES=$(nproc)
trap 'ray stop --force >/dev/null 2>&1' EXIT
ray start --head --node-ip-address=127.0.0.1 --port=6379 --num-cpus="$CORES" --temp-dir="$T/h" \
    --include-dashboard=false --disable-usage-stats >"$T/head.log" 2>&1 || { tail "$T/head.log"; exit 1; }
limit() {
    nice -n 15 env PYTHONPATH="$T/py" CORES="$CORES" MODEL="$CLEAVE_MODEL" WHEN="$1" python3 -c '
import os
import numpy as np
import onnx
from ray_app.report import physical_limit
model = os.environ["MODEL"]
g = onnx.load(model, load_external_data=False).graph
init = {i.name for i in g.initializer}
feeds = {}
for i in g.input:
    if i.name in init:
        continue
    dims = [d.dim_value or 1 for d in i.type.tensor_type.shape.dim]
    feeds[i.name] = np.random.default_rng(0).random(dims, dtype=np.float32)
r = physical_limit(model, feeds, int(os.environ["CORES"]), 40)
when, n, best, one, side = os.environ["WHEN"], r["cores"], r["limit_rps"], r["one_session_rps"], r["single_thread_sessions_rps"]
print(f"{when}: {best:.1f} req/s (one {n}-thread session {one:.1f}, {n} one-thread sessions side by side {side:.1f})")
'
}
limit "no deployment"
for k in 1 2 4; do
    "$CLEAVE_BIN_IN" serve "$T/s$k/"*.conn.json --name "idle$k" --ray 127.0.0.1:6379 --resources '{"*": {}}' \
        --data-plane compiled --detach >"$T/serve$k.log" 2>&1 || { tail "$T/serve$k.log"; exit 1; }
done
sleep 20
limit "3 idle compiled deployments"
