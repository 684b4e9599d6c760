#!/usr/bin/env bash
# Run the backing services of pdfqueue on loopback, with all state under DIR:
#   Redis (AOF on, noeviction), PostgreSQL 15, and versitygw (S3, posix backend).
#
# Usage:
#   tools/services.sh start DIR [--no-s3]   start (idempotent) and wait until answering
#   tools/services.sh stop DIR              stop what was started for DIR
#   tools/services.sh destroy DIR           stop, then delete DIR and the data kept for it elsewhere
#   ... start|stop DIR --only redis|postgres|s3   just that one (fault-injection tests)
#   tools/services.sh env DIR               print `export` lines for the app/tests
#   tools/services.sh prometheus            install Debian's prometheus + promtool (service
#                                           never started); print the prometheus binary path
#   tools/services.sh redis|chromium|tesseract   install just that (as `start` and tests do)
#   tools/services.sh libreoffice           install headless LibreOffice Writer (the bench's
#                                           libreoffice corpus); print the soffice path
#   tools/services.sh ghostscript           install Ghostscript (the bench's ghostscript
#                                           corpus); print the ps2pdf path
#   tools/services.sh node                  install Node.js and npm (the chart's schema tool);
#                                           print the npm path
#
# Ports (env overrides): PDFQUEUE_REDIS_PORT=16379 PDFQUEUE_PG_PORT=15432
# PDFQUEUE_S3_PORT=17070.  Wait timeout per service: PDFQUEUE_SERVICES_TIMEOUT=60 (s).
# Where versitygw keeps its objects: PDFQUEUE_S3_DATA=DIR/s3 (`make bench` puts them on tmpfs).
# versitygw comes from ${PDFQUEUE_TOOLS_CACHE:-/var/cache/pdfqueue-tools}/bin and
# is built with tools/build-binaries.sh s3 when missing.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REDIS_PORT="${PDFQUEUE_REDIS_PORT:-16379}"
PG_PORT="${PDFQUEUE_PG_PORT:-15432}"
S3_PORT="${PDFQUEUE_S3_PORT:-17070}"
S3_ACCESS_KEY="${PDFQUEUE_S3_ACCESS_KEY:-pdfqueue}"
S3_SECRET_KEY="${PDFQUEUE_S3_SECRET_KEY:-pdfqueue-secret}"
TIMEOUT="${PDFQUEUE_SERVICES_TIMEOUT:-60}"
PG_BIN="${PDFQUEUE_PG_BIN:-/usr/lib/postgresql/15/bin}"
CACHE="${PDFQUEUE_TOOLS_CACHE:-/var/cache/pdfqueue-tools}"

die() { echo "services: ERROR: $*" >&2; exit 1; }
say() { echo "services: $*" >&2; }

usage() {
  echo "usage: $0 start DIR [--no-s3] | stop DIR | destroy DIR | env DIR | prometheus | redis | chromium | tesseract | libreoffice | ghostscript | node" >&2
  exit 2
}

# ---------------------------------------------------------------------------
apt_install() {
  # Install Debian packages without starting their system-wide services.
  local added_policy=0
  if [ "$(id -u)" != 0 ]; then die "need root to apt-get install $*"; fi
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    added_policy=1
  fi
  say "installing $* with apt-get"
  local rc=0
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1 ||
    { apt-get update -q >/dev/null 2>&1 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null; }; } || rc=$?
  [ "$added_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ "$rc" = 0 ] || die "apt-get install $* failed"
}

# wait_for NAME CMD...: retry CMD until it succeeds or TIMEOUT expires.
wait_for() {
  local name=$1; shift
  local deadline=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      return 1
    fi
    sleep 0.2
  done
}

# proc_alive, pid_alive, stop_pidfile
# shellcheck source=tools/lib.sh
. "$HERE/lib.sh"

# not_ours NAME PORT: a server answers on PORT, but not one this script started for DIR. Using
# it would run the suite (or the demo) on another checkout's data, so say so and stop.
not_ours() {
  die "$1: 127.0.0.1:$2 already answers, but not from a server started for $DIR (another
checkout's, or \`make demo\`'s?). Stop it, or choose other ports for this one:
PDFQUEUE_REDIS_PORT, PDFQUEUE_PG_PORT, PDFQUEUE_S3_PORT."
}

# ---------------------------------------------------------------------------
redis_ping() { [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ]; }

redis_install() {
  command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1 ||
    apt_install redis-server redis-tools
}

redis_start() {
  redis_install
  if redis_ping; then
    pid_alive "$DIR/redis.pid" || not_ours redis "$REDIS_PORT"
    say "redis already answering on 127.0.0.1:$REDIS_PORT"
    return 0
  fi
  mkdir -p "$DIR/redis"
  redis-server --bind 127.0.0.1 --port "$REDIS_PORT" \
    --appendonly yes --appendfsync everysec --maxmemory-policy noeviction \
    --dir "$DIR/redis" --daemonize yes \
    --pidfile "$DIR/redis.pid" --logfile "$DIR/redis.log" >/dev/null
  wait_for redis redis_ping ||
    die "redis did not answer PING on 127.0.0.1:$REDIS_PORT within ${TIMEOUT}s; see $DIR/redis.log:
$(tail -n 20 "$DIR/redis.log" 2>/dev/null)"
  say "redis up on 127.0.0.1:$REDIS_PORT"
}

redis_stop() {
  # SIGTERM makes redis flush the AOF and exit cleanly (like SHUTDOWN); going
  # by the pidfile only ever stops the redis started for this DIR.
  stop_pidfile redis "$DIR/redis.pid"
}

# ---------------------------------------------------------------------------
# As root, PostgreSQL must run as an unprivileged user; it must be able to
# reach its data dir.  If DIR is not traversable by that user (e.g. under
# /root), keep the data in a private dir under /var/tmp and symlink DIR/pg.
PG_USER=""
as_pg() {
  if [ -n "$PG_USER" ]; then runuser -u "$PG_USER" -- "$@"; else "$@"; fi
}

pg_setup_user() {
  if [ "$(id -u)" = 0 ]; then
    PG_USER=postgres
    id postgres >/dev/null 2>&1 ||
      useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
  fi
}

pg_datadir() {
  if [ -L "$DIR/pg" ] || [ -d "$DIR/pg" ]; then
    readlink -f "$DIR/pg"
    return
  fi
  if [ -z "$PG_USER" ] || runuser -u "$PG_USER" -- test -x "$DIR" 2>/dev/null; then
    echo "$DIR/pg"
  else
    local alt
    alt="$(pg_elsewhere)"
    ln -sfn "$alt" "$DIR/pg"
    echo "$alt"
  fi
}

# pg_elsewhere: where DIR's PostgreSQL data lives when its user cannot enter DIR.
pg_elsewhere() { echo "/var/tmp/pdfqueue-pg.$(echo "$DIR" | cksum | cut -d' ' -f1)"; }

# pg_ours: the postmaster of DIR's cluster is running.
pg_ours() {
  local pidfile
  [ -e "$DIR/pg" ] || return 1
  pidfile="$(readlink -f "$DIR/pg")/postmaster.pid"
  [ -f "$pidfile" ] && proc_alive "$(head -n 1 "$pidfile")"
}

pg_ready() { "$PG_BIN/pg_isready" -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres -t 2; }

psql_admin() {
  "$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres "$@"
}

pg_start() {
  [ -x "$PG_BIN/postgres" ] || apt_install postgresql-15 postgresql-client-15
  [ -x "$PG_BIN/postgres" ] || die "no PostgreSQL 15 binaries in $PG_BIN"
  pg_setup_user
  if pg_ready; then
    pg_ours || not_ours postgres "$PG_PORT"
    say "postgres already answering on 127.0.0.1:$PG_PORT"
  else
    local data
    data="$(pg_datadir)"
    if [ ! -f "$data/PG_VERSION" ]; then
      rm -rf "$data"
      mkdir -p "$data"
      [ -n "$PG_USER" ] && chown "$PG_USER:" "$data"
      chmod 700 "$data"
      as_pg "$PG_BIN/initdb" -D "$data" -U postgres --auth=trust \
        --encoding=UTF8 --locale=C.UTF-8 >"$DIR/initdb.log" 2>&1 ||
        die "initdb failed; see $DIR/initdb.log:
$(tail -n 20 "$DIR/initdb.log")"
      cat >"$data/pg_hba.conf" <<'EOF'
# Test-only cluster on loopback: trust everything local.
local   all   all                 trust
host    all   all   127.0.0.1/32  trust
host    all   all   ::1/128       trust
EOF
      [ -n "$PG_USER" ] && chown "$PG_USER:" "$data/pg_hba.conf"
    fi
    [ -L "$DIR/postgres.log" ] || touch "$DIR/postgres.log"
    [ -n "$PG_USER" ] && chown "$PG_USER:" "$DIR/postgres.log" 2>/dev/null || true
    # Log in DIR if the pg user can write there, else inside the data dir.
    local logf="$DIR/postgres.log"
    if ! as_pg test -w "$logf"; then
      logf="$data/postgres.log"
      ln -sfn "$logf" "$DIR/postgres.log"
    fi
    as_pg "$PG_BIN/pg_ctl" -D "$data" -l "$logf" -w -t "$TIMEOUT" \
      -o "-p $PG_PORT -c listen_addresses=127.0.0.1 -c unix_socket_directories=''" \
      start >/dev/null 2>&1 || true
    wait_for postgres pg_ready ||
      die "postgres did not become ready on 127.0.0.1:$PG_PORT within ${TIMEOUT}s; see $logf:
$(tail -n 20 "$logf" 2>/dev/null)"
  fi
  # role + database (idempotent)
  if [ "$(psql_admin -tAc "SELECT 1 FROM pg_roles WHERE rolname='pdfqueue'")" != 1 ]; then
    psql_admin -c "CREATE ROLE pdfqueue LOGIN CREATEDB PASSWORD 'pdfqueue'"
  fi
  if [ "$(psql_admin -tAc "SELECT 1 FROM pg_database WHERE datname='pdfqueue'")" != 1 ]; then
    psql_admin -c "CREATE DATABASE pdfqueue OWNER pdfqueue"
  fi
  say "postgres up on 127.0.0.1:$PG_PORT (database pdfqueue, role pdfqueue)"
}

pg_stop() {
  pg_setup_user
  local data=""
  [ -e "$DIR/pg" ] && data="$(readlink -f "$DIR/pg")"
  if [ -n "$data" ] && [ -f "$data/postmaster.pid" ]; then
    as_pg "$PG_BIN/pg_ctl" -D "$data" -m fast -w -t "$TIMEOUT" stop >/dev/null 2>&1 ||
      say "pg_ctl stop failed (see $DIR/postgres.log)"
    say "postgres stopped"
  else
    say "postgres not running"
  fi
}

# ---------------------------------------------------------------------------
s3_http() {
  local code
  code="$(curl -s -o /dev/null -m 2 -w '%{http_code}' "http://127.0.0.1:$S3_PORT/" 2>/dev/null)" || return 1
  [ -n "$code" ] && [ "$code" != 000 ]
}

s3_start() {
  local gw="$CACHE/bin/versitygw"
  if [ ! -x "$gw" ]; then
    say "versitygw not in $CACHE/bin; building it"
    "$HERE/build-binaries.sh" s3 >&2
  fi
  if pid_alive "$DIR/versitygw.pid" && s3_http; then
    say "versitygw already answering on 127.0.0.1:$S3_PORT"
    return 0
  fi
  s3_http && not_ours versitygw "$S3_PORT"
  local data="${PDFQUEUE_S3_DATA:-$DIR/s3}"
  mkdir -p "$data"
  # setsid: detach from the caller's process group so it survives the shell.
  # --keep-alive: versitygw closes every connection after one response unless told otherwise,
  # so each GET/PUT would pay a new TCP connection (AWS S3 and MinIO keep connections open).
  ROOT_ACCESS_KEY_ID="$S3_ACCESS_KEY" ROOT_SECRET_ACCESS_KEY="$S3_SECRET_KEY" \
    setsid "$gw" --port "127.0.0.1:$S3_PORT" --region us-east-1 --quiet --keep-alive \
    posix "$data" </dev/null >>"$DIR/versitygw.log" 2>&1 &
  echo $! >"$DIR/versitygw.pid"
  local deadline=$((SECONDS + TIMEOUT))
  until s3_http; do
    pid_alive "$DIR/versitygw.pid" ||
      die "versitygw exited; see $DIR/versitygw.log:
$(tail -n 20 "$DIR/versitygw.log")"
    [ $SECONDS -lt $deadline ] ||
      die "versitygw did not answer HTTP on 127.0.0.1:$S3_PORT within ${TIMEOUT}s; see $DIR/versitygw.log"
    sleep 0.2
  done
  say "versitygw up on http://127.0.0.1:$S3_PORT (data in $data)"
}

s3_stop() { stop_pidfile versitygw "$DIR/versitygw.pid"; }

# ---------------------------------------------------------------------------
print_env() {
  cat <<EOF
export PDFQUEUE_REDIS_URL=redis://127.0.0.1:$REDIS_PORT/0
export PDFQUEUE_DATABASE_URL=postgresql://pdfqueue:pdfqueue@127.0.0.1:$PG_PORT/pdfqueue
export PDFQUEUE_STORAGE_URL=s3://pdfqueue/
export PDFQUEUE_S3_ENDPOINT_URL=http://127.0.0.1:$S3_PORT
export AWS_ACCESS_KEY_ID=$S3_ACCESS_KEY
export AWS_SECRET_ACCESS_KEY=$S3_SECRET_KEY
export AWS_DEFAULT_REGION=us-east-1
EOF
}

# ---------------------------------------------------------------------------
# Prometheus for tests/test_prometheus.py: the test runs its own server on a loopback port
# with a temporary config, so the package's system service must never start (apt_install's
# policy-rc.d sees to that).
prometheus_install() {
  command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 ||
    apt_install prometheus
  command -v prometheus
}

# Chromium for tests/security/test_sec_api_browser.py: the upload page is loaded and used in
# headless Chromium to prove it works under its Content-Security-Policy.
chromium_install() {
  command -v chromium >/dev/null 2>&1 || apt_install chromium
  command -v chromium
}

# Tesseract's English data for OCR of scanned PDFs (the worker's tesserocr wheel brings the
# library itself; Debian's tesseract-ocr brings the command and the eng.traineddata it reads).
TESSDATA=/usr/share/tesseract-ocr/5/tessdata
tesseract_install() {
  [ -f "$TESSDATA/eng.traineddata" ] && command -v tesseract >/dev/null 2>&1 ||
    apt_install tesseract-ocr tesseract-ocr-eng
  [ -f "$TESSDATA/eng.traineddata" ] || die "no $TESSDATA/eng.traineddata after installing"
  echo "$TESSDATA"
}

# LibreOffice Writer without its GUI for the bench's libreoffice corpus (devtools/src/pdfqueue_dev/corpora/libreoffice.py):
# résumés converted to PDF by a producer this repository did not write. The fonts give the
# documents different faces; hyphen-en-us holds the patterns automatic hyphenation needs.
libreoffice_install() {
  command -v soffice >/dev/null 2>&1 && [ -d /usr/share/hyphen ] ||
    apt_install libreoffice-writer-nogui hyphen-en-us fonts-dejavu-core fonts-liberation2 \
      fonts-crosextra-carlito fonts-crosextra-caladea
  command -v soffice
}

# Ghostscript's ps2pdf for the bench's ghostscript corpus (devtools/src/pdfqueue_dev/corpora/ghostscript.py).
ghostscript_install() {
  command -v ps2pdf >/dev/null 2>&1 || apt_install ghostscript
  command -v ps2pdf
}

# Node.js and npm for readme-generator-for-helm, which writes the chart's values.schema.json and
# values table (pdfqueue_dev.chartschema; `make deps` installs the tool itself with npm ci).
node_install() {
  command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || apt_install nodejs npm
  command -v npm
}

# ---------------------------------------------------------------------------
cmd="${1:-}"; [ $# -gt 0 ] && shift || usage
if [ "$cmd" = prometheus ]; then prometheus_install; exit 0; fi
if [ "$cmd" = redis ]; then redis_install; command -v redis-server; exit 0; fi
if [ "$cmd" = chromium ]; then chromium_install; exit 0; fi
if [ "$cmd" = tesseract ]; then tesseract_install; exit 0; fi
if [ "$cmd" = libreoffice ]; then libreoffice_install; exit 0; fi
if [ "$cmd" = ghostscript ]; then ghostscript_install; exit 0; fi
if [ "$cmd" = node ]; then node_install; exit 0; fi
DIR=""; WITH_S3=1; ONLY=""
while [ $# -gt 0 ]; do
  case "$1" in
    --no-s3) WITH_S3=0 ;;
    --only) shift; ONLY="${1:-}"; case "$ONLY" in redis|postgres|s3) ;; *) usage ;; esac ;;
    -*) usage ;;
    *) [ -z "$DIR" ] || usage; DIR="$1" ;;
  esac
  shift
done
# wants NAME: is this service part of the command (all of them unless --only names one)?
wants() { [ -z "$ONLY" ] || [ "$ONLY" = "$1" ]; }
[ -n "$DIR" ] || usage

case "$cmd" in
  start)
    mkdir -p "$DIR"
    DIR="$(cd "$DIR" && pwd)"
    if wants redis; then redis_start; fi
    if wants postgres; then pg_start; fi
    if [ "$WITH_S3" = 1 ] && wants s3; then s3_start; fi
    ;;
  stop)
    [ -d "$DIR" ] || { say "$DIR does not exist; nothing to stop"; exit 0; }
    DIR="$(cd "$DIR" && pwd)"
    if wants s3; then s3_stop; fi
    if wants postgres; then pg_stop; fi
    if wants redis; then redis_stop; fi
    ;;
  destroy)
    [ -z "$ONLY" ] || usage
    [ -d "$DIR" ] || exit 0
    DIR="$(cd "$DIR" && pwd)"
    # deletes DIR: only a folder `start` made (a mistyped path must not be emptied)
    [ -e "$DIR/redis" ] || [ -e "$DIR/pg" ] || [ -e "$DIR/s3" ] ||
      die "$DIR holds no redis, pg or s3 folder: not a services folder, not deleting it"
    s3_stop; pg_stop; redis_stop
    # PostgreSQL's data lives in /var/tmp when its user cannot reach DIR (see pg_datadir); only
    # that folder is deleted, wherever the link points
    if [ -L "$DIR/pg" ]; then rm -rf "$(pg_elsewhere)"; fi
    rm -rf "$DIR"
    ;;
  env) print_env ;;
  *) usage ;;
esac
