#!/bin/sh
# First start: initdb with the owner's password, the database, md5/scram for TCP, then the
# official image's /docker-entrypoint-initdb.d/*.sql, in name order, by the owner on the
# database, on a server only the local socket reaches. Then postgres.
set -eu
: "${PGDATA:?PGDATA must be set}" "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
POSTGRES_USER="${POSTGRES_USER:-postgres}"
POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
INITDB_DIR=/docker-entrypoint-initdb.d
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA" && chmod 700 "$PGDATA"
  pw="$(mktemp)"
  printf '%s\n' "$POSTGRES_PASSWORD" >"$pw"
  initdb -D "$PGDATA" --username="$POSTGRES_USER" --pwfile="$pw" --auth-local=trust \
    --auth-host=scram-sha-256 --encoding=UTF8 --locale=C.UTF-8
  rm -f "$pw"
  printf 'host all all all scram-sha-256\n' >>"$PGDATA/pg_hba.conf"
  if [ "$POSTGRES_DB" != postgres ]; then
    printf 'CREATE DATABASE "%s";\n' "$POSTGRES_DB" | postgres --single -j -D "$PGDATA" postgres >/dev/null
  fi
  scripts="$(find "$INITDB_DIR" -maxdepth 1 -name '*.sql' 2>/dev/null | LC_ALL=C sort)"
  if [ -n "$scripts" ]; then
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start
    for f in $scripts; do
      echo "entrypoint: running $f"
      psql -v ON_ERROR_STOP=1 --no-psqlrc --username="$POSTGRES_USER" --dbname="$POSTGRES_DB" -f "$f"
    done
    pg_ctl -D "$PGDATA" -m fast -w stop
  fi
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
