#!/usr/bin/env bash
# A PostgreSQL primary and a streaming standby of it, in a temporary directory, for the
# failover check of the reliability battery (reliability/src/checks/failover.ts). Debian's
# PostgreSQL 15 server binaries; every server process runs as the `postgres` OS user.
#
#   .ci/failover-clusters.sh start [sync|async]  -> prints the primary's and the standby's URL, one a line
#   .ci/failover-clusters.sh kill-primary   (immediate shutdown: what a crash of the primary looks like)
#   .ci/failover-clusters.sh promote        (the standby becomes the primary; waits until it accepts writes)
#   .ci/failover-clusters.sh stop
#
# sync (the default): the primary waits for the standby to flush every commit before it
# acknowledges it (synchronous_standby_names = 'standby', synchronous_commit = on).
# async: the primary acknowledges at once and ships WAL afterwards.
#
# Ports: STOWAGE_FAILOVER_PORT (primary, default 25432) and the next one (standby), below the
# kernel's ephemeral range (32768-60999 on Linux): a port in it can be the local end of any
# client connection of the moment (the battery opens thousands), and the server then cannot bind
# it ("could not bind IPv4 address: Address already in use", pg_ctl: "could not start server";
# reproduced by holding 127.0.0.1:55440 with a client socket). `start`
# first removes whatever a previous run left behind on those ports and in its directory (also
# after a crash), and refuses a port held by anything else. `stop` removes everything.
set -euo pipefail
primary_port="${STOWAGE_FAILOVER_PORT:-25432}"
standby_port=$((primary_port + 1))
bin="${STOWAGE_PG_BIN:-/usr/lib/postgresql/15/bin}"
state="${TMPDIR:-/tmp}/stowage-failover-$primary_port"
# The postgres user may not be allowed into the caller's directory.
cd /

# Runs a command as the postgres OS user (we may be root; PostgreSQL refuses to run as root).
as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# The process listening on 127.0.0.1:$1, if any.
listener_pid() {
  { ss -Htlnp "sport = :$1" 2>/dev/null | grep -o 'pid=[0-9]*' | head -n 1 | cut -d= -f2; } || true
}

# Stops a server of ours on $1 (a data directory), hard: nothing in it needs to survive.
stop_server() {
  local data="$1"
  [ -f "$data/postmaster.pid" ] || return 0
  as_postgres "$bin/pg_ctl" -D "$data" -m immediate -w -t 30 stop >/dev/null 2>&1 || true
  # A postmaster that did not go (or whose data directory is half gone): kill it by its pid.
  local pid
  pid="$(head -n 1 "$data/postmaster.pid" 2>/dev/null || true)"
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
    kill -9 "$pid" 2>/dev/null || true
  fi
}

stop() {
  for data in "$state/primary" "$state/standby"; do stop_server "$data"; done
  # A postmaster of ours whose pid file is gone: it still runs from our directory.
  for port in "$primary_port" "$standby_port"; do
    pid="$(listener_pid "$port")"
    if [ -n "$pid" ] && [[ "$(readlink "/proc/$pid/cwd" 2>/dev/null || true)" == "$state"/* ]]; then
      kill -9 "$pid" 2>/dev/null || true
    fi
  done
  for port in "$primary_port" "$standby_port"; do
    for _ in $(seq 1 100); do [ -z "$(listener_pid "$port")" ] && break; sleep 0.1; done
  done
  rm -rf "$state"
}

psql_primary() {
  as_postgres "$bin/psql" -h 127.0.0.1 -p "$primary_port" -U postgres -d postgres -qAt -v ON_ERROR_STOP=1 "$@"
}

wait_ready() {
  local port="$1"
  for _ in $(seq 1 300); do
    if "$bin/pg_isready" -q -h 127.0.0.1 -p "$port" -d postgres; then return 0; fi
    sleep 0.1
  done
  echo "the server on port $port did not start; log:" >&2
  cat "$state"/*.log >&2 || true
  return 1
}

# Starts the server of $state/$1; when it does not start, says why (its log) and fails.
start_server() {
  as_postgres "$bin/pg_ctl" -D "$state/$1" -l "$state/$1.log" -w -t 60 start >/dev/null && return 0
  echo "the $1 server did not start; its log:" >&2
  cat "$state/$1.log" >&2 || true
  return 1
}

# Settings of both servers; the standby's copy (pg_basebackup copies postgresql.conf) is
# changed after the copy.
server_conf() {
  local port="$1" name="$2"
  cat <<CONF
listen_addresses = '127.0.0.1'
port = $port
# TCP only: a socket path under a long \$TMPDIR would pass the 107-byte limit of socket paths.
unix_socket_directories = ''
cluster_name = '$name'
max_connections = 200
shared_buffers = 32MB
wal_level = replica
max_wal_senders = 5
hot_standby = on
wal_receiver_status_interval = 1s
log_line_prefix = '%m [%p] '
CONF
}

start() {
  local mode="$1"
  case "$mode" in sync | async) ;; *) echo "mode must be sync or async, got $mode" >&2; exit 2 ;; esac
  [ -x "$bin/initdb" ] || { echo "no PostgreSQL server binaries in $bin (apt-get install postgresql-15)" >&2; exit 1; }
  id postgres >/dev/null 2>&1 || { echo "no postgres OS user to run the servers as" >&2; exit 1; }
  stop
  for port in "$primary_port" "$standby_port"; do
    if [ -n "$(listener_pid "$port")" ]; then
      echo "port $port is held by another process (pid $(listener_pid "$port")): not ours, not touched" >&2
      exit 1
    fi
  done
  mkdir -p "$state"
  chown postgres "$state"
  chmod 700 "$state"

  as_postgres "$bin/initdb" -D "$state/primary" -U postgres --auth=trust --no-sync -E UTF8 --locale=C.UTF-8 >/dev/null
  server_conf "$primary_port" primary >>"$state/primary/postgresql.conf"
  echo "host replication postgres 127.0.0.1/32 trust" >>"$state/primary/pg_hba.conf"
  start_server primary
  wait_ready "$primary_port"
  psql_primary -c 'CREATE DATABASE test' >/dev/null

  # The standby: a base backup that streams the WAL it needs (-X stream) and writes
  # standby.signal and primary_conninfo (-R).
  as_postgres "$bin/pg_basebackup" -h 127.0.0.1 -p "$primary_port" -U postgres -D "$state/standby" -R -X stream --no-sync -c fast
  # Its own port and name; no synchronous standby of its own: once promoted it runs alone, and
  # a primary waiting for a standby that does not exist would never acknowledge a commit.
  server_conf "$standby_port" standby >>"$state/standby/postgresql.conf"
  echo "synchronous_standby_names = ''" >>"$state/standby/postgresql.conf"
  start_server standby
  wait_ready "$standby_port"

  if [ "$mode" = sync ]; then
    # From now on a commit is acknowledged only once the standby named 'standby' (its
    # cluster_name, which its walreceiver sends as application_name) has flushed it. Set after
    # the base backup: until the standby streams, every commit would wait.
    psql_primary -c "ALTER SYSTEM SET synchronous_standby_names = 'standby'" \
      -c "ALTER SYSTEM SET synchronous_commit = on" -c 'SELECT pg_reload_conf()' >/dev/null
  fi

  # Streaming (and, in sync mode, counted as synchronous) before anyone writes.
  local want=async
  [ "$mode" = sync ] && want=sync
  for _ in $(seq 1 300); do
    got="$(psql_primary -c "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'standby' AND state = 'streaming'" || true)"
    if [ "$got" = "$want" ]; then
      echo "postgresql://postgres@127.0.0.1:$primary_port/test"
      echo "postgresql://postgres@127.0.0.1:$standby_port/test"
      return 0
    fi
    sleep 0.1
  done
  echo "the standby is not streaming ($want) after 30 s; logs:" >&2
  cat "$state"/*.log >&2 || true
  exit 1
}

case "${1:-}" in
  start) start "${2:-sync}" ;;
  kill-primary) as_postgres "$bin/pg_ctl" -D "$state/primary" -m immediate -w -t 30 stop >/dev/null ;;
  promote) as_postgres "$bin/pg_ctl" -D "$state/standby" -w -t 60 promote >/dev/null ;;
  stop) stop ;;
  *) echo "usage: $0 start [sync|async] | kill-primary | promote | stop" >&2; exit 2 ;;
esac
