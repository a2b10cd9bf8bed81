#!/usr/bin/env bash
# Build/fetch the local backends into ~/.cache/engram (NATS, FerretDB, OpenSearch launcher).
# Usage: deploy/local/provision.sh [nats,mongo,opensearch]
# The implementation is deploy/local/backends.py; this only picks a Python 3.11+.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
exec "$py" "$here/backends.py" provision --only "${1:-nats,mongo,opensearch}"
