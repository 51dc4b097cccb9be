#!/usr/bin/env bash
# Builds the `refract` Python package and runs its pytest suite. Run by
# ci/test.sh after the Rust tests, with the S3 server of ci/s3.sh exported.
#
# The extension is the `python` workspace member's cdylib, built here by
# `cargo build --workspace --all-targets`: the same feature resolution as
# `cargo test --workspace --all-targets`, so it reuses every artifact of the
# Rust test run (building the package alone, as `maturin develop` or
# `pip install ./python` do, resolves dependency features differently and
# recompiles Lance and Arrow). The package is staged under target/ and put on
# the virtualenv's path with a .pth file.
set -euo pipefail
cd "$(dirname "$0")/.."

PY_VENV="${REFRACT_CI_VENV:-$PWD/target/ci-venv}"
if [ ! -x "$PY_VENV/bin/python" ]; then
  python3 -m venv "$PY_VENV"
fi
if ! "$PY_VENV/bin/python" -c 'import pyarrow, pytest' > /dev/null 2>&1; then
  echo "ci/python.sh: installing pyarrow and pytest into $PY_VENV" >&2
  "$PY_VENV/bin/pip" install -q 'pyarrow>=15' pytest
fi
# The peer, side by side (test_optimize.py compares compact_files with
# pylance's), and pandas (write_dataset converts frames through pyarrow).
if ! "$PY_VENV/bin/python" -c 'import lance, pandas' > /dev/null 2>&1; then
  echo "ci/python.sh: installing pylance and pandas into $PY_VENV" >&2
  "$PY_VENV/bin/pip" install -q 'pylance==14.0.2' pandas
fi
# refract.ray's tests (python/tests/test_ray.py) run on a local Ray cluster.
if ! "$PY_VENV/bin/python" -c 'import ray' > /dev/null 2>&1; then
  echo "ci/python.sh: installing ray into $PY_VENV" >&2
  "$PY_VENV/bin/pip" install -q 'ray==2.60.0'
fi
# refract.dask's tests (python/tests/test_dask.py) run on a local Dask cluster.
if ! "$PY_VENV/bin/python" -c 'import dask, distributed' > /dev/null 2>&1; then
  echo "ci/python.sh: installing dask and distributed into $PY_VENV" >&2
  "$PY_VENV/bin/pip" install -q 'dask==2026.8.0' 'distributed==2026.8.0'
fi

# pyo3 links the `python3` on PATH (the venv's base interpreter): abi3 makes the
# extension load in any CPython >= 3.9.
cargo build --workspace --all-targets --locked

STAGE="$PWD/target/python-package"
rm -rf "$STAGE"
mkdir -p "$STAGE"
cp -r python/refract "$STAGE/refract"
cp target/debug/lib_refract.so "$STAGE/refract/_refract.abi3.so"
SITE="$("$PY_VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$STAGE" > "$SITE/refract-ci.pth"

# The local Ray cluster of test_ray.py: no usage reporting, no auth token, its
# session files under target/ (removed afterwards; the socket paths must stay
# short).
export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=disabled
export RAY_TMPDIR="${RAY_TMPDIR:-$PWD/target/ray-tmp}"
rm -rf "$RAY_TMPDIR"
mkdir -p "$RAY_TMPDIR"
trap 'rm -rf "$RAY_TMPDIR"' EXIT

# The pytest script, not `python -m pytest`: the latter would put the
# current directory first on sys.path.
"$PY_VENV/bin/pytest" -q -p no:cacheprovider python/tests "$@"
