#!/usr/bin/env bash
# The main job: installs Reservoir, starts a local cluster (etcd, an S3 server, the master
# and three workers), writes a sample data set to S3, mounts it and reads it twice.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q -e '.[local]' 2>&1 | grep -v "^WARNING: Location" || true
STATE="${RESERVOIR_STATE_DIR:-$PWD/.reservoir}"
R=(.venv/bin/reservoir --state-dir "$STATE")
"${R[@]}" local down >/dev/null 2>&1 || true
"${R[@]}" local up --workers "${WORKERS:-3}"
"${R[@]}" local demo --files "${FILES:-400}"
echo
echo "The cluster is still running. To use reservoir from this shell:"
echo "  source $PWD/.venv/bin/activate   # puts reservoir (and the python with boto3) on PATH"
echo "  export RESERVOIR_STATE_DIR=$STATE"
echo "  reservoir ls -l /datasets/demo/train"
echo "Stop it with: $PWD/.venv/bin/reservoir --state-dir $STATE local down"
