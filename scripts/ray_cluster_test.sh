#!/usr/bin/env bash
# Serves cleave partitions on a real two-node Ray cluster and checks them end to end, with
# python/cleave/serve/ (the application cleave carries, run as a folder) and the checks in
# scripts/ray_cluster_test.py.
#
#   scripts/ray_cluster_test.sh CONN.json|DIR [CONN.json|DIR ...]
#
# A DIR stands for every *.conn.json under it. Needs root (unshare), ip, and a python3 first
# on PATH with the cleave package (pip install .), scripts/install/requirements-ray.txt and
# scripts/install/requirements-test.txt installed.
#
# Ray binds to and looks up the machine's external address even when told 127.0.0.1, so the
# whole cluster lives in network and PID namespaces of its own whose only interface is
# loopback: no packet can leave, `ray stop --force` sees only this run's processes, and when
# the run ends the kernel kills whatever Ray left behind. The head declares the custom
# resources cpu_dev and cpu2, the worker npu; backend cpu is mapped to cpu_dev by
# --resources, cpu2 and npu follow the application's default rule. The worker node runs in a
# nested PID namespace so that it can be killed whole, like a machine losing power.
#
# Environment: CLEAVE_RAY_DRIVER=decoder runs scripts/ray_decoder_test.py (decoder partitions
# served with streaming, a stage killed mid-generation) instead of the checks, and
# CLEAVE_RAY_DECODER_TOKENS the tokens each completion makes (default 24);
# CLEAVE_RAY_NODE_MEMORY gives each node that many bytes of Ray's memory resource;
# CLEAVE_RAY_DRIVER=bench runs scripts/reports/ray_bench.py's measurements on the same
# cluster instead of the checks, on each data plane of CLEAVE_RAY_BENCH_PLANES (default
# handles,compiled); CLEAVE_RAY_TEST_LIMIT_S (default 1200) bounds the whole run;
# CLEAVE_RAY_TEST_REQUESTS (default 60) requests per bench row; CLEAVE_BIN, a cleave binary
# to also serve and bench through (`cleave serve --ray`, `cleave bench --ray`);
# CLEAVE_RAY_TEST_PLANE, the data plane the checks serve every partition on (default: the
# application's); CLEAVE_RAY_TEST_BASELINE, a 1-stage cut of the first partition's model that the binary's
# bench runs beside it for the cost per hop.
set -u

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
APP=$ROOT/python/cleave/serve
LIMIT=${CLEAVE_RAY_TEST_LIMIT_S:-1200}

if [ "${CLEAVE_RAY_NS:-}" != 1 ]; then
    if [ $# -eq 0 ]; then
        echo "usage: $0 CONN.json|DIR [...]" >&2
        exit 2
    fi
    [ "$(id -u)" = 0 ] || { echo "ray_cluster_test: needs root for unshare" >&2; exit 2; }
    for t in unshare ip timeout python3; do
        command -v "$t" >/dev/null || { echo "ray_cluster_test: $t not found" >&2; exit 2; }
    done
    python3 -c 'import ray, ray.serve, onnx, onnxruntime, numpy' 2>/dev/null || {
        echo "ray_cluster_test: $(command -v python3) lacks Ray or ONNX: pip install -r scripts/install/requirements-ray.txt -r scripts/install/requirements-test.txt" >&2
        exit 2
    }
    # The parts run on cleave's runtime, through the installed package's extension.
    python3 -c 'import cleave._cleave' 2>/dev/null || {
        echo "ray_cluster_test: $(command -v python3) has no cleave package: pip install . there (scripts/test.sh uses its venv, CLEAVE_RAY_VENV)" >&2
        exit 2
    }
    conns=()
    for a in "$@"; do
        if [ -d "$a" ]; then
            while IFS= read -r f; do conns+=("$(realpath "$f")"); done < <(find "$a" -name '*.conn.json' | sort)
        elif [ -f "$a" ]; then
            conns+=("$(realpath "$a")")
        else
            echo "ray_cluster_test: $a is neither a conn.json nor a folder" >&2
            exit 2
        fi
    done
    [ ${#conns[@]} -gt 0 ] || { echo "ray_cluster_test: no *.conn.json in $*" >&2; exit 2; }
    # Short path: Ray's Unix sockets live under it and their names may not pass 107 bytes.
    TMP=$(mktemp -d /tmp/crt.XXXXXX)
    start=$(date +%s)
    # --kill-child: if this outer process dies, the namespace's first process gets SIGKILL,
    # and with it every process in the namespace. timeout's KILL is the last resort.
    timeout --kill-after=20 "$LIMIT" \
        unshare --net --pid --fork --kill-child --mount-proc \
        env CLEAVE_RAY_NS=1 CLEAVE_RAY_TMP="$TMP" bash "$0" "${conns[@]}"
    rc=$?
    [ $rc = 124 ] && echo "ray_cluster_test: TIMED OUT after ${LIMIT}s"
    du -sh "$TMP" 2>/dev/null | awk '{print "ray_cluster_test: temp dir peaked at " $1 " (removed)"}'
    rm -rf "$TMP"
    echo "ray_cluster_test: wall time $(( $(date +%s) - start ))s, exit $rc"
    exit $rc
fi

# ---- inside the namespaces: this shell is PID 1 ----
T=$CLEAVE_RAY_TMP
ip link set lo up
# Loopback only, so no token: without this, a ~/.ray/auth_token left by any earlier local
# ray.init (Ray >= 2.59) makes `ray start` demand it of every client.
export RAY_AUTH_MODE=disabled
export RAY_USAGE_STATS_ENABLED=0 RAY_DISABLE_DOCKER_CPU_WARNING=1 RAY_BACKEND_LOG_LEVEL=error
# Two busy cores make replicas slow to report their queue length; the default 0.1 s deadline
# only floods the log with warnings.
export RAY_SERVE_QUEUE_LENGTH_RESPONSE_DEADLINE_S=1
# Declare a node dead after ~3 s of silence instead of Ray's default ~30 s, so the failure
# test takes seconds. Read by the GCS at start.
export RAY_health_check_period_ms=1000 RAY_health_check_timeout_ms=1000 RAY_health_check_failure_threshold=3
PORT=6379
ADDR=127.0.0.1:$PORT
# Each node's object store; measuring 16 MiB tensors with 16 in flight needs more than the checks.
OBJ=${CLEAVE_RAY_OBJECT_STORE_BYTES:-200000000}
# Each node's memory resource in bytes (Ray's default: what the machine has), which actors
# that ask for memory (a decoder's stages: their weights) are placed by.
NODE_MEMORY=${CLEAVE_RAY_NODE_MEMORY:-}

cleanup() {
    if [ -s "$T/worker.pid" ]; then
        kill -KILL "$(cat "$T/worker.pid")" 2>/dev/null
    fi
    ray stop --force >/dev/null 2>&1
}
trap cleanup EXIT
# PID 1 ignores signals it does not handle; take TERM/INT so timeout and Ctrl-C still clean up.
trap 'echo "ray_cluster_test: interrupted"; exit 130' TERM INT

echo "== starting head (cpu_dev, cpu2) on $ADDR"
ray start --head --node-ip-address=127.0.0.1 --port=$PORT --num-cpus=1 \
    --resources='{"cpu_dev": 1, "cpu2": 1}' --temp-dir="$T/h" --include-dashboard=false \
    --object-store-memory=$OBJ ${NODE_MEMORY:+--memory=$NODE_MEMORY} --min-worker-port=10100 --max-worker-port=10999 \
    --dashboard-agent-listen-port=52365 --disable-usage-stats >"$T/head.log" 2>&1 \
    || { tail -20 "$T/head.log"; echo "ray_cluster_test: 0 passed, 1 failed"; exit 1; }

# The worker node, restartable by the checks after they kill it.
cat >"$T/start_worker.sh" <<EOF
unshare --pid --fork --kill-child --mount-proc \\
    ray start --address=$ADDR --node-ip-address=127.0.0.1 --num-cpus=1 \\
    --resources='{"npu": 1}' --temp-dir="$T/w" --object-store-memory=$OBJ ${NODE_MEMORY:+--memory=$NODE_MEMORY} \\
    --min-worker-port=11000 --max-worker-port=11999 --dashboard-agent-listen-port=52366 \\
    --disable-usage-stats --block >>"$T/worker.log" 2>&1 &
echo \$! >"$T/worker.pid"
EOF
echo "== starting worker (npu)"
bash "$T/start_worker.sh"

# CLEAVE_RAY_DRIVER=bench: measure instead of check (scripts/reports/ray_bench.py).
DRIVER=$HERE/ray_cluster_test.py
EXTRA=()
if [ "${CLEAVE_RAY_DRIVER:-}" = bench ]; then
    DRIVER=$HERE/reports/ray_bench.py
    EXTRA=(--planes "${CLEAVE_RAY_BENCH_PLANES:-handles,compiled}")
elif [ "${CLEAVE_RAY_DRIVER:-}" = decoder ]; then
    DRIVER=$HERE/ray_decoder_test.py
    EXTRA=(${CLEAVE_RAY_DECODER_TOKENS:+--tokens "$CLEAVE_RAY_DECODER_TOKENS"})
elif [ -n "${CLEAVE_RAY_TEST_PLANE:-}" ]; then
    EXTRA=(--data-plane "$CLEAVE_RAY_TEST_PLANE")
fi
python3 "$DRIVER" --app "$APP" --address "$ADDR" --tmp "$T" "${EXTRA[@]}" \
    --worker-pidfile "$T/worker.pid" --worker-start "$T/start_worker.sh" \
    --resources '{"cpu": {"resources": {"cpu_dev": 0.01}}}' \
    --requests "${CLEAVE_RAY_TEST_REQUESTS:-60}" --request-timeout 10 \
    ${CLEAVE_BIN:+--cleave "$CLEAVE_BIN"} ${CLEAVE_RAY_TEST_BASELINE:+--baseline "$CLEAVE_RAY_TEST_BASELINE"} "$@"
rc=$?
du -sh "$T" | awk '{print "ray_cluster_test: Ray temp dir " $1}'
if [ $rc -ne 0 ]; then
    for f in "$T"/h/session_latest/logs/serve/controller_*.log; do
        [ -f "$f" ] && { echo "--- tail of $f"; tail -15 "$f"; }
    done
fi
exit $rc
