#!/usr/bin/env bash
# Starts a local Azure Blob emulator (Azurite) for the test suite and exports
# where it is. Sourced by ci/test.sh after ci/s3.sh; the emulator stops when
# that shell exits (the EXIT trap already set, e.g. by ci/s3.sh, still runs).
#   REFRACT_TEST_AZURE_ENDPOINT   http://127.0.0.1:PORT/devstoreaccount1
#   REFRACT_TEST_AZURE_CONTAINER  the container the tests use (created here)
#   REFRACT_TEST_AZURE_REQUIRED   set: Azure tests fail instead of skipping
# Without Node.js and npm it says so loudly and exports nothing (the Azure
# tests then skip, loudly).

AZ_VERSION="3.35.0" # 3.37 needs Node 22
AZ_NODE="${REFRACT_CI_NODE:-$PWD/target/ci-node}"
AZ_CONTAINER="refract-test"

if ! command -v node > /dev/null 2>&1 || ! command -v npm > /dev/null 2>&1; then
  echo "" >&2
  echo "ci/azure.sh: ********************************************************" >&2
  echo "ci/azure.sh: Node.js/npm not found: NOT starting Azurite; the Azure" >&2
  echo "ci/azure.sh: tests (azure_store) will SKIP. Install Node.js 20 and npm." >&2
  echo "ci/azure.sh: ********************************************************" >&2
  echo "" >&2
  return 0 2> /dev/null || exit 0
fi

installed="$(node -p "require('$AZ_NODE/node_modules/azurite/package.json').version" 2> /dev/null || true)"
if [ "$installed" != "$AZ_VERSION" ]; then
  echo "ci/azure.sh: installing azurite@$AZ_VERSION into $AZ_NODE" >&2
  mkdir -p "$AZ_NODE"
  npm install --prefix "$AZ_NODE" --no-audit --no-fund --loglevel=error "azurite@$AZ_VERSION"
fi

AZ_PORT="$(node -e 'const s = require("net").createServer().listen(0, "127.0.0.1", () => { console.log(s.address().port); s.close(); })')"
mkdir -p target
"$AZ_NODE/node_modules/.bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$AZ_PORT" \
  --inMemoryPersistence --disableTelemetry --silent > target/azurite.log 2>&1 &
AZ_PID=$!

# Stop the emulator at exit, then run whatever EXIT trap was there before
# (`trap -p` quotes it; a function keeps `set --` off the caller's arguments).
refract_azure_chain_exit_trap() {
  local previous=""
  if [ -n "$(trap -p EXIT)" ]; then
    eval "set -- $(trap -p EXIT)"
    previous="$3"
  fi
  trap "kill $AZ_PID 2>/dev/null || true${previous:+; $previous}" EXIT
}
refract_azure_chain_exit_trap

# Wait for the emulator (up to 30 s), then create the container: one Azure
# "Create Container" request signed with the development account's
# well-known Shared Key (201 created, 409 already there).
if ! node - "$AZ_PORT" "$AZ_CONTAINER" <<'JS'
const crypto = require("crypto");
const http = require("http");
const [port, container] = process.argv.slice(2);
const account = "devstoreaccount1";
const key = Buffer.from(
  "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==",
  "base64");
function attempt(left) {
  const date = new Date().toUTCString();
  const version = "2021-08-06";
  const path = `/${account}/${container}`;
  // Verb, 11 empty standard headers, canonical x-ms-* headers, resource.
  const toSign = ["PUT", "", "", "", "", "", "", "", "", "", "", "",
    `x-ms-date:${date}\nx-ms-version:${version}`,
    `/${account}${path}\nrestype:container`].join("\n");
  const signature = crypto.createHmac("sha256", key).update(toSign, "utf8").digest("base64");
  const request = http.request({
    host: "127.0.0.1", port, method: "PUT", path: `${path}?restype=container`,
    headers: { "x-ms-date": date, "x-ms-version": version, "Content-Length": 0,
      Authorization: `SharedKey ${account}:${signature}` },
  }, (response) => {
    response.resume();
    if (response.statusCode === 201 || response.statusCode === 409) process.exit(0);
    console.error(`ci/azure.sh: creating container ${container}: HTTP ${response.statusCode} ${response.statusMessage}`);
    process.exit(1);
  });
  request.on("error", (e) => {
    if (left > 0) setTimeout(() => attempt(left - 1), 100);
    else { console.error(`ci/azure.sh: Azurite did not answer on port ${port}: ${e.message}`); process.exit(1); }
  });
  request.end();
}
attempt(300);
JS
then
  echo "ci/azure.sh: Azurite is not usable (see target/azurite.log)" >&2
  return 1 2> /dev/null || exit 1
fi
echo "ci/azure.sh: azurite-blob $AZ_VERSION on 127.0.0.1:$AZ_PORT (pid $AZ_PID), container $AZ_CONTAINER" >&2

export REFRACT_TEST_AZURE_ENDPOINT="http://127.0.0.1:$AZ_PORT/devstoreaccount1"
export REFRACT_TEST_AZURE_CONTAINER="$AZ_CONTAINER"
export REFRACT_TEST_AZURE_REQUIRED=1
