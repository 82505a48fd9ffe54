#!/usr/bin/env bash
# Delete test and binary executables of earlier builds from the shared target directory.
#
# Each change relinks every test binary under a new hash and cargo never removes the old ones:
# on a CI machine that keeps its target directory, 300 stale executables of 150-450 MB filled
# the disk (46 GB) and a test failed with "No space left on device". Kept: the executables this
# run's `cargo test` ran (read from its log, the "Running … (path)" lines) and those the
# top-level binaries of target/debug are links to.
#
# usage: prune-target.sh TEST_LOG
set -euo pipefail
log="$1"
target="${CARGO_TARGET_DIR:-$HOME/.cache/cleave/target}"
deps="$target/debug/deps"
[ -d "$deps" ] || exit 0

declare -A keep=()
while IFS= read -r path; do
  keep["$(basename "$path")"]=1
done < <(sed -n 's/^ *Running .*(\(.*\))$/\1/p' "$log")
# Without a single "Running" line the log is not a test run's: delete nothing.
[ "${#keep[@]}" -gt 0 ] || exit 0

declare -A linked=()
while IFS= read -r inode; do
  linked["$inode"]=1
done < <(find "$target/debug" -maxdepth 1 -type f -perm -u+x -printf '%i\n')

freed=0
count=0
while IFS=$'\t' read -r inode size path; do
  name=$(basename "$path")
  [ -n "${keep[$name]:-}" ] && continue
  [ -n "${linked[$inode]:-}" ] && continue
  rm -f -- "$path" "$path.d"
  freed=$((freed + size))
  count=$((count + 1))
done < <(find "$deps" -maxdepth 1 -type f -perm -u+x ! -name '*.*' -printf '%i\t%s\t%p\n')
echo "prune-target: removed $count stale executables ($((freed / 1048576)) MiB) from $deps"
