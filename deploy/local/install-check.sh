#!/usr/bin/env bash
# install-check: what the container build (deploy/docker/Dockerfile) or a new user does,
# without the Makefile and without a container engine.
#
# As the Dockerfile's stages do: engram's wheel is built from the source, and a clean
# virtualenv gets it with its runtime dependencies alone (no dev extra, no --no-deps step,
# no extra wheels). The venv stays owned by root and read-only to the user that runs it:
# when this runs as root and `setpriv` exists, every engram command runs as `nobody`, with
# HOME, TMPDIR and the data directory in one directory of its own (the image's volume).
# Then: `engram serve <service> --help` and a start without backend settings (a clear
# error naming ENGRAM_MONGO_URI) for every production service; `engram dev` on free
# loopback ports answers grpc.health.v1 SERVING (helm/engram/files/health_check.py, the
# chart's `helm test` script) and /readyz; three documents are written, and a paraphrase
# that shares no word with the right one must find it first in semantic mode. Also checks
# that no PyTorch and no dev tool came along. Uses pip's cache (warm: about a minute);
# everything it creates is removed on exit.
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
  if [[ -n "$SERVER" ]]; then
    # $SERVER may be the background subshell rather than engram itself (bash does not
    # always exec the last command of a function run with &): stop the server by its own
    # command line too, which names this run's temporary data dir, so none outlives the run.
    local mine="--data-dir $WORK/home/data"
    kill -TERM "$SERVER" 2>/dev/null || true
    pkill -TERM -f -- "$mine" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    for _ in $(seq 60); do
      pgrep -f -- "$mine" >/dev/null || break
      sleep 0.5
    done
    pkill -KILL -f -- "$mine" 2>/dev/null || true
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

# The image's user: unprivileged, its own writable directory, the venv read-only to it. Its
# interpreter must be one that user can run (a pyenv under /root is not): else Debian's.
RUN=()
if [[ $(id -u) == 0 ]] && command -v setpriv >/dev/null; then
  RUN=(setpriv --reuid=65534 --regid=65534 --clear-groups --)
  runs() { "${RUN[@]}" /usr/bin/env "$1" -c 'import sys; assert sys.version_info >= (3, 11)' \
    2>/dev/null; }
  REAL=$("$PYTHON" -c "import sys; print(sys.executable)")
  if runs "$REAL"; then
    PYTHON=$REAL
  elif runs /usr/bin/python3; then
    PYTHON=/usr/bin/python3
  else
    RUN=()
  fi
fi

step "python -m venv, pip wheel <source>, pip install <wheel> (pip's cache is used)"
"$PYTHON" -m venv "$WORK/venv"
VENV="$WORK/venv/bin"
"$VENV/pip" wheel --quiet --disable-pip-version-check --no-deps --wheel-dir "$WORK/dist" \
  "$WORK/src" || die "building engram's wheel failed"
WHEELS=("$WORK"/dist/engram-*.whl)
"$VENV/pip" install --quiet --disable-pip-version-check "${WHEELS[0]}" \
  || die "pip install of the wheel failed"
INSTALLED=$SECONDS

if "$VENV/python" -c "import torch" 2>/dev/null; then
  die "torch is installed: nothing engram needs may depend on PyTorch"
fi
DEV=$("$VENV/python" -c "
import importlib.util
print(' '.join(m for m in ('pytest', 'mypy', 'ruff', 'grpc_tools', 'hypothesis')
               if importlib.util.find_spec(m)))
")
[[ -z "$DEV" ]] || die "dev tools came with the runtime install: $DEV"

HOME_DIR="$WORK/home"
mkdir -p "$HOME_DIR/tmp"
if [[ ${#RUN[@]} -gt 0 ]]; then
  chmod 0755 "$WORK"
  chown -R 65534:65534 "$HOME_DIR"
  step "engram runs as nobody (uid 65534) on $PYTHON; the venv is root's and read-only to it"
else
  step "engram runs as $(id -un) (uid $(id -u)): no unprivileged user to switch to"
fi
# env -i: only what the image's ENV gives, nothing from the caller's ENGRAM_* settings.
as_user() { env -i PATH="$VENV:/usr/bin:/bin" HOME="$HOME_DIR" TMPDIR="$HOME_DIR/tmp" \
  LANG=C.UTF-8 "${RUN[@]}" /usr/bin/env "$@"; }
if as_user touch "$VENV/written-by-engram-user" 2>/dev/null && [[ ${#RUN[@]} -gt 0 ]]; then
  die "the unprivileged user can write the venv"
fi
as_user python -c "import engram" || die "the engram user cannot import engram from the venv"

SERVICES=$(as_user "$VENV/python" -c "
from engram.app.production import PROCESSES
print(' '.join(PROCESSES))
") || die "engram.app.production does not import from the installed wheel"
for service in $SERVICES; do
  as_user "$VENV/engram" serve "$service" --help >"$WORK/help.log" 2>&1 \
    || die "engram serve $service --help failed: $(cat "$WORK/help.log")"
  # No backend settings: the composition root of the service imports and refuses to start
  # with a message naming the variable, never a traceback.
  if as_user "$VENV/engram" serve "$service" >"$WORK/serve.log" 2>&1; then
    die "engram serve $service started without ENGRAM_MONGO_URI"
  fi
  grep -q "ENGRAM_MONGO_URI" "$WORK/serve.log" && ! grep -q "Traceback" "$WORK/serve.log" \
    || die "engram serve $service without settings did not name ENGRAM_MONGO_URI: \
$(cat "$WORK/serve.log")"
done
step "engram serve $SERVICES: --help works, a start without settings names the variable"
"$VENV/python" -c "
from engram.indexer.embedders.local import default_tokenizer_path
assert default_tokenizer_path().is_file(), default_tokenizer_path()
" || die "the tokenizer is not in the installed package"

read -r PORT METRICS < <("$VENV/python" -c "
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(('127.0.0.1', 0))
print(*(s.getsockname()[1] for s in socks))
")
ADDR="127.0.0.1:$PORT"
# Started from a directory its user cannot enter (as `sudo -u engram engram dev` from a
# private home), with a $TMPDIR too long for a Unix socket under it: the processes engram
# starts (the vector engine) depend on neither.
PRIVATE="$WORK/private"
mkdir -p "$PRIVATE" && chmod 0700 "$PRIVATE"
LONG_TMP="$HOME_DIR/tmp/$(printf 't%.0s' {1..60})"
mkdir -p "$LONG_TMP"
[[ ${#RUN[@]} -eq 0 ]] || chown 65534:65534 "$LONG_TMP"
step "engram dev on $ADDR (metrics $METRICS), data in the user's directory"
cd "$PRIVATE"
as_user TMPDIR="$LONG_TMP" ENGRAM_LOG_FORMAT=text "$VENV/engram" dev \
  --data-dir "$HOME_DIR/data" --port "$PORT" --metrics-port "$METRICS" >"$WORK/dev.log" 2>&1 &
SERVER=$!
cd "$ROOT"

deadline=$((SECONDS + 120))
until "$VENV/engram" ls --addr "$ADDR" >/dev/null 2>&1; do
  kill -0 "$SERVER" 2>/dev/null || die "engram dev exited"
  ((SECONDS < deadline)) || die "engram dev did not answer within 120 s"
  sleep 0.5
done
SERVING=$SECONDS

# A copy the user can read: the source tree may sit under a directory it cannot enter (a
# clone under /root, or a mktemp -d one), as the image's user never sees the build context.
install -m 0644 "$ROOT/helm/engram/files/health_check.py" "$WORK/health_check.py"
as_user "$VENV/python" "$WORK/health_check.py" --timeout 60 "$ADDR" \
  >"$WORK/health.log" 2>&1 || die "grpc.health.v1 is not SERVING: $(cat "$WORK/health.log")"
"$VENV/python" -c "
import sys, urllib.request
with urllib.request.urlopen('http://127.0.0.1:$METRICS/readyz', timeout=5) as reply:
    sys.exit(0 if reply.status == 200 else 1)
" || die "/readyz on the metrics port did not answer 200"
step "ready: grpc.health.v1 SERVING (the chart's helm test script), /readyz 200"
if [[ ${#RUN[@]} -gt 0 ]]; then
  grep -q "working directory cannot be entered by this user: moved to /" "$WORK/dev.log" \
    || die "engram dev did not say it left the directory its user cannot enter"
fi

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
