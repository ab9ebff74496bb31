#!/usr/bin/env bash
# Starts PgBouncer (Debian's package, installed when missing) in transaction mode on
# 127.0.0.1, in front of the PostgreSQL server of STOWAGE_POSTGRES_URL, as the pooler backend
# of the tests. Prints the URL clients use; `stop` ends it.
#   .ci/pgbouncer.sh start   -> prints postgresql://postgres@127.0.0.1:PORT/test
#   .ci/pgbouncer.sh stop
set -euo pipefail
port="${STOWAGE_PGBOUNCER_PORT:-6432}"
state="${TMPDIR:-/tmp}/stowage-pgbouncer-$port"
server_host=127.0.0.1
server_port=5432
database=test

stop() {
  if [ -f "$state/pid" ]; then
    pid="$(cat "$state/pid")"
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
    rm -f "$state/pid"
  fi
}

case "${1:-start}" in
  start)
    if ! command -v pgbouncer >/dev/null && [ ! -x /usr/sbin/pgbouncer ]; then
      echo "installing pgbouncer (Debian package)" >&2
      apt-get install -y pgbouncer >&2
    fi
    stop
    mkdir -p "$state"
    # PgBouncer refuses to run as root: run it as the postgres system user, which owns nothing here.
    chown postgres "$state" 2>/dev/null || true
    cat >"$state/pgbouncer.ini" <<INI
[databases]
$database = host=$server_host port=$server_port dbname=$database
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $state/users.txt
pool_mode = transaction
max_client_conn = 500
default_pool_size = 20
ignore_startup_parameters = extra_float_digits
logfile = $state/log
pidfile = $state/pid
INI
    echo '"postgres" ""' >"$state/users.txt"
    chown postgres "$state"/* 2>/dev/null || true
    args=(-d)
    [ "$(id -u)" = 0 ] && args+=(-u postgres)
    /usr/sbin/pgbouncer "${args[@]}" "$state/pgbouncer.ini" >&2
    for _ in $(seq 1 100); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        echo "postgresql://postgres@127.0.0.1:$port/$database"
        exit 0
      fi
      sleep 0.1
    done
    echo "pgbouncer did not start; log: $state/log" >&2
    cat "$state/log" >&2 || true
    exit 1
    ;;
  stop) stop ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
