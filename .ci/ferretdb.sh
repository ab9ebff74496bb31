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

port_answers() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }

case "${1:-start}" in
  start)
    if [ ! -x "$binary" ]; then
      command -v go >/dev/null || { echo "go is needed to build FerretDB (not found on PATH)" >&2; exit 1; }
      echo "building FerretDB $version (first run only, cached at $binary)" >&2
      mkdir -p "$cache/bin"
      (cd "$here/ferretdb" && go build -o "$binary.tmp" . >&2) && mv "$binary.tmp" "$binary"
    fi
    "$0" stop
    if port_answers; then
      echo "port $port is taken by a process this script did not start; stop it or set STOWAGE_FERRETDB_PORT" >&2
      exit 1
    fi
    rm -rf "$state" && mkdir -p "$state/data"
    nohup "$binary" -listen-addr "127.0.0.1:$port" -sqlite-dir "$state/data" >"$state/log" 2>&1 &
    pid=$!
    echo "$pid" >"$state/pid"
    for _ in $(seq 1 100); do
      kill -0 "$pid" 2>/dev/null || break
      if port_answers; then
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
    # Waits until the process is gone, so that a start right after never finds the old server
    # still on the port (or still writing to the data directory it is about to delete).
    if [ -f "$state/pid" ]; then
      pid="$(cat "$state/pid")"
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      rm -f "$state/pid"
    fi
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
