#!/usr/bin/env bash
# Run every test of cleave: fetch the test models (cached), then the whole workspace.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/fetch-test-data.sh
cargo test --workspace --locked "$@"
