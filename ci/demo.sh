#!/usr/bin/env bash
# Runs the main job, `refract demo`, on an embedded local dataset.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/setup.sh
cargo run --release --locked -p refract-cli --bin refract -- demo "$@"
