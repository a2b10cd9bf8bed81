#!/usr/bin/env bash
# install-check: what a container build or a new user does, without the Makefile.
#
# A clean virtualenv gets engram from `pip install <source>` alone (no --no-deps step, no
# extra wheels), then `engram dev` starts on a free loopback port with a temporary data
# directory, three documents are written, and a paraphrase that shares no word with the
# right one must find it first in semantic mode. Also checks that no PyTorch came along.
# Uses pip's cache (warm: about a minute); everything it creates is removed on exit.
#
#   deploy/local/install-check.sh            # or: make install-check
#   PYTHON=python3.11 deploy/local/install-check.sh
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
PYTHON=${PYTHON:-python3}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/engram-install-check.XXXXXX")
SERVER=""
STARTED=$SECONDS

step() { printf '[install-check %3ds] %s\n' "$((SECONDS - STARTED))" "$*"; }
die() {
  printf '[install-check] FAILED: %s\n' "$*" >&2
  if [[ -f "$WORK/dev.log" ]]; then
    echo "--- last lines of the engram dev log ---" >&2
    tail -n 30 "$WORK/dev.log" >&2
  fi
  exit 1
}
cleanup() {
  if [[ -n "$SERVER" ]] && kill -0 "$SERVER" 2>/dev/null; then
    kill -TERM "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT

# The source as a fresh clone has it (tracked and new files; nothing ignored such as .venv),
# copied so the build leaves nothing behind in the checkout.
step "copying the source tree from $ROOT"
mkdir "$WORK/src"
git -C "$ROOT" ls-files -z --cached --others --exclude-standard \
  | tar -C "$ROOT" --null --files-from=- --ignore-failed-read -cf - 2>/dev/null \
  | tar -C "$WORK/src" -xf -

step "python -m venv + pip install <source> (pip's cache is used)"
"$PYTHON" -m venv "$WORK/venv"
VENV="$WORK/venv/bin"
"$VENV/pip" install --quiet --disable-pip-version-check "$WORK/src" \
  || die "pip install of the source failed"
INSTALLED=$SECONDS

if "$VENV/python" -c "import torch" 2>/dev/null; then
  die "torch is installed: nothing engram needs may depend on PyTorch"
fi
"$VENV/python" -c "
from engram.indexer.embedders.local import default_tokenizer_path
assert default_tokenizer_path().is_file(), default_tokenizer_path()
" || die "the tokenizer is not in the installed package"

PORT=$("$VENV/python" -c "
import socket
s = socket.socket()
s.bind(('127.0.0.1', 0))
print(s.getsockname()[1])
")
ADDR="127.0.0.1:$PORT"
step "engram dev on $ADDR, data in a temporary directory"
ENGRAM_LOG_FORMAT=text "$VENV/engram" dev --data-dir "$WORK/data" --port "$PORT" \
  --metrics-port 0 >"$WORK/dev.log" 2>&1 &
SERVER=$!

deadline=$((SECONDS + 120))
until "$VENV/engram" ls --addr "$ADDR" >/dev/null 2>&1; do
  kill -0 "$SERVER" 2>/dev/null || die "engram dev exited"
  ((SECONDS < deadline)) || die "engram dev did not answer within 120 s"
  sleep 0.5
done
SERVING=$SECONDS

write() { printf '%s\n' "$2" | "$VENV/engram" write "$1" --addr "$ADDR" >/dev/null; }
write plans/offsite.md "The quarterly offsite will be held in Lisbon in May. \
Please book flights before the end of March."
write kitchen/bread.md "Sourdough bread needs a starter fed twice a day and a long, \
cold proof in the fridge before baking."
write ops/indexer.md "The indexer runs as a Kubernetes deployment with two replicas and \
a durable JetStream consumer."

# No word in common with plans/offsite.md: only the embedding can find it.
QUERY="which city hosts the company retreat?"
step "semantic search: \"$QUERY\""
deadline=$((SECONDS + 60))
while :; do
  found=$("$VENV/engram" search "$QUERY" --mode semantic --limit 1 --addr "$ADDR" 2>&1) || true
  if grep -q "plans/offsite.md" <<<"$found" && ! grep -q "degraded" <<<"$found"; then
    break
  fi
  kill -0 "$SERVER" 2>/dev/null || die "engram dev exited"
  ((SECONDS < deadline)) || die "the paraphrase did not find plans/offsite.md within 60 s:
$found"
  sleep 0.5
done

step "ok: install $((INSTALLED - STARTED)) s, start $((SERVING - INSTALLED)) s, \
indexed and found $((SECONDS - SERVING)) s after the server answered"
