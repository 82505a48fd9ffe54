#!/usr/bin/env bash
# Fails when `cargo run --bin cleave` (normal and build dependencies) and `cargo test
# --workspace` (plus dev-dependencies) resolve a package in tract's dependency closure
# (ALL=1: any registry package) with different features: the test build could then not
# reuse the run build's artifact and would compile it, and tract above it, again. The fix is
# to list the package, with the union of the features printed, in
# crates/workspace-hack/Cargo.toml.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=${ROOT:-tract-onnx}
units() {
  cargo tree --locked --no-dedupe --prefix none -f '{p}|{f}' "$@" \
    | sed 's/ (proc-macro)|/|/; s/ (\*)$//' | grep -v '^$' | grep -v ' (/' | sort -u
}
if [ "${ALL:-0}" = 1 ]; then
  keep=$(units --workspace -e normal,build,dev | cut -d'|' -f1)
else
  keep=$(units -p "$ROOT" -e normal,build | cut -d'|' -f1)
fi
pick() { awk -F'|' 'NR==FNR{k[$0]=1;next} ($1 in k)' <(printf '%s\n' "$keep") -; }
test=$(units --workspace -e normal,build,dev | pick)
status=0
for sel in "--workspace" "-p cleave-cli" "-p cleave-py"; do
  run=$(units $sel -e normal,build | pick)
  bad=$(comm -23 <(printf '%s\n' "$run") <(printf '%s\n' "$test") | cut -d'|' -f1 | sort -u)
  while IFS= read -r p; do
    [ -n "$p" ] || continue
    status=1
    echo "DIFFERS ($sel): $p"
    printf '%s\n' "$run" | awk -F'|' -v p="$p" '$1==p{print "  run : " $2}'
    printf '%s\n' "$test" | awk -F'|' -v p="$p" '$1==p{print "  test: " $2}'
  done <<<"$bad"
done
if [ $status = 0 ]; then
  echo "OK: the $(printf '%s\n' "$keep" | sort -u | wc -l) packages checked have the same features in the run and test builds"
fi
exit $status
