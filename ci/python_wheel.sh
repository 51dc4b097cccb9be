#!/usr/bin/env bash
# The README's install path end to end: `pip install ./python` into a fresh
# virtualenv (a release build by maturin, about 15 minutes on 2 cores), then
# the pytest suite against the installed wheel, with the S3 server of
# ci/s3.sh. Not part of ci/test.sh (which stages the debug build of the Rust
# suite instead, to stay within the CI budget); run it after changing the
# packaging (pyproject.toml, python/Cargo.toml, the module layout).
set -euo pipefail
cd "$(dirname "$0")/.."

bash ci/setup.sh
WHEEL_VENV="$(mktemp -d)/venv"
trap 'rm -rf "$(dirname "$WHEEL_VENV")"' EXIT
python3 -m venv "$WHEEL_VENV"
# Installed from outside the repository, as a user would.
REPO="$PWD"
(cd / && "$WHEEL_VENV/bin/pip" install -q "$REPO/python" pytest pandas)

source ci/s3.sh
export REFRACT_TEST_S3_REQUIRED=1
# From the repository root: python/ itself (the package source) is not on
# sys.path, so the tests import the installed wheel.
"$WHEEL_VENV/bin/python" -c 'import refract, sys; assert "site-packages" in refract.__file__, refract.__file__'
"$WHEEL_VENV/bin/pytest" -q -p no:cacheprovider python/tests "$@"
