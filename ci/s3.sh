#!/usr/bin/env bash
# Starts a local S3 server (moto) for the test suite and exports where it is.
# Sourced by ci/test.sh; the server stops when that shell exits.
#   REFRACT_TEST_S3_ENDPOINT  http://127.0.0.1:PORT
#   REFRACT_TEST_S3_BUCKET    the bucket the tests use (created here)
#   REFRACT_TEST_S3_REQUIRED  set: S3 tests fail instead of skipping

S3_VENV="${REFRACT_CI_VENV:-$PWD/target/ci-venv}"
S3_BUCKET="refract-test"

if [ ! -x "$S3_VENV/bin/moto_server" ]; then
  echo "ci/s3.sh: installing moto into $S3_VENV" >&2
  python3 -m venv "$S3_VENV"
  "$S3_VENV/bin/pip" install -q 'moto[s3]==5.2.5' flask flask-cors
fi

S3_PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
mkdir -p target
# ci/moto_server.py: moto with atomic conditional writes (see there).
"$S3_VENV/bin/python" "$(dirname "${BASH_SOURCE[0]}")/moto_server.py" -H 127.0.0.1 -p "$S3_PORT" > target/moto.log 2>&1 &
S3_PID=$!
trap 'kill "$S3_PID" 2>/dev/null || true' EXIT

# Wait for the server (up to 30 s), then create the bucket: one `PUT /bucket`.
python3 - "$S3_PORT" "$S3_BUCKET" <<'PY'
import sys, time, urllib.request
port, bucket = sys.argv[1], sys.argv[2]
for _ in range(300):
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1)
        break
    except Exception:
        time.sleep(0.1)
request = urllib.request.Request(f"http://127.0.0.1:{port}/{bucket}", method="PUT")
urllib.request.urlopen(request, timeout=10)
PY
echo "ci/s3.sh: moto on 127.0.0.1:$S3_PORT (pid $S3_PID), bucket $S3_BUCKET" >&2

export REFRACT_TEST_S3_ENDPOINT="http://127.0.0.1:$S3_PORT"
export REFRACT_TEST_S3_BUCKET="$S3_BUCKET"
export REFRACT_TEST_S3_REQUIRED=1
