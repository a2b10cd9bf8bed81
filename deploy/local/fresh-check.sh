#!/usr/bin/env bash
# `make test` as a new user meets it: a clean clone of the committed HEAD, run with HOME and
# every tool cache (pip, Go modules and builds, Maven, npm, XDG) pointed at an empty temporary
# directory, so nothing from an earlier run is reused. Prints the wall time of the whole run.
#
# Usage: deploy/local/fresh-check.sh [--busy N] [--keep]
#   --busy N   keep N CPU hogs (`yes > /dev/null`) running for the whole run: a submission
#              must not pass or fail depending on how busy the machine is
#   --keep     keep the temporary directory (default: removed at the end)
# Extra environment (e.g. ENGRAM_REQUIRE_REAL_BACKENDS=1, PYTEST_ARGS) is passed through.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
busy=0
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --busy) busy="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    *) echo "usage: $0 [--busy N] [--keep]" >&2; exit 2 ;;
  esac
done

work="$(mktemp -d "${TMPDIR:-/tmp}/engram-fresh.XXXXXX")"
hogs=()
cleanup() {
  for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null || true; done
  if [ "$keep" = 1 ]; then
    echo "[fresh-check] kept $work"
  else
    chmod -R u+w "$work" 2>/dev/null || true
    rm -rf "$work"
  fi
}
trap cleanup EXIT

home="$work/home"
mkdir -p "$home"
export HOME="$home"
export XDG_CACHE_HOME="$home/.cache"
export GOPATH="$home/go"
export GOMODCACHE="$home/go/pkg/mod"
export GOCACHE="$home/.cache/go-build"
export PIP_CACHE_DIR="$home/.cache/pip"
export npm_config_cache="$home/.npm"
export MAVEN_OPTS="-Dmaven.repo.local=$home/.m2/repository ${MAVEN_OPTS:-}"
unset ENGRAM_CACHE_DIR PIP_FIND_LINKS PIP_NO_INDEX || true

echo "[fresh-check] clean clone of $(git -C "$repo" rev-parse --short HEAD) into $work/src; empty HOME=$HOME"
git clone -q --no-local "$repo" "$work/src"

for _ in $(seq 1 "$busy"); do
  yes > /dev/null &
  hogs+=("$!")
done
[ "$busy" -gt 0 ] && echo "[fresh-check] $busy CPU hogs running: ${hogs[*]}"

start=$(date +%s)
status=0
make -C "$work/src" test || status=$?
elapsed=$(( $(date +%s) - start ))
printf '[fresh-check] make test on an empty home: exit %d after %dm%02ds (busy=%d)\n' \
  "$status" $((elapsed / 60)) $((elapsed % 60)) "$busy"
exit "$status"
