#!/usr/bin/env bash
# The README's two set-up commands, exactly as written there, the way most Python users run
# them: inside a fresh virtual environment, activated first. CI runs this beside its own run
# with the system's Python (no venv).
#
#   CLEAVE_README_VENV  where to make the venv (default: a new temporary folder, removed after)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# The fenced block under "## Set up": its lines that are not comments.
mapfile -t commands < <(awk '/^## Set up/ {s = 1} s && /^```sh/ {b = 1; next} b && /^```/ {exit} b && NF && $1 !~ /^#/' README.md)
if [ "${#commands[@]}" -ne 2 ]; then
  echo "error: README.md's set-up block has ${#commands[@]} commands, not 2" >&2
  exit 1
fi
made=""
venv="${CLEAVE_README_VENV:-}"
if [ -z "$venv" ]; then
  made="$(mktemp -d)"
  venv="$made/venv"
fi
trap '[ -n "$made" ] && rm -rf "$made"' EXIT
python3 -m venv "$venv"
# shellcheck disable=SC1091
source "$venv/bin/activate"
echo "venv $venv activated: python3 is $(command -v python3)"
for k in 0 1; do
  start=$SECONDS
  echo "README command $((k + 1)): ${commands[$k]}"
  status=0
  bash -c "${commands[$k]}" || status=$?
  echo "README command $((k + 1)) in a venv: exit $status, $((SECONDS - start)) s"
  if [ "$status" -ne 0 ]; then
    exit "$status"
  fi
done
