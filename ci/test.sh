#!/usr/bin/env bash
# Runs the whole Refract test suite from a fresh checkout, with a local S3
# server (moto) and a local Azure Blob emulator (Azurite) for the
# object-storage tests: the Rust suite and doctests, then the Python
# package's pytest suite (ci/python.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
# A clean checkout builds once: incremental state would only cost disk space.
export CARGO_INCREMENTAL=0
source ci/s3.sh
source ci/azure.sh
cargo test --workspace --all-targets --locked "$@"
# `--all-targets` leaves out doctests: every crate's entry-point example.
cargo test --workspace --doc --locked
bash ci/python.sh
