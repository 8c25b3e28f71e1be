#!/usr/bin/env bash
# The lab's Prefect server on PostgreSQL (docs/team.md): Debian's `postgresql` listening on a loopback port only,
# its data in the folder below, and `prefect server start` on that database. Both run in the foreground and stop
# together: Ctrl-C / SIGTERM stops both, and each dies with this script however it ends (parent-death signal).
#
#   export VRSFLOW_PG_PASSWORD="$(cat /run/secrets/prefect-db)"   # the database password: environment only
#   scripts/prefect_postgres.sh [--data DIR] [--pg-port N] [--port N] [--host ADDR] [--postgres-only]
#
#   --data DIR        the database folder (default: $VRSFLOW_PG_DATA, else ~/.local/share/vrsflow/prefect-postgres);
#                     created by initdb on the first start
#   --pg-port N       PostgreSQL's port on 127.0.0.1 (default 5433: not the system cluster's 5432)
#   --port N          the Prefect API / UI port (default 4200)
#   --host ADDR       where the Prefect API listens (default 127.0.0.1); any other address needs
#                     PREFECT_SERVER_API_AUTH_STRING set (basic auth, README "Serving beyond this machine")
#   --postgres-only   run only PostgreSQL (e.g. for a `prefect server start` you run yourself)
#
# Prefect reads the database from PREFECT_SERVER_DATABASE_* variables set here for its process only; the password
# is never an argument (ps shows arguments to everyone) nor in a file of the repository. Run as root (a container),
# PostgreSQL runs as the `postgres` user, which must be able to reach DIR. Needs: apt-get install postgresql.
set -euo pipefail

data="${VRSFLOW_PG_DATA:-${HOME}/.local/share/vrsflow/prefect-postgres}"
pg_port=5433
port=4200
host=127.0.0.1
postgres_only=0
while [ $# -gt 0 ]; do
  case "$1" in
    --data) data="$2"; shift 2 ;;
    --pg-port) pg_port="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    --host) host="$2"; shift 2 ;;
    --postgres-only) postgres_only=1; shift ;;
    *) echo "prefect_postgres.sh: unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done

if [ -z "${VRSFLOW_PG_PASSWORD:-}" ]; then
  echo "prefect_postgres.sh: set VRSFLOW_PG_PASSWORD (the database password, from a secret store)" >&2
  exit 2
fi
case "$host" in
  127.*|localhost|::1) ;;
  *) if [ -z "${PREFECT_SERVER_API_AUTH_STRING:-}" ]; then
       echo "prefect_postgres.sh: --host $host is not loopback: set PREFECT_SERVER_API_AUTH_STRING=user:password" \
            "(and PREFECT_API_AUTH_STRING on every client) first" >&2
       exit 2
     fi ;;
esac

# Debian installs the server binaries outside PATH, one folder per major version; $VRSFLOW_PG_BIN picks one
bin="${VRSFLOW_PG_BIN:-}"
if [ -z "$bin" ]; then
  bin="$(find /usr/lib/postgresql -mindepth 2 -maxdepth 2 -name bin -type d 2>/dev/null | sort -V | tail -n 1)"
fi
if [ -z "$bin" ] || [ ! -x "$bin/postgres" ]; then
  echo "prefect_postgres.sh: PostgreSQL is not installed (apt-get install postgresql; or set VRSFLOW_PG_BIN)" >&2
  exit 3
fi

# every program started below gets SIGKILL from the kernel when this script ends, however it ends; as root,
# PostgreSQL (which refuses to run as root) runs as `postgres`, the parent-death signal set after the switch
as_owner=(setpriv --pdeathsig KILL --)
if [ "$(id -u)" = 0 ]; then
  as_owner=(setpriv --reuid=postgres --regid=postgres --init-groups --pdeathsig KILL --)
fi

mkdir -p "$data"
chmod 700 "$data"
if [ "$(id -u)" = 0 ]; then
  chown postgres:postgres "$data"
  if ! setpriv --reuid=postgres --regid=postgres --init-groups -- test -w "$data"; then
    echo "prefect_postgres.sh: the postgres user cannot reach $data (a parent folder is closed to it):" \
         "pick a --data folder it can reach" >&2
    exit 2
  fi
fi
if [ ! -s "$data/PG_VERSION" ]; then
  pwfile="$(mktemp)"
  trap 'rm -f "$pwfile"' EXIT
  printf '%s\n' "$VRSFLOW_PG_PASSWORD" > "$pwfile"
  [ "$(id -u)" = 0 ] && chown postgres "$pwfile"
  # superuser `prefect` with a scram password; TCP on loopback is the only way in (no Unix socket, below)
  "${as_owner[@]}" "$bin/initdb" -D "$data" -U prefect --auth=scram-sha-256 --pwfile="$pwfile" \
    --encoding=UTF8 --no-locale > "$data.initdb.log"
  rm -f "$pwfile"
  trap - EXIT
  echo "CREATE DATABASE prefect OWNER prefect;" | "${as_owner[@]}" "$bin/postgres" --single -D "$data" postgres \
    > /dev/null
  echo "prefect_postgres.sh: created the database in $data" >&2
fi

pids=()
stop() {  # Prefect first, then PostgreSQL; SIGINT: Prefect's Ctrl-C, PostgreSQL's fast shutdown
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -INT "${pids[i]}" 2>/dev/null || true
    wait "${pids[i]}" 2>/dev/null || true
  done
}
trap 'stop; exit 143' TERM
trap 'stop; exit 130' INT

"${as_owner[@]}" "$bin/postgres" -D "$data" -p "$pg_port" -c listen_addresses=127.0.0.1 \
  -c unix_socket_directories= &
pids+=($!)
for _ in $(seq 1 300); do
  if "$bin/pg_isready" -q -h 127.0.0.1 -p "$pg_port"; then break; fi
  if ! kill -0 "${pids[0]}" 2>/dev/null; then
    echo "prefect_postgres.sh: PostgreSQL did not start (port $pg_port taken? data folder $data)" >&2
    exit 1
  fi
  sleep 0.1
done
echo "prefect_postgres.sh: PostgreSQL on 127.0.0.1:$pg_port, data $data" >&2

if [ "$postgres_only" = 0 ]; then
  python="${VRSFLOW_PYTHON:-$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python}"
  [ -x "$python" ] || python="$(command -v python3)"
  # the database by its parts (Prefect assembles and quotes the URL): a connection URL set elsewhere must not win
  env -u PREFECT_SERVER_DATABASE_CONNECTION_URL -u PREFECT_API_DATABASE_CONNECTION_URL \
  PREFECT_SERVER_DATABASE_DRIVER=postgresql+asyncpg PREFECT_SERVER_DATABASE_HOST=127.0.0.1 \
  PREFECT_SERVER_DATABASE_PORT="$pg_port" PREFECT_SERVER_DATABASE_USER=prefect \
  PREFECT_SERVER_DATABASE_NAME=prefect PREFECT_SERVER_DATABASE_PASSWORD="$VRSFLOW_PG_PASSWORD" \
    setpriv --pdeathsig KILL -- "$python" -m prefect server start --host "$host" --port "$port" &
  pids+=($!)
  echo "prefect_postgres.sh: Prefect API on http://$host:$port/api (export PREFECT_API_URL=http://$host:$port/api)" >&2
fi

# the first to end ends both
set +e
wait -n
code=$?
stop
exit "$code"
