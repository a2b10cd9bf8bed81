#!/usr/bin/env bash
# Generates Python messages, gRPC stubs and mypy stubs for engram.v1 into $1 (default: services).
# CI runs it into a temporary directory and diffs against the committed code.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mkdir -p "${1:-$here/../services}" && cd "${1:-$here/../services}" && pwd)"
python="${PYTHON:-python}"
include="$("$python" -c 'import grpc_tools, os; print(os.path.join(os.path.dirname(grpc_tools.__file__), "_proto"))')"
mkdir -p "$out/engram/v1"
rm -f "$out"/engram/v1/*_pb2*.py "$out"/engram/v1/*_pb2*.pyi
if ! output="$(cd "$here" && "$python" -m grpc_tools.protoc -I . -I "$include" \
    --python_out="$out" --grpc_python_out="$out" \
    --mypy_out="$out" --mypy_grpc_out="$out" \
    engram/v1/*.proto 2>&1)"; then
  echo "$output" >&2
  exit 1
fi
printf '%s\n' "$output" | grep -v '^Writing mypy to' | grep -v '^$' >&2 || true
cat > "$out/engram/v1/__init__.py" <<'PY'
"""Generated protobuf and gRPC code for the engram.v1 API (make protos). Do not edit."""
PY
