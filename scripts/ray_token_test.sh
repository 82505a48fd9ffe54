#!/usr/bin/env bash
# `cleave serve --ray` against clusters started after a token file exists, with no RAY_AUTH_*
# variable set anywhere:
#   1. a cluster that asks for the token (`ray start` found ~/.ray/auth_token): cleave sends it,
#      deploys, and the route answers; the exported app (`serve run app:app`) does the same;
#   2. a cluster started with RAY_AUTH_MODE=disabled on the same machine: cleave sends nothing
#      (a client in token mode would break it) and serves;
#   3. the first cluster again, with the token file gone: one line saying where to put it, exit 2.
#
#   scripts/ray_token_test.sh CLEAVE_BIN CONN.json INPUTS.npz
#
# Needs root (unshare), and a python3 first on PATH with the cleave package (pip install .) and
# scripts/install/requirements-ray.txt. Runs in network and
# PID namespaces with only loopback, with HOME a fresh folder: nothing leaves the machine and
# the user's own ~/.ray is never touched.
set -u
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [ "${CLEAVE_RAY_NS:-}" != 1 ]; then
    [ $# -eq 3 ] || { echo "usage: $0 CLEAVE_BIN CONN.json INPUTS.npz" >&2; exit 2; }
    [ "$(id -u)" = 0 ] || { echo "ray_token_test: needs root for unshare" >&2; exit 2; }
    T=$(mktemp -d /tmp/rtt.XXXXXX)
    timeout --kill-after=20 "${CLEAVE_RAY_TEST_LIMIT_S:-600}" \
        unshare --net --pid --fork --kill-child --mount-proc \
        env CLEAVE_RAY_NS=1 CLEAVE_RAY_TMP="$T" bash "$0" "$(realpath "$1")" "$(realpath "$2")" "$(realpath "$3")"
    rc=$?
    rm -rf "$T"
    exit $rc
fi

# ---- inside the namespaces ----
CLEAVE=$1 CONN=$2 INPUTS=$3 T=$CLEAVE_RAY_TMP
ip link set lo up
unset RAY_AUTH_MODE RAY_AUTH_TOKEN RAY_AUTH_TOKEN_PATH RAY_ADDRESS
export HOME=$T/home RAY_USAGE_STATS_ENABLED=0 RAY_BACKEND_LOG_LEVEL=error
mkdir -p "$HOME/.ray"
python3 -c 'import secrets; print(secrets.token_hex(32))' >"$HOME/.ray/auth_token"
chmod 600 "$HOME/.ray/auth_token"
cleanup() { ray stop --force >/dev/null 2>&1; }
trap cleanup EXIT
passed=0 failed=0
check() {  # check NAME STATUS DETAIL
    if [ "$2" = 0 ]; then passed=$((passed + 1)); echo "PASS $1"; else failed=$((failed + 1)); echo "FAIL $1: $3"; fi
}
start_head() {  # start_head PORT [ENV...]
    local port=$1; shift
    env "$@" ray start --head --node-ip-address=127.0.0.1 --port="$port" --num-cpus=2 --resources='{"npu": 4}' --temp-dir="$T/h$port" \
        --include-dashboard=false --object-store-memory=100000000 --disable-usage-stats >"$T/head$port.log" 2>&1
}
# POSTs the inputs to the route; the outputs' names on stdout.
infer() {
    python3 - "$1" "$INPUTS" <<'EOF'
import io, sys, urllib.request
import numpy as np
url, inputs = sys.argv[1], sys.argv[2]
req = urllib.request.Request(url, data=open(inputs, "rb").read(), method="POST")
with urllib.request.urlopen(req, timeout=60) as r:
    with np.load(io.BytesIO(r.read()), allow_pickle=False) as z:
        print(",".join(sorted(z.files)))
EOF
}

echo "== a cluster that asks for the token"
start_head 6380 || { tail "$T/head6380.log"; exit 1; }
out=$("$CLEAVE" serve "$CONN" --ray 127.0.0.1:6380 --detach --name tok --http-port 8010 --ingress-port off 2>&1)
rc=$?
check "cleave serve deploys on a cluster that asks for a token, with no variable set" $rc "$out"
grep -q "asks for a token; sending" <<<"$out"
check "and says it sent the token" $? "$out"
got=$(infer http://127.0.0.1:8010/tok 2>&1)
check "its route answers" $? "$got"

echo "== the exported app on the same cluster"
"$CLEAVE" serve "$CONN" --export "$T/app" >/dev/null 2>&1
out=$(cd "$T/app" && RAY_ADDRESS=127.0.0.1:6380 timeout 180 serve run --non-blocking app:app 2>&1)
rc=$?
check "serve run of the exported app sends the token" $rc "$(tail -5 <<<"$out")"
name=$(basename "$CONN" .conn.json)
# --non-blocking returns before the replicas are up: a few tries.
for _ in $(seq 30); do
    got=$(infer "http://127.0.0.1:8000/$name" 2>&1) && break
    sleep 2
done
check "the exported app's route answers" $? "$got"

echo "== the token file gone"
mv "$HOME/.ray/auth_token" "$T/token.bak"
out=$(timeout 120 "$CLEAVE" serve "$CONN" --ray 127.0.0.1:6380 --detach --name tok2 2>&1)
rc=$?
[ $rc = 2 ] && [ "$(wc -l <<<"$out")" = 1 ] && grep -q "asks for a token" <<<"$out" && grep -q "auth_token" <<<"$out"
check "a cluster that asks for a token cleave does not have: one line, exit 2" $? "rc $rc: $out"
mv "$T/token.bak" "$HOME/.ray/auth_token"
ray stop --force >/dev/null 2>&1

echo "== a cluster without authentication, the token file present"
start_head 6381 RAY_AUTH_MODE=disabled || { tail "$T/head6381.log"; exit 1; }
out=$("$CLEAVE" serve "$CONN" --ray 127.0.0.1:6381 --detach --name open --http-port 8011 --ingress-port off 2>&1)
rc=$?
check "cleave serve deploys on a cluster without authentication" $rc "$out"
! grep -q "token" <<<"$out"
check "and sends no token" $? "$out"
got=$(infer http://127.0.0.1:8011/open 2>&1)
check "its route answers" $? "$got"

echo "ray_token_test: $passed passed, $failed failed"
[ $failed = 0 ]
