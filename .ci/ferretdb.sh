#!/usr/bin/env bash
# Builds (once, cached) and starts FerretDB v1 with its SQLite handler on 127.0.0.1, as the
# MongoDB-wire stand-in for CI. Prints the URL on stdout; `stop` ends it.
#   .ci/ferretdb.sh start   -> prints mongodb://127.0.0.1:PORT/
#   .ci/ferretdb.sh stop
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${STOWAGE_CACHE:-$HOME/.cache/stowage}"
version="v1.24.2"
binary="$cache/bin/ferretdb-ci-$version"
port="${STOWAGE_FERRETDB_PORT:-27117}"
state="${TMPDIR:-/tmp}/stowage-ferretdb-$port"

case "${1:-start}" in
  start)
    if [ ! -x "$binary" ]; then
      command -v go >/dev/null || { echo "go is needed to build FerretDB (not found on PATH)" >&2; exit 1; }
      echo "building FerretDB $version (first run only, cached at $binary)" >&2
      mkdir -p "$cache/bin"
      (cd "$here/ferretdb" && go build -o "$binary.tmp" . >&2) && mv "$binary.tmp" "$binary"
    fi
    "$0" stop >/dev/null 2>&1 || true
    rm -rf "$state" && mkdir -p "$state/data"
    nohup "$binary" -listen-addr "127.0.0.1:$port" -sqlite-dir "$state/data" >"$state/log" 2>&1 &
    echo $! >"$state/pid"
    for _ in $(seq 1 100); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "mongodb://127.0.0.1:$port/"
        exit 0
      fi
      sleep 0.1
    done
    echo "FerretDB did not start; its log:" >&2
    cat "$state/log" >&2
    exit 1
    ;;
  stop)
    if [ -f "$state/pid" ]; then
      kill "$(cat "$state/pid")" 2>/dev/null || true
      rm -f "$state/pid"
    fi
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
