#!/usr/bin/env bash
# Runs the whole Refract test suite from a fresh checkout, with a local S3
# server (moto) for the object-storage tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
source ci/s3.sh
cargo test --workspace --all-targets --locked "$@"
