#!/usr/bin/env bash
# The programs the view tests check cleave's reports with: headless Chromium (the HTML page)
# and Graphviz (the DOT file). Installed from Debian's packages when missing.
set -euo pipefail
if command -v chromium >/dev/null && command -v dot >/dev/null; then
  exit 0
fi
echo "installing chromium and graphviz (the view tests render cleave's reports with them)"
if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null; then
  sudo=(sudo)
else
  echo "error: chromium and graphviz are missing and this user cannot install them;" \
    "install them (apt-get install chromium graphviz) or run as root" >&2
  exit 1
fi
"${sudo[@]}" apt-get update -qq
DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq chromium graphviz >/dev/null
