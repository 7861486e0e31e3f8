#!/usr/bin/env bash
# A throwaway Postgres for the ledger tests: initdb into DIR, start it as the postgres user on a
# free localhost port (and a unix socket in DIR), create the database `tether_test`, print its URL.
# Usage:
#   scripts/test-postgres.sh start DIR   # prints postgresql://tether:PASSWORD@127.0.0.1:PORT/tether_test
#   scripts/test-postgres.sh stop DIR    # stops the server (the directory is left for the caller)
# Needs root (it runs the server as the `postgres` user) and the Debian/Ubuntu `postgresql` package.
set -euo pipefail
cmd=${1:?usage: test-postgres.sh start|stop DIR}
dir=${2:?usage: test-postgres.sh start|stop DIR}
bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1 || true)
if [ -z "$bin" ] || [ ! -x "$bin/pg_ctl" ]; then
  echo "test-postgres.sh: no Postgres binaries under /usr/lib/postgresql/*/bin (apt-get install postgresql)" >&2
  exit 3
fi
as_pg() { runuser -u postgres -- "$@"; }
case "$cmd" in
  start)
    mkdir -p "$dir"
    chown postgres: "$dir"
    password=$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')
    printf '%s\n' "$password" > "$dir/pwfile"
    chown postgres: "$dir/pwfile"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    as_pg "$bin/initdb" -D "$dir/data" -U tether --pwfile="$dir/pwfile" --auth-local=trust \
      --auth-host=scram-sha-256 -E UTF8 >"$dir/initdb.log" 2>&1
    as_pg "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $port -k $dir -c fsync=off" start >/dev/null
    as_pg "$bin/createdb" -h "$dir" -p "$port" -U tether tether_test
    echo "$port" > "$dir/port"
    echo "postgresql://tether:$password@127.0.0.1:$port/tether_test"
    ;;
  stop)
    if [ -f "$dir/data/postmaster.pid" ]; then as_pg "$bin/pg_ctl" -D "$dir/data" -m immediate -w stop >/dev/null; fi
    ;;
  *)
    echo "usage: test-postgres.sh start|stop DIR" >&2
    exit 2
    ;;
esac
