#!/usr/bin/env bash
# Build every image the chart runs, here, with no registry: base images from Debian's packages,
# pdfqueue-api/-worker/-operator from the real Dockerfiles, and the bundled services' images.
#
#   localhost/pdfqueue/debian:bookworm-<h>     mmdebstrap minbase (Debian bookworm)
#   localhost/pdfqueue/python:3.11-bookworm-<h> Debian's python3.11 on it, pip in /usr/local
#                                               like python:3.11-slim (the Dockerfiles' PYTHON_IMAGE)
#   localhost/pdfqueue/uv:<uv version>          /uv and /uvx from the uv wheel (UV_IMAGE)
#   localhost/pdfqueue-api|-worker|-operator:<h> Dockerfile.api / Dockerfile.worker, unchanged
#   localhost/pdfqueue/redis|postgres|versitygw|curl:<h>  Debian's redis-server, postgresql,
#                                               the versitygw build, curl: what the chart expects
#   localhost/pdfqueue/pause:<h>                the pod sandbox image (a static Go binary)
#
# Every tag <h> is a hash of the image's inputs (recipe, build context, base image), so a second
# run finds them all and costs seconds. Images are kept in buildah's storage and exported as
# docker archives under $PDFQUEUE_TOOLS_CACHE/images for `ctr images import`.
#
# Usage:
#   tools/images.sh build        build what is missing; prints "<name> <ref> built|cached"
#   tools/images.sh refs         print NAME=ref lines (after build)
#   tools/images.sh archive REF  print the image archive path of REF (for ctr images import)
#   tools/images.sh check        run each pdfqueue image once as uid 10001
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
CACHE="${PDFQUEUE_TOOLS_CACHE:-/var/cache/pdfqueue-tools}"
OUT="$CACHE/images"
SUITE=bookworm
MIRROR="${PDFQUEUE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
RECIPE_VERSION=1   # bump when a recipe below changes in a way its hash does not see
NICE=(nice -n 10)

say() { echo "images: $*" >&2; }
die() { echo "images: ERROR: $*" >&2; exit 1; }

need() { # TOOL PACKAGE
  command -v "$1" >/dev/null 2>&1 || die "'$1' not found: install the Debian package '$2' (apt-get install $2)"
}

# ---- hashing ------------------------------------------------------------------------------
h_str() { printf '%s' "$*" | sha256sum | cut -c1-16; }
# h_files FILE|DIR...: hash of the names and contents (no __pycache__, no .pyc).
h_files() {
  (cd "$ROOT" && find "$@" -type f ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 |
    LC_ALL=C sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16
}

have_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }

# export_image REF: a docker archive for containerd, once per ref.
export_image() {
  local ref=$1 f
  f="$(archive "$ref")"
  [ -s "$f" ] && return 0
  # docker-archive: its RepoTags give `ctr images import` the image's name (an OCI archive
  # carries only a tag). Uncompressed: it is read once, locally.
  buildah push --quiet --disable-compression "$ref" "docker-archive:$f.tmp:$ref" >/dev/null
  mv -f "$f.tmp" "$f"
}

# Only the images pods run are exported for containerd; the bases stay in buildah's storage.
NODE_IMAGES=" api worker operator redis postgres versitygw curl pause "

record() { # NAME REF STATE
  echo "${1^^}=$2" >>"$OUT/refs.env.tmp"
  case "$NODE_IMAGES" in *" $1 "*) export_image "$2" ;; esac
  echo "$1 $2 $3"
}

# build_mounts: RUN steps trust what this machine trusts (a proxy's CA, say): its CA bundle is
# mounted over the image's, and uv told to use it, during the build only (never in an image).
build_mounts() {
  local bundle=${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}
  [ -s "$bundle" ] || return 0
  mkdir -p "$OUT/build-etc/uv"
  printf 'system-certs = true\n' >"$OUT/build-etc/uv/uv.toml"
  echo "--volume=$bundle:/etc/ssl/certs/ca-certificates.crt:ro"
  echo "--volume=$OUT/build-etc/uv:/etc/uv:ro"
}

# bud NAME REF CONTEXT FILE [buildah bud args...]: build unless REF exists.
bud() {
  local name=$1 ref=$2 ctx=$3 file=$4; shift 4
  if have_image "$ref"; then record "$name" "$ref" cached; return 0; fi
  say "building $ref from $file"
  local log="$OUT/logs/$name.log" mounts=()
  mapfile -t mounts < <(build_mounts)
  if ! "${NICE[@]}" buildah bud --layers --network host --format oci "${mounts[@]}" \
    -f "$file" -t "$ref" "$@" "$ctx" >"$log" 2>&1; then
    # The failing instruction is the last "STEP n/m: ..." buildah printed.
    echo "images: build of $ref failed at: $(grep -E 'STEP [0-9]+/[0-9]+: ' "$log" | tail -n 1)" >&2
    tail -n 30 "$log" >&2
    die "see $log"
  fi
  record "$name" "$ref" built
}

# A build's working containers: buildah 1.28 leaves behind, mounted, the one of a stage that is only
# copied from (`FROM $UV_IMAGE AS uv`), and a failed or interrupted build leaves its own. Each holds
# a copy of its image's layers, so every container a build run made goes when the run ends.
containers() { buildah containers --quiet --notruncate 2>/dev/null | sort; }
drop_run_containers() {
  local id
  while IFS= read -r id; do
    [ -n "$id" ] && buildah rm "$id" >/dev/null 2>&1
  done < <(comm -13 <(printf '%s\n' "$RUN_CONTAINERS") <(containers))
  return 0
}

# ---- base images ------------------------------------------------------------------------------
build_debian() {
  local h ref
  h="$(h_str "$RECIPE_VERSION $SUITE $MIRROR minbase passwd ca-certificates")"
  ref="localhost/pdfqueue/debian:$SUITE-$h"
  DEBIAN_REF=$ref
  if have_image "$ref"; then record debian "$ref" cached; return 0; fi
  need mmdebstrap mmdebstrap
  say "building $ref with mmdebstrap (Debian packages from $MIRROR)"
  local tar="$OUT/debian-$h.rootfs.tar"
  "${NICE[@]}" mmdebstrap --variant=minbase --include=passwd,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-include=/usr/share/doc/*/copyright' \
    --dpkgopt='path-exclude=/usr/share/man/*' --dpkgopt='path-exclude=/usr/share/locale/*' \
    --aptopt='APT::Install-Recommends "false"' \
    "$SUITE" "$tar" "$MIRROR" >"$OUT/logs/debian.log" 2>&1 ||
    { tail -n 30 "$OUT/logs/debian.log" >&2; die "mmdebstrap failed; see $OUT/logs/debian.log"; }
  local c
  c="$(buildah from scratch)"
  buildah add --quiet "$c" "$tar" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env LANG=C.UTF-8 --cmd /bin/bash --label "org.opencontainers.image.title=pdfqueue debian $SUITE" "$c"
  buildah commit --quiet --rm "$c" "$ref" >/dev/null
  rm -f "$tar"
  record debian "$ref" built
}

write_ctx() { # DIR: a fresh empty build context
  rm -rf "$1"; mkdir -p "$1"
}

# recipe NAME DIR: a fresh build context holding the files of images/NAME (its Containerfile and
# what that COPYs); prints their contents in name order, which the image's tag hashes.
recipe() {
  write_ctx "$2"
  cp -a "$ROOT/images/$1/." "$2/" || return 1
  (cd "$2" && find . -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 cat)
}

build_python() {
  local ctx="$OUT/ctx/python" text
  # Like python:3.11-slim: `python` is 3.11, pip/setuptools live in /usr/local (so the Dockerfiles'
  # `pip uninstall` works) and the interpreter is not marked externally managed.
  text="$(recipe python "$ctx")"
  local h; h="$(h_str "$RECIPE_VERSION $DEBIAN_REF $text")"
  PYTHON_REF="localhost/pdfqueue/python:3.11-$SUITE-$h"
  bud python "$PYTHON_REF" "$ctx" "$ctx/Containerfile" --build-arg "BASE=$DEBIAN_REF"
}

build_uv() {
  local ver ctx="$OUT/ctx/uv"
  ver="$(sed -n 's/^ARG UV_IMAGE=.*:\([0-9.]*\)$/\1/p' "$ROOT/Dockerfile.api")"
  [ -n "$ver" ] || die "cannot read the uv version from Dockerfile.api's ARG UV_IMAGE"
  UV_REF="localhost/pdfqueue/uv:$ver"
  if have_image "$UV_REF"; then record uv "$UV_REF" cached; return 0; fi
  write_ctx "$ctx"
  need python3 python3
  # The manylinux wheel from PyPI carries the static uv and uvx binaries.
  local uvbin="${UV:-$(command -v uv || echo "$HOME/.local/bin/uv")}"
  [ -x "$uvbin" ] || die "uv not found (pip install uv) to fetch the uv $ver wheel"
  "$uvbin" tool run --quiet --from "pip" pip download --quiet --no-deps --only-binary=:all: \
    --platform manylinux_2_17_x86_64 --python-version 3.11 -d "$ctx/whl" "uv==$ver" >&2 ||
    die "cannot download the uv $ver wheel from PyPI"
  python3 - "$ctx" <<'EOF'
import pathlib, sys, zipfile
ctx = pathlib.Path(sys.argv[1])
whl = next((ctx / "whl").glob("uv-*.whl"))
with zipfile.ZipFile(whl) as z:
    for name in z.namelist():
        if name.endswith((".data/scripts/uv", ".data/scripts/uvx")):
            out = ctx / pathlib.Path(name).name
            out.write_bytes(z.read(name))
            out.chmod(0o755)
EOF
  [ -x "$ctx/uv" ] && [ -x "$ctx/uvx" ] || die "the uv wheel has no uv/uvx binaries"
  cp "$ROOT/images/uv/Containerfile" "$ctx/Containerfile"
  bud uv "$UV_REF" "$ctx" "$ctx/Containerfile"
}

# ---- pdfqueue images: the real Dockerfiles, unchanged -----------------------------------------
APP_INPUTS=(uv.lock pyproject.toml core/pyproject.toml api/pyproject.toml worker/pyproject.toml
  operator/pyproject.toml core/src api/src worker/src operator/src .dockerignore)

# app_context DIR: the build context as .dockerignore lets it through, copied to DIR, so buildah
# never walks the work tree (.venv, .state with a node's containerd store).
app_context() {
  local dir=$1
  rm -rf "$dir"; mkdir -p "$dir"
  (cd "$ROOT" && find "${APP_INPUTS[@]}" Dockerfile.api Dockerfile.worker -type f \
    ! -path '*/__pycache__/*' ! -name '*.pyc' -print0 | xargs -0 cp --parents -t "$dir")
}

build_app() {
  local inputs rev api_h worker_h ctx="$OUT/ctx/app"
  inputs="$RECIPE_VERSION $PYTHON_REF $UV_REF $(h_files "${APP_INPUTS[@]}")"
  api_h="$(h_str "$inputs $(h_files Dockerfile.api)")"
  worker_h="$(h_str "$inputs $(h_files Dockerfile.worker)")"
  rev="$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  local args=(--build-arg "PYTHON_IMAGE=$PYTHON_REF" --build-arg "UV_IMAGE=$UV_REF"
    --build-arg "REVISION=$rev")
  API_REF="localhost/pdfqueue-api:$api_h"
  WORKER_REF="localhost/pdfqueue-worker:$worker_h"
  OPERATOR_REF="localhost/pdfqueue-operator:$worker_h"
  if ! have_image "$API_REF" || ! have_image "$WORKER_REF" || ! have_image "$OPERATOR_REF"; then
    app_context "$ctx"
  fi
  bud api "$API_REF" "$ctx" "$ctx/Dockerfile.api" "${args[@]}"
  bud worker "$WORKER_REF" "$ctx" "$ctx/Dockerfile.worker" "${args[@]}"
  bud operator "$OPERATOR_REF" "$ctx" "$ctx/Dockerfile.worker" "${args[@]}" --target operator
}

# ---- the bundled services and the helm-test pod -----------------------------------------------
build_redis() {
  local ctx="$OUT/ctx/redis" text
  # The chart runs it as 999:999 with args only (--appendonly ... --dir /data): the entrypoint is
  # redis-server; redis-cli (the probes) reads REDISCLI_AUTH.
  text="$(recipe redis "$ctx")"
  local h; h="$(h_str "$RECIPE_VERSION $DEBIAN_REF $text")"
  REDIS_REF="localhost/pdfqueue/redis:$h"
  bud redis "$REDIS_REF" "$ctx" "$ctx/Containerfile" --build-arg "BASE=$DEBIAN_REF"
}

build_postgres() {
  local ctx="$OUT/ctx/postgres" text
  # What the chart relies on from the official image: POSTGRES_USER/_DB/_PASSWORD and PGDATA
  # initialise an empty data directory once, then run /docker-entrypoint-initdb.d/*.sql
  # (entrypoint.sh); psql and pg_isready on PATH; uid 999; writes
  # only to PGDATA, /var/run/postgresql and /tmp (the root filesystem is read-only).
  text="$(recipe postgres "$ctx")"
  local h; h="$(h_str "$RECIPE_VERSION $DEBIAN_REF $text")"
  POSTGRES_REF="localhost/pdfqueue/postgres:$h"
  bud postgres "$POSTGRES_REF" "$ctx" "$ctx/Containerfile" --build-arg "BASE=$DEBIAN_REF"
}

build_versitygw() {
  local ctx="$OUT/ctx/versitygw" bin="$CACHE/bin/versitygw" text
  [ -x "$bin" ] || "$HERE/build-binaries.sh" s3 >&2
  text="$(recipe versitygw "$ctx")"
  cp "$(readlink -f "$bin")" "$ctx/versitygw"
  local h; h="$(h_str "$RECIPE_VERSION $DEBIAN_REF $text $(sha256sum <"$ctx/versitygw")")"
  VERSITYGW_REF="localhost/pdfqueue/versitygw:$h"
  bud versitygw "$VERSITYGW_REF" "$ctx" "$ctx/Containerfile" --build-arg "BASE=$DEBIAN_REF"
}

build_curl() {
  local ctx="$OUT/ctx/curl" text
  text="$(recipe curl "$ctx")"
  local h; h="$(h_str "$RECIPE_VERSION $DEBIAN_REF $text")"
  CURL_REF="localhost/pdfqueue/curl:$h"
  bud curl "$CURL_REF" "$ctx" "$ctx/Containerfile" --build-arg "BASE=$DEBIAN_REF"
}

build_pause() {
  local ctx="$OUT/ctx/pause" text
  # The sandbox process: sleeps until SIGINT/SIGTERM, reaps nothing else (like k8s' pause.c).
  text="$(recipe pause "$ctx")"
  local h; h="$(h_str "$RECIPE_VERSION $text")"
  PAUSE_REF="localhost/pdfqueue/pause:$h"
  if have_image "$PAUSE_REF"; then record pause "$PAUSE_REF" cached; return 0; fi
  local go=go
  [ -x /usr/local/go/bin/go ] && go=/usr/local/go/bin/go
  (cd "$ctx" && CGO_ENABLED=0 GOFLAGS=-trimpath GOCACHE="$CACHE/go/cache" "$go" build -ldflags '-s -w' -o pause .) ||
    die "cannot build the pause binary (needs Go)"
  bud pause "$PAUSE_REF" "$ctx" "$ctx/Containerfile"
}

build_all() {
  need buildah buildah
  mkdir -p "$OUT/logs" "$OUT/ctx"
  # One build at a time per cache.
  exec 8>"$OUT/.lock"
  flock 8
  RUN_CONTAINERS="$(containers)"
  trap drop_run_containers EXIT
  rm -f "$OUT/refs.env.tmp"
  local t0=$SECONDS
  build_debian
  build_python
  build_uv
  build_app
  build_redis
  build_postgres
  build_versitygw
  build_curl
  build_pause
  mv -f "$OUT/refs.env.tmp" "$OUT/refs.env"
  prune
  say "all images ready in $((SECONDS - t0)) s"
}

# prune: every change to the code is a new set of app images (~1.7 GB of archives and as much in
# buildah's storage), so the cache keeps, per image, the refs of the last two builds (this one and
# the one before it, for a second checkout at other code) and removes older archives and images.
prune() {
  local hist="$OUT/refs.history" keep archives f ref
  cat "$OUT/refs.env" >>"$hist"
  # newest first: the first two distinct refs of each NAME
  keep="$(tac "$hist" | awk -F= '!seen[$0]++ && n[$1]++ < 2' | tac)"
  printf '%s\n' "$keep" >"$hist.tmp" && mv -f "$hist.tmp" "$hist"
  keep="$(cut -d= -f2- <<<"$keep")"
  archives="$(while IFS= read -r ref; do archive "$ref"; done <<<"$keep")"
  for f in "$OUT"/*.tar; do
    [ -e "$f" ] || continue
    grep -qxF "$f" <<<"$archives" && continue
    say "pruning $(basename "$f")"
    rm -f "$f"
  done
  while IFS= read -r ref; do
    grep -qxF "$ref" <<<"$keep" && continue
    say "pruning $ref"
    buildah rmi "$ref" >/dev/null 2>&1 || true
  done < <(buildah images --format '{{.Name}}:{{.Tag}}' 2>/dev/null | grep '^localhost/pdfqueue')
  prune_layer_cache "$keep"
}

# epoch TIME: seconds since 1970 of a time as buildah prints it ("2026-11-30 07:14:52.7 +0000 UTC").
epoch() { date -d "${1% UTC}" +%s; }

# prune_layer_cache KEPT_REFS: the builds' intermediate images (buildah's layer cache) have no
# name. Those made before the oldest kept build (less 15 minutes: its own builder stage comes
# first) are removed, leaves first. The dependency layers stay while a kept build descends from them.
prune_layer_cache() {
  local cutoff=0 ref t id created old
  while IFS= read -r ref; do
    case "$ref" in localhost/pdfqueue-api:*|localhost/pdfqueue-worker:*|localhost/pdfqueue-operator:*) ;; *) continue ;; esac
    t="$(buildah inspect --type image --format '{{.OCIv1.Created}}' "$ref" 2>/dev/null)" || continue
    t="$(epoch "$t")"
    { [ "$cutoff" = 0 ] || [ "$t" -lt "$cutoff" ]; } && cutoff=$t
  done <<<"$1"
  [ "$cutoff" = 0 ] && return 0
  cutoff=$((cutoff - 900))
  while :; do
    old=()
    while read -r id created; do
      [ "$(epoch "$created")" -lt "$cutoff" ] && old+=("$id")
    done < <(buildah images --filter dangling=true --format '{{.ID}} {{.CreatedAtRaw}}' 2>/dev/null)
    [ ${#old[@]} -eq 0 ] && return 0
    buildah rmi "${old[@]}" >/dev/null 2>&1 || return 0
  done
}

# archive REF: the image archive exported for REF (for `ctr images import`).
archive() {
  echo "$OUT/$(echo "${1#localhost/}" | tr '/:' '__').tar"
}

refs() {
  [ -s "$OUT/refs.env" ] || die "no images built yet: run $0 build"
  cat "$OUT/refs.env"
}

# check: each pdfqueue image runs `pdfqueue --help` as uid 10001 (buildah run, runc) and that
# user can write neither its code nor the root. (podman's --read-only is what the pods get from
# readOnlyRootFilesystem, but podman here fails to raise RLIMIT_NPROC without CAP_SYS_RESOURCE;
# tests/test_e2e_pods.py checks the read-only root in the running pods.)
check() {
  need buildah buildah
  # shellcheck disable=SC1090
  . <(refs)
  local name ref c rc
  for name in API WORKER OPERATOR; do
    ref="${!name}"
    c="$(buildah from --quiet "$ref")"
    rc=0
    buildah run --user 10001:10001 "$c" -- sh -c 'test "$(id -u):$(id -g)" = 10001:10001 \
      && ! python -c "open(__import__(\"sys\").prefix + \"/x\", \"w\")" 2>/dev/null \
      && ! touch /x 2>/dev/null && pdfqueue --help >/dev/null' \
      >&2 || rc=$?
    buildah rm "$c" >/dev/null
    [ "$rc" = 0 ] || die "$ref: not uid 10001, code or root writable, or pdfqueue does not start"
    echo "$name $ref ok"
  done
}

case "${1:-}" in
  build) build_all ;;
  refs) refs ;;
  archive) [ $# -eq 2 ] || { echo "usage: $0 archive REF" >&2; exit 2; }; archive "$2" ;;
  check) check ;;
  *) echo "usage: $0 build | refs | archive REF | check" >&2; exit 2 ;;
esac
