#!/usr/bin/env bash
# Installs what building Refract needs beyond the Rust toolchain.
# Today that is only `protoc` (lance-file, lance-encoding and lance-table run prost-build).
set -euo pipefail

if ! command -v protoc >/dev/null 2>&1; then
  echo "ci/setup.sh: protoc not found, installing protobuf-compiler" >&2
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq protobuf-compiler >/dev/null
fi
protoc --version >&2
