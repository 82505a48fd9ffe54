#!/usr/bin/env bash
# The programs the tests drive besides cleave, installed from Debian's packages when missing:
# headless Chromium (renders the HTML report), Graphviz (the DOT file), and iproute2 and
# util-linux (`ip`, `unshare`: the Ray cluster test's private network namespace).
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v dot >/dev/null || missing+=(graphviz)
command -v ip >/dev/null || missing+=(iproute2)
command -v unshare >/dev/null || missing+=(util-linux)
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing ${missing[*]} (the tests use them)"
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null; then
  sudo=(sudo)
else
  echo "error: ${missing[*]} missing and this user cannot install them;" \
    "install them (apt-get install ${missing[*]}) or run as root" >&2
  exit 1
fi
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
