#!/usr/bin/env bash
# A real Kubernetes control plane on loopback for pdfqueue's tests, from the
# binaries cached by tools/build-binaries.sh (group "kube"):
#   etcd, kube-apiserver (RBAC on), kube-controller-manager, kube-scheduler,
#   and kwok faking 2 nodes (kwok-node-0, kwok-node-1) so pods become Running.
#
# Usage:
#   tools/kube.sh up DIR     start (idempotent); waits for /readyz, Ready nodes
#                            and the default ServiceAccount
#   tools/kube.sh up DIR --real-node
#                            the same control plane with a real node instead of kwok:
#                            kubelet + containerd + runc, CNI bridge, kube-proxy, CoreDNS,
#                            hostPath PVs, the images of tools/images.sh (see tools/node.sh).
#                            Needs root; one per machine. The API server then listens on the
#                            node's bridge address (PDFQUEUE_NODE_IP, 10.244.0.1), not 127.0.0.1.
#   tools/kube.sh node-check DIR   exit 0 if a real node can start here (installing the Debian
#                            packages it needs); else say why: exit 3 if this machine cannot run
#                            containers (not root, no cgroups...), 1 if a step failed
#   tools/kube.sh pvs DIR    a real node's hostPath PersistentVolumes that deleted claims released
#                            (Retain) become fresh, empty ones again, as a provisioner's Delete
#                            would make them: the node has 8, and each release claims 3
#   tools/kube.sh down DIR   stop everything started for DIR (state is kept)
#   tools/kube.sh env DIR    print `export` lines (KUBECONFIG, PATH)
#
# Admin kubeconfig: DIR/admin.kubeconfig, context "pdfqueue-test" (user in
# group system:masters).  Logs: DIR/logs/.  Ports (env overrides):
# PDFQUEUE_ETCD_PORT=12379 (peer: +1), PDFQUEUE_KUBE_PORT=16443.
# Timeout: PDFQUEUE_KUBE_TIMEOUT=120 (s).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${PDFQUEUE_TOOLS_CACHE:-/var/cache/pdfqueue-tools}"
BIN="$CACHE/bin"
ETCD_PORT="${PDFQUEUE_ETCD_PORT:-12379}"
ETCD_PEER_PORT="${PDFQUEUE_ETCD_PEER_PORT:-$((ETCD_PORT + 1))}"
KUBE_PORT="${PDFQUEUE_KUBE_PORT:-16443}"
TIMEOUT="${PDFQUEUE_KUBE_TIMEOUT:-120}"
CONTEXT=pdfqueue-test
NODES=(kwok-node-0 kwok-node-1)

die() { echo "kube: ERROR: $*" >&2; exit 1; }
say() { echo "kube: $*" >&2; }
usage() { echo "usage: $0 up DIR [--real-node] | down DIR | env DIR | node-check DIR | pvs DIR" >&2; exit 2; }

# proc_alive, pid_alive, stop_pidfile
# shellcheck source=tools/lib.sh
. "$HERE/lib.sh"
# node_up, node_down (the --real-node mode)
# shellcheck source=tools/node.sh
. "$HERE/node.sh"

# ---------------------------------------------------------------------------
ensure_binaries() {
  local b missing=0 need=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)
  [ "$REAL" = 1 ] || need+=(kwok)   # the real node needs no kwok
  for b in "${need[@]}"; do
    [ -x "$BIN/$b" ] || missing=1
  done
  if [ "$missing" = 1 ]; then
    say "control-plane binaries missing in $BIN; running build-binaries.sh kube (slow when cold)"
    "$HERE/build-binaries.sh" kube >&2
  fi
}

# ---------------------------------------------------------------------------
# PKI (openssl): CA, apiserver serving cert, client certs, SA key pair. ECDSA P-256 keys, as
# kubeadm can make: an RSA-2048 key costs openssl 0.3-3 s on a loaded 2-core machine, eight of
# them were most of a cold `up` (docs/development/tools.md).
genkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

sign() { # NAME SUBJ [SAN]
  local name=$1 subj=$2 san=${3:-}
  local ext="$PKI/$name.ext"
  if [ -n "$san" ]; then
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' "$san" >"$ext"
  else
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n' >"$ext"
  fi
  genkey "$PKI/$name.key"
  openssl req -new -key "$PKI/$name.key" -subj "$subj" -out "$PKI/$name.csr" 2>/dev/null
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" \
    -CAcreateserial -days 3650 -sha256 -extfile "$ext" -out "$PKI/$name.crt" 2>/dev/null
  rm -f "$PKI/$name.csr" "$ext"
}

make_pki() {
  [ -f "$PKI/.done" ] && return 0
  say "generating PKI in $PKI"
  rm -rf "$PKI"; mkdir -p "$PKI"; chmod 700 "$PKI"
  genkey "$PKI/ca.key"
  openssl req -x509 -new -key "$PKI/ca.key" -subj "/CN=pdfqueue-test-ca" -days 3650 -sha256 \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" \
    -out "$PKI/ca.crt" 2>/dev/null
  sign apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,IP:10.96.0.1,IP:$NODE_IP,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign admin "/O=system:masters/CN=pdfqueue-admin"
  sign controller-manager "/CN=system:kube-controller-manager"
  sign scheduler "/CN=system:kube-scheduler"
  sign kwok "/O=system:masters/CN=kwok"
  genkey "$PKI/sa.key"
  openssl pkey -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
  touch "$PKI/.done"
}

# kubeconfig FILE USER: written here, not by four `kubectl config` runs (a Go binary's start each).
b64() { base64 -w0 <"$1"; }
kubeconfig() {
  local f=$1 user=$2
  (umask 077 && cat >"$f.tmp" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: pdfqueue-test
  cluster:
    server: https://$API_HOST:$KUBE_PORT
    certificate-authority-data: $(b64 "$PKI/ca.crt")
users:
- name: $user
  user:
    client-certificate-data: $(b64 "$PKI/$user.crt")
    client-key-data: $(b64 "$PKI/$user.key")
contexts:
- name: $CONTEXT
  context: {cluster: pdfqueue-test, user: $user}
current-context: $CONTEXT
EOF
  )
  mv -f "$f.tmp" "$f"
}

# ---------------------------------------------------------------------------
# start NAME CMD...: run detached, pidfile in DIR/run, log in DIR/logs.
start() {
  local name=$1; shift
  if pid_alive "$RUN/$name.pid"; then
    say "$name already running (pid $(cat "$RUN/$name.pid"))"
    return 0
  fi
  echo "=== $(date -u +%FT%TZ) starting: $*" >>"$LOGS/$name.log"
  setsid "$@" </dev/null >>"$LOGS/$name.log" 2>&1 &
  echo $! >"$RUN/$name.pid"
  say "$name started (pid $!, log $LOGS/$name.log)"
}

# wait_until DESC NAME CMD...: retry CMD; fail early if process NAME died.
wait_until() {
  local desc=$1 name=$2; shift 2
  local deadline=$((SECONDS + TIMEOUT))
  until "$@" >/dev/null 2>&1; do
    if [ -n "$name" ] && ! pid_alive "$RUN/$name.pid"; then
      die "$name exited while waiting for $desc; last log lines ($LOGS/$name.log):
$(tail -n 25 "$LOGS/$name.log")"
    fi
    if [ $SECONDS -ge $deadline ]; then
      die "timed out after ${TIMEOUT}s waiting for $desc${name:+; see $LOGS/$name.log}"
    fi
    sleep 0.5
  done
}

kc() { "$BIN/kubectl" --kubeconfig "$DIR/admin.kubeconfig" "$@"; }

etcd_healthy() { curl -fsS -m 2 "http://127.0.0.1:$ETCD_PORT/health" | grep -q '"health":"true"'; }
api_ready() {
  curl -fsS -m 3 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
    "https://$API_HOST:$KUBE_PORT/readyz" | grep -q '^ok$'
}
nodes_ready() { # one kubectl run for all of them
  local want got
  want="$(printf '%s=True\n' "${NODES[@]}")"
  got="$(kc get node "${NODES[@]}" -o 'jsonpath={range .items[*]}{.metadata.name}={.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' 2>/dev/null)"
  [ "$got" = "$want" ]
}
default_sa() { kc -n default get serviceaccount default; }

write_kwok_config() {
  # The default stages shipped in the kwok module (kustomize/stage): node
  # initialize + heartbeat-with-lease, and the general pod lifecycle.
  local ver src
  ver="$(basename "$(dirname "$(dirname "$(readlink -f "$BIN/kwok")")")")"   # kwok-vX.Y.Z
  ver="${ver#kwok-}"
  src="$CACHE/go/pkg/mod/sigs.k8s.io/kwok@$ver/kustomize/stage"
  if [ ! -d "$src" ]; then
    GOPATH="$CACHE/go" GOMODCACHE="$CACHE/go/pkg/mod" GOFLAGS=-mod=mod \
      "$(command -v go || echo /usr/local/go/bin/go)" mod download "sigs.k8s.io/kwok@$ver" >/dev/null 2>&1 || true
  fi
  [ -d "$src" ] || die "kwok stage files not found at $src"
  mkdir -p "$DIR/kwok"
  local f out="$DIR/kwok/kwok.yaml.tmp"
  {
    # No KwokConfiguration document here: kwok only applies its option
    # defaults when none is given (options come from flags instead).
    for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
      pod/general/pod-create.yaml pod/general/pod-init-container-running.yaml \
      pod/general/pod-init-container-completed.yaml pod/general/pod-ready.yaml \
      pod/general/pod-complete.yaml pod/general/pod-delete.yaml; do
      [ -f "$src/$f" ] || die "missing kwok stage $src/$f"
      echo "---"
      cat "$src/$f"
    done
  } >"$out"
  mv -f "$out" "$DIR/kwok/kwok.yaml"
}

create_nodes() {
  local n
  for n in "${NODES[@]}"; do
    cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $n
  annotations:
    node.alpha.kubernetes.io/ttl: "0"
    kwok.x-k8s.io/node: fake
  labels:
    beta.kubernetes.io/arch: amd64
    beta.kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    kubernetes.io/hostname: $n
    kubernetes.io/os: linux
    kubernetes.io/role: agent
    node-role.kubernetes.io/agent: ""
    type: kwok
status:
  allocatable: {cpu: "32", memory: 256Gi, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, pods: "110"}
  nodeInfo:
    architecture: amd64
    bootID: ""
    containerRuntimeVersion: ""
    kernelVersion: ""
    kubeProxyVersion: fake
    kubeletVersion: fake
    machineID: ""
    operatingSystem: linux
    osImage: ""
    systemUUID: ""
  phase: Running
EOF
  done | kc apply -f - >/dev/null
}

# ---------------------------------------------------------------------------
up() {
  if [ "$REAL" = 1 ]; then
    [ "$(cat "$DIR/mode" 2>/dev/null || echo real)" = real ] ||
      die "$DIR holds a kwok control plane: use another DIR for --real-node"
    node_prereqs
    node_network_up   # the API server listens on the bridge address
    echo real >"$DIR/mode"
  else
    [ "$(cat "$DIR/mode" 2>/dev/null || echo kwok)" = kwok ] ||
      die "$DIR holds a real-node control plane: add --real-node"
    echo kwok >"$DIR/mode"
  fi
  command -v openssl >/dev/null || die "openssl is required"
  command -v curl >/dev/null || die "curl is required"
  ensure_binaries
  mkdir -p "$LOGS" "$RUN" "$DIR/etcd"
  make_pki
  kubeconfig "$DIR/admin.kubeconfig" admin
  kubeconfig "$DIR/controller-manager.kubeconfig" controller-manager
  kubeconfig "$DIR/scheduler.kubeconfig" scheduler
  kubeconfig "$DIR/kwok.kubeconfig" kwok
  [ "$REAL" = 1 ] || write_kwok_config

  start etcd "$BIN/etcd" --name pdfqueue-test --data-dir "$DIR/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
    --initial-cluster "pdfqueue-test=http://127.0.0.1:$ETCD_PEER_PORT" \
    --listen-metrics-urls "" --unsafe-no-fsync --log-level warn
  wait_until "etcd health on 127.0.0.1:$ETCD_PORT" etcd etcd_healthy

  local node_args=(--endpoint-reconciler-type none)
  if [ "$REAL" = 1 ]; then
    # Pods reach the API through the kubernetes Service (endpoint: the node address); the API
    # server reaches the kubelet with its own client certificate (logs, exec, port-forward).
    node_pki
    node_args=(--endpoint-reconciler-type lease
      --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt"
      --kubelet-client-key "$PKI/apiserver-kubelet-client.key"
      --kubelet-certificate-authority "$PKI/ca.crt"
      --kubelet-preferred-address-types InternalIP)
  fi
  start kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
    --bind-address "$API_HOST" --advertise-address "$API_HOST" --secure-port "$KUBE_PORT" \
    "${node_args[@]}" \
    --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
    --client-ca-file "$PKI/ca.crt" \
    --authorization-mode Node,RBAC \
    --service-account-key-file "$PKI/sa.pub" \
    --service-account-signing-key-file "$PKI/sa.key" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-cluster-ip-range 10.96.0.0/16 \
    --allow-privileged=true --profiling=false
  # Not sooner: the controller-manager gives up after 10 s without a healthy API server.
  wait_until "kube-apiserver /readyz on https://$API_HOST:$KUBE_PORT" kube-apiserver api_ready

  start kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$DIR/controller-manager.kubeconfig" \
    --authentication-kubeconfig "$DIR/controller-manager.kubeconfig" \
    --authorization-kubeconfig "$DIR/controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 \
    --service-account-private-key-file "$PKI/sa.key" \
    --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
    --use-service-account-credentials=true \
    --leader-elect=false --profiling=false

  start kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$DIR/scheduler.kubeconfig" \
    --authentication-kubeconfig "$DIR/scheduler.kubeconfig" \
    --authorization-kubeconfig "$DIR/scheduler.kubeconfig" \
    --bind-address 127.0.0.1 --secure-port 0 \
    --leader-elect=false --profiling=false

  if [ "$REAL" = 1 ]; then
    wait_until "ServiceAccount default/default" kube-controller-manager default_sa
    node_up
    say "control plane up with a real node: KUBECONFIG=$DIR/admin.kubeconfig (context $CONTEXT)"
    return 0
  fi

  start kwok "$BIN/kwok" --kubeconfig "$DIR/kwok.kubeconfig" \
    --config "$DIR/kwok/kwok.yaml" \
    --manage-all-nodes=false \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    --manage-nodes-with-label-selector= \
    --disregard-status-with-annotation-selector=kwok.x-k8s.io/status=custom \
    --disregard-status-with-label-selector= \
    --cidr=10.0.0.1/24 --node-ip=10.0.0.1 --node-lease-duration-seconds=40

  create_nodes
  wait_until "nodes ${NODES[*]} Ready" kwok nodes_ready
  wait_until "ServiceAccount default/default" kube-controller-manager default_sa
  local p
  for p in kube-scheduler kwok; do
    pid_alive "$RUN/$p.pid" || die "$p is not running; see $LOGS/$p.log"
  done
  say "control plane up: KUBECONFIG=$DIR/admin.kubeconfig (context $CONTEXT)"
}

down() {
  local n
  if [ "$(cat "$DIR/mode" 2>/dev/null)" = real ]; then node_down; fi
  for n in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
    stop_pidfile "$n" "$RUN/$n.pid"
  done
}

print_env() {
  cat <<EOF
export KUBECONFIG=$DIR/admin.kubeconfig
export PDFQUEUE_KUBECONFIG=$DIR/admin.kubeconfig
export PDFQUEUE_KUBE_CONTEXT=$CONTEXT
export PATH=$BIN:\$PATH
EOF
}

# ---------------------------------------------------------------------------
[ $# -eq 2 ] || { [ $# -eq 3 ] && [ "$1" = up ] && [ "$3" = --real-node ]; } || usage
cmd=$1
REAL=0
[ "${3:-}" = --real-node ] && REAL=1
mkdir -p "$2"
DIR="$(cd "$2" && pwd)"
PKI="$DIR/pki"; LOGS="$DIR/logs"; RUN="$DIR/run"
mkdir -p "$RUN" "$LOGS"
API_HOST=127.0.0.1
if [ "$REAL" = 1 ] || [ "$(cat "$DIR/mode" 2>/dev/null)" = real ]; then
  API_HOST=$NODE_IP
fi
case "$cmd" in
  up) up ;;
  down) down ;;
  env) print_env ;;
  node-check) node_prereqs && echo "real node: prerequisites met" ;;
  pvs) [ "$(cat "$DIR/mode" 2>/dev/null)" = real ] || die "$DIR holds no real node"; node_pvs ;;
  *) usage ;;
esac
