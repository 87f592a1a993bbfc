#!/usr/bin/env bash
# A private, throwaway PostgreSQL server for the tests (the PostgreSQL plan store's, CTest label `postgres`).
#   scripts/postgres.sh start DIR     make (first time) and start a server under DIR: DIR/data, DIR/sock, DIR/log;
#                                     prints one line on stdout, the libpq connection string
#                                     `host=DIR/sock dbname=kiln_test user=kiln` (logs go to stderr).
#                                     Idempotent: a server already running there is left as it is.
#   scripts/postgres.sh stop DIR      fast shutdown; quiet, exit 0, when none is running.
#   scripts/postgres.sh restart DIR   fast shutdown and start again (for tests that restart the database).
#   scripts/postgres.sh status DIR    exit 0 when the server is running, 1 when not.
#   scripts/postgres.sh env DIR       `export KILN_TEST_POSTGRES=...` and `export KILN_TEST_POSTGRES_DATA=...`
#                                     lines, for `eval "$(bash scripts/postgres.sh env DIR)"` after `start`.
# The server takes the bin folder named by KILN_PG_BIN when set (a carried PostgreSQL, on a machine that has
# none: KILN_PG_BIN="$(scripts/pg-pack.sh unpack /tmp/kiln-pgdist)"), else the newest /usr/lib/postgresql/*/bin
# (scripts/setup.sh installs Debian's `postgresql`). Debian's server reads zone names from /usr/share/zoneinfo
# only: where that is missing, initdb sets the POSIX zone 'UTC0', which needs no file. The server listens on no TCP
# port, only on a Unix socket in DIR/sock, and trusts every local connection (superuser role `kiln`). initdb
# refuses to run as root: run as root, the server runs as the system user `kiln-pg` (made here when missing), DIR
# is chowned to it, and DIR's parents must let it through (mktemp -d under /tmp, then chmod 755, as
# scripts/test.sh does), as must the bin folder's.
set -euo pipefail
# runuser and useradd live in sbin, which a plain PATH (env -i, cron, a remote call) may lack.
PATH="$PATH:/usr/sbin:/sbin"

log() { printf '[postgres] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
usage() {
  echo "usage: scripts/postgres.sh start|stop|restart|status|env DIR" >&2
  exit 2
}

[ $# = 2 ] || usage
cmd=$1
case "$cmd" in start|stop|restart|status|env) ;; *) usage;; esac
[ -n "$2" ] || usage
# The folder goes into a libpq connection string and a shell line unquoted by either: keep it plain.
case "$2" in *[[:space:]\'\"\\]*) die "DIR must hold no spaces, quotes or backslashes: '$2'";; esac
if [ "$cmd" = start ]; then mkdir -p "$2"; fi
if [ -d "$2" ]; then dir="$(cd "$2" && pwd)"; else dir="$(realpath -m "$2")"; fi
data="$dir/data" sock="$dir/sock" logdir="$dir/log"
conninfo="host=$sock dbname=kiln_test user=kiln"
# A Unix socket's path holds at most 107 bytes: DIR/sock/.s.PGSQL.5432 must fit.
[ ${#sock} -le 90 ] || die "DIR is too long for a Unix socket path ($sock); choose a shorter one"

if [ -n "${KILN_PG_BIN:-}" ]; then
  [ -x "$KILN_PG_BIN/pg_ctl" ] && [ -x "$KILN_PG_BIN/postgres" ] ||
    die "KILN_PG_BIN=$KILN_PG_BIN holds no pg_ctl and postgres (scripts/pg-pack.sh unpack DIR prints the folder)"
  bin="$(cd "$KILN_PG_BIN" && pwd)"  # absolute: the commands run from DIR
else
  bin="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)" || true
  [ -n "$bin" ] && [ -x "$bin/pg_ctl" ] ||
    die "no PostgreSQL server under /usr/lib/postgresql/*/bin (scripts/setup.sh installs Debian's postgresql;" \
      "elsewhere KILN_PG_BIN names a carried one, scripts/pg-pack.sh)"
fi

# as_server COMMAND...: runs COMMAND as the server's owner (kiln-pg when we are root), from DIR (a working
# folder that user can enter: root's home is closed to it).
pg_user=""
if [ "$(id -u)" = 0 ]; then pg_user=kiln-pg; fi
as_server() {
  if [ -n "$pg_user" ]; then
    (cd "$dir" && runuser -u "$pg_user" -- "$@")
  else
    (cd "$dir" && "$@")
  fi
}
running() { [ -f "$data/PG_VERSION" ] && as_server "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; }
# show_log [FILE]: the tail of FILE (the server's log by default) on stderr, after a failure.
show_log() {
  local f="${1:-$logdir/server.log}"
  [ -s "$f" ] || return 0
  log "last lines of $f:"; tail -25 "$f" >&2
}

case "$cmd" in
status)
  running || exit 1
  ;;
env)
  running || log "no server is running under $dir (scripts/postgres.sh start $dir)"
  printf "export KILN_TEST_POSTGRES='%s'\n" "$conninfo"
  printf "export KILN_TEST_POSTGRES_DATA='%s'\n" "$dir"
  ;;
stop)
  if running; then
    as_server "$bin/pg_ctl" -D "$data" -m fast -w -t 60 stop >/dev/null || { show_log; die "stop failed"; }
    log "stopped the server under $dir"
  fi
  ;;
restart)
  [ -f "$data/PG_VERSION" ] || die "no server under $dir (scripts/postgres.sh start $dir)"
  as_server "$bin/pg_ctl" -D "$data" -l "$logdir/server.log" -m fast -w -t 60 restart >/dev/null ||
    { show_log; die "restart failed"; }
  log "restarted the server under $dir"
  ;;
start)
  if running; then
    log "already running under $dir"
    echo "$conninfo"
    exit 0
  fi
  if [ -n "$pg_user" ]; then
    if ! id -u "$pg_user" >/dev/null 2>&1; then
      log "creating the system user $pg_user (initdb refuses root)"
      useradd --system --no-create-home --shell /usr/sbin/nologin "$pg_user"
    fi
    chown -R "$pg_user:" "$dir"
    runuser -u "$pg_user" -- test -w "$dir" ||
      die "$pg_user cannot reach $dir: every folder above it must be traversable (chmod 755)"
    runuser -u "$pg_user" -- test -x "$bin/postgres" ||
      die "$pg_user cannot run $bin/postgres: every folder above it must be traversable (unpack it under /tmp)"
  fi
  as_server mkdir -p "$sock" "$logdir"
  if [ ! -f "$data/PG_VERSION" ]; then
    log "initdb ($bin) in $data"
    as_server "$bin/initdb" -D "$data" --auth=trust -U kiln --encoding=UTF8 --locale=C \
      >"$logdir/initdb.log" 2>&1 || { show_log "$logdir/initdb.log"; die "initdb failed"; }
    # A throwaway test server: no fsync, no synchronous commit, no full-page writes, for speed. What the tests
    # need of durability, data surviving a clean restart, pg_ctl's shutdown checkpoint gives without them.
    cat >>"$data/postgresql.conf" <<EOF

# scripts/postgres.sh: a private test server
listen_addresses = ''
port = 5432
unix_socket_directories = '$sock'
max_connections = 200
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
  fi
  log "starting the server under $dir"
  as_server "$bin/pg_ctl" -D "$data" -w -t 60 -l "$logdir/server.log" start >/dev/null ||
    { show_log; die "the server did not start"; }
  has_db="$(as_server "$bin/psql" -h "$sock" -U kiln -d postgres -XtAc \
    "SELECT 1 FROM pg_database WHERE datname = 'kiln_test'")" || { show_log; die "cannot connect to the server"; }
  if [ "$has_db" != 1 ]; then
    as_server "$bin/createdb" -h "$sock" -U kiln kiln_test || { show_log; die "createdb kiln_test failed"; }
  fi
  log "ready: $conninfo"
  echo "$conninfo"
  ;;
esac
