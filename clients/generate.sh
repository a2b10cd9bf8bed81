#!/usr/bin/env bash
# Generates the Go and TypeScript clients' code from protos/ into $1/go/gen and $1/ts/src/gen
# (default $1: clients/) with buf and local plugins. `make clients` runs it into clients/,
# `make clients-check` into a temporary directory and diffs. The plugins' paths come from the
# Makefile: BUF, PROTOC_GEN_GO, PROTOC_GEN_GO_GRPC, PROTOC_GEN_ES.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mkdir -p "${1:-$here}" && cd "${1:-$here}" && pwd)"
: "${BUF:?}" "${PROTOC_GEN_GO:?}" "${PROTOC_GEN_GO_GRPC:?}" "${PROTOC_GEN_ES:?}"
# buf finds local plugins on PATH.
PATH="$(dirname "$PROTOC_GEN_GO"):$(dirname "$PROTOC_GEN_GO_GRPC"):$(dirname "$PROTOC_GEN_ES"):$PATH"
export PATH
# google.rpc's Status and error details (what grpc-status-details-bin carries), from the
# google-proto-files package installed beside protoc-gen-es. Go has them in genproto already.
googleapis="$(dirname "$PROTOC_GEN_ES")/../google-proto-files"
rm -rf "$out/go/gen" "$out/ts/src/gen"
cd "$here/../protos"
"$BUF" generate --template "$here/buf.gen.go.yaml" -o "$out"
"$BUF" generate --template "$here/buf.gen.ts.yaml" -o "$out"
"$BUF" generate "$googleapis" --template "$here/buf.gen.ts.yaml" -o "$out" \
  --path "$googleapis/google/rpc/status.proto" --path "$googleapis/google/rpc/error_details.proto"
