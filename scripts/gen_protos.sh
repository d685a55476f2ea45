#!/usr/bin/env bash
# Regenerates the Python gRPC code (with typed stubs) from protos/. The one way to do it.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-services/common}"
rm -f "$out"/reservoir/v1/*_pb2*.py "$out"/reservoir/v1/*_pb2*.pyi
mkdir -p "$out/reservoir/v1"
PY="${PYTHON:-python3}"
# The mypy-protobuf plugins live beside the interpreter that has grpcio-tools.
export PATH="$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
"$PY" -m grpc_tools.protoc -I protos \
  --python_out="$out" --grpc_python_out="$out" \
  --mypy_out="$out" --mypy_grpc_out="$out" \
  protos/reservoir/v1/*.proto
touch "$out/reservoir/v1/__init__.py" "$out/reservoir/v1/py.typed"
