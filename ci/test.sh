#!/usr/bin/env bash
# Runs the whole Refract test suite from a fresh checkout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
cargo test --workspace --all-targets --locked "$@"
