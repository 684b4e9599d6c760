#!/bin/sh
# First start: initdb with the owner's password, the database, md5/scram for TCP. Then postgres.
set -eu
: "${PGDATA:?PGDATA must be set}" "${POSTGRES_PASSWORD:?POSTGRES_PASSWORD must be set}"
POSTGRES_USER="${POSTGRES_USER:-postgres}"
POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
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
fi
exec postgres -D "$PGDATA" -c listen_addresses='*' "$@"
