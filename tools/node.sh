# A real node for tools/kube.sh (sourced by it, `up DIR --real-node`): kubelet + containerd + runc,
# CNI bridge networking, kube-proxy (iptables) for Services, CoreDNS for service names and static
# hostPath PersistentVolumes. Everything but the kernel objects lives under DIR.
#
# Network: one bridge ($BRIDGE, $POD_SUBNET, gateway $NODE_IP = the node's InternalIP, where the
# API server, kubelet and CoreDNS listen). Nothing listens on any other address but loopback;
# chain PDFQ-IN drops traffic for the pod subnet arriving from elsewhere, chain PDFQ-FWD drops
# anything forwarded into or out of the bridge from or to another interface (pods reach each
# other, the node and Services, never the outside). `down` removes both chains, kube-proxy's
# rules, the bridge, and restores ip_forward and bridge-nf-call-iptables as they were.
#
# Versions: kubelet and kube-proxy from the control plane's k8s.io/kubernetes version (no skew);
# Debian's containerd 1.6 (CRI v1) and runc; Debian's CNI plugins; CoreDNS from its Go module.
# Non-defaults this machine needs: failCgroupV1=false (cgroups v1 hierarchies), CRI
# restrict_oom_score_adj=true (root lacks CAP_SYS_RESOURCE), a kubelet client certificate for the
# API server (logs/exec/port-forward) instead of anonymous kubelet access.

BRIDGE="${PDFQUEUE_NODE_BRIDGE:-pdfq0}"
POD_SUBNET="${PDFQUEUE_POD_SUBNET:-10.244.0.0/24}"
NODE_IP="${PDFQUEUE_NODE_IP:-10.244.0.1}"
POD_PREFIX="${POD_SUBNET#*/}"
KUBELET_PORT="${PDFQUEUE_KUBELET_PORT:-10250}"
PROXY_HEALTHZ_PORT="${PDFQUEUE_KUBE_PROXY_PORT:-10256}"   # and +1 for its metrics
NODE_NAME="$(hostname | tr '[:upper:]' '[:lower:]')"
PV_COUNT="${PDFQUEUE_NODE_PVS:-8}"
OWNER_FILE=/run/pdfqueue-real-node.owner
CNI_BIN="${PDFQUEUE_CNI_BIN:-/usr/lib/cni}"
NODE_DISK_MARGIN=$((2 << 30))   # bytes free beyond the images: the pods' data, logs, emptyDirs

node_die() { die "real node: $*"; }
# node_cannot: this machine cannot run containers at all (the pod tests skip, exit 3), unlike
# node_die, a failure on a machine that can (the pod tests fail).
NODE_CANNOT=3
node_cannot() { echo "kube: real node: $*" >&2; exit "$NODE_CANNOT"; }

# ---- prerequisites: say which one failed ---------------------------------------------------------
node_need() { # TOOL PACKAGE
  command -v "$1" >/dev/null 2>&1 || node_die "'$1' not found: install the Debian package '$2'"
}

# The Debian packages the node and the image builds use (installed when missing, as root).
NODE_PACKAGES=(containerd runc containernetworking-plugins iptables conntrack iproute2 buildah
  mmdebstrap podman)
node_packages() {
  local missing=() p
  for p in "${NODE_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || node_cannot "missing Debian packages: ${missing[*]} (no apt-get here)"
  say "installing Debian packages: ${missing[*]}"
  # A fresh machine's package lists may be empty or stale: read them first.
  apt-get update -qq -o DPkg::Lock::Timeout=600 >&2 || node_die "apt-get update failed"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 \
    --no-install-recommends "${missing[@]}" >&2 ||
    node_die "apt-get install ${missing[*]} failed"
}

# node_module MODULE: load a kernel module if modprobe can (quietly: the caller says what failed).
node_module() { command -v modprobe >/dev/null && modprobe "$1" 2>/dev/null; return 0; }

node_prereqs() {
  [ "$(id -u)" = 0 ] || node_cannot "needs root (containerd, runc, network namespaces, iptables)"
  [ -d /sys/fs/cgroup/memory ] || [ -f /sys/fs/cgroup/cgroup.controllers ] ||
    node_cannot "no memory cgroup (neither a cgroups v1 'memory' hierarchy nor cgroups v2) under /sys/fs/cgroup"
  grep -qw overlay /proc/filesystems || node_module overlay
  grep -qw overlay /proc/filesystems || node_cannot "kernel has no overlay filesystem (module 'overlay')"
  [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] || node_module br_netfilter
  [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ] ||
    node_cannot "sysctl net.bridge.bridge-nf-call-iptables missing: load the kernel module 'br_netfilter'"
  [ -w /proc/sys/net/ipv4/ip_forward ] || node_cannot "sysctl net.ipv4.ip_forward is not writable"
  command -v dpkg-query >/dev/null && node_packages
  node_need containerd containerd
  node_need ctr containerd
  node_need runc runc
  node_need iptables iptables
  node_need conntrack conntrack
  node_need ip iproute2
  node_need buildah buildah
  local p
  for p in bridge host-local loopback; do
    [ -x "$CNI_BIN/$p" ] || node_die "CNI plugin $CNI_BIN/$p missing: install the Debian package 'containernetworking-plugins'"
  done
  if [ -f "$OWNER_FILE" ] && [ "$(cat "$OWNER_FILE")" != "$DIR" ]; then
    local other; other="$(cat "$OWNER_FILE")"
    if pid_alive "$other/run/kubelet.pid" || pid_alive "$other/run/containerd.pid"; then
      node_cannot "another real node runs on this machine (state $other): stop it with tools/kube.sh down $other"
    fi
  fi
  node_reclaim
}

# node_reclaim: a node that died without `down` (its processes killed, its run cut off) leaves
# its kernel objects behind: mounts under its DIR, the bridge, our chains and kube-proxy's.
# Remove them as `down` would have, and say so, before a node starts here (or a test notes the
# host's state). Only a node of ours is recognised: its owner file, its bridge, its PDFQ chains.
node_reclaim() {
  local dead
  dead="$(cat "$OWNER_FILE" 2>/dev/null || true)"
  [ -n "$dead" ] && [ -d "$dead" ] || dead="$DIR"
  if pid_alive "$dead/run/kubelet.pid" || pid_alive "$dead/run/containerd.pid"; then
    return 0 # alive: ours to reuse (same DIR) or refused above (another)
  fi
  local left=()
  [ -d "$dead/run" ] && awk -v d="$dead/" 'index($5, d) == 1 {found=1} END {exit !found}' \
    /proc/self/mountinfo && left+=("mounts under $dead")
  ip link show "$BRIDGE" >/dev/null 2>&1 && left+=("bridge $BRIDGE")
  { iptables -S PDFQ-FWD || iptables -S PDFQ-IN; } >/dev/null 2>&1 && left+=("chains PDFQ-*")
  [ ${#left[@]} -eq 0 ] && return 0
  say "a real node that no longer runs left ${left[*]}: removing them as 'down' would"
  (
    DIR="$dead" PKI="$dead/pki" LOGS="$dead/logs" RUN="$dead/run"
    mkdir -p "$LOGS" "$RUN"
    node_down
    node_unmount
    [ -x "$BIN/kube-proxy" ] && "$BIN/kube-proxy" --cleanup >>"$LOGS/kube-proxy.log" 2>&1 || true
    node_network_down
  )
}

node_binaries() {
  local b
  for b in kubelet kube-proxy coredns; do
    [ -x "$BIN/$b" ] && continue
    say "node binaries missing in $BIN; running build-binaries.sh node (slow when cold)"
    "$HERE/build-binaries.sh" node >&2
    break
  done
}

# ---- PKI and kubeconfigs -------------------------------------------------------------------------
node_pki() {
  [ -f "$PKI/kubelet.crt" ] ||
    sign kubelet "/O=system:nodes/CN=system:node:$NODE_NAME" "IP:$NODE_IP,DNS:$NODE_NAME"
  [ -f "$PKI/kube-proxy.crt" ] || sign kube-proxy "/CN=system:kube-proxy"
  [ -f "$PKI/apiserver-kubelet-client.crt" ] ||
    sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client"
}

# ---- network: bridge, guards, sysctls ------------------------------------------------------------
sysctl_save() { # NAME: remember the value before we change it (once)
  local f="$RUN/sysctl.$1"
  [ -f "$f" ] || cat "/proc/sys/${1//.//}" >"$f"
}
sysctl_set() { sysctl_save "$1"; echo "$2" >"/proc/sys/${1//.//}"; }

node_network_up() {
  echo "$DIR" >"$OWNER_FILE"
  if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link add "$BRIDGE" type bridge || node_die "cannot create bridge $BRIDGE (kernel module 'bridge')"
  fi
  case "$(ip -o addr show dev "$BRIDGE")" in
    *"inet $NODE_IP/"*) ;;
    *) ip addr add "$NODE_IP/$POD_PREFIX" dev "$BRIDGE" ;;
  esac
  ip link set "$BRIDGE" up
  # Guards first, before anything can forward.
  iptables -N PDFQ-FWD 2>/dev/null || iptables -F PDFQ-FWD
  iptables -A PDFQ-FWD -i "$BRIDGE" ! -o "$BRIDGE" -j DROP
  iptables -A PDFQ-FWD -o "$BRIDGE" ! -i "$BRIDGE" -j DROP
  iptables -C FORWARD -j PDFQ-FWD 2>/dev/null || iptables -I FORWARD 1 -j PDFQ-FWD
  iptables -N PDFQ-IN 2>/dev/null || iptables -F PDFQ-IN
  iptables -A PDFQ-IN -i lo -j RETURN
  iptables -A PDFQ-IN -i "$BRIDGE" -j RETURN
  iptables -A PDFQ-IN -d "$POD_SUBNET" -j DROP
  iptables -C INPUT -j PDFQ-IN 2>/dev/null || iptables -I INPUT 1 -j PDFQ-IN
  # Pod -> Service -> pod on the same bridge needs bridged packets to see kube-proxy's NAT.
  sysctl_set net.bridge.bridge-nf-call-iptables 1
  sysctl_save net.ipv4.ip_forward
  sysctl_set net.ipv4.ip_forward 1
}

node_network_down() {
  iptables -D FORWARD -j PDFQ-FWD 2>/dev/null || true
  iptables -F PDFQ-FWD 2>/dev/null && iptables -X PDFQ-FWD 2>/dev/null || true
  iptables -D INPUT -j PDFQ-IN 2>/dev/null || true
  # The kubelet's own chains: its canaries, the iptables hint, and KUBE-FIREWALL (it drops
  # non-loopback packets to 127.0.0.0/8) with its jumps from INPUT and OUTPUT.
  local t ipt c
  for ipt in iptables ip6tables; do
    for c in INPUT OUTPUT; do
      while "$ipt" -D "$c" -j KUBE-FIREWALL 2>/dev/null; do :; done
    done
    "$ipt" -F KUBE-FIREWALL 2>/dev/null && "$ipt" -X KUBE-FIREWALL 2>/dev/null
    for t in mangle nat filter; do
      "$ipt" -t "$t" -X KUBE-KUBELET-CANARY 2>/dev/null || true
      "$ipt" -t "$t" -X KUBE-IPTABLES-HINT 2>/dev/null || true
    done
  done
  iptables -F PDFQ-IN 2>/dev/null && iptables -X PDFQ-IN 2>/dev/null || true
  if ip link show "$BRIDGE" >/dev/null 2>&1; then
    ip link del "$BRIDGE" && say "bridge $BRIDGE removed"
  fi
  local f name
  for f in "$RUN"/sysctl.*; do
    [ -f "$f" ] || continue
    name="${f##*/sysctl.}"
    cat "$f" >"/proc/sys/${name//.//}" && say "sysctl $name restored to $(cat "$f")"
    rm -f "$f"
  done
  [ "$(cat "$OWNER_FILE" 2>/dev/null)" = "$DIR" ] && rm -f "$OWNER_FILE"
  return 0
}

# ---- containerd ----------------------------------------------------------------------------------
CTRD_SOCK() { echo "$DIR/containerd/containerd.sock"; }
ctr_() { ctr --address "$(CTRD_SOCK)" -n k8s.io "$@"; }

write_containerd_config() {
  mkdir -p "$DIR/containerd" "$DIR/cni/net.d" "$DIR/cni/ipam"
  cat >"$DIR/containerd/config.toml" <<EOF
# Generated by tools/kube.sh --real-node.
version = 2
root = "$DIR/containerd/root"
state = "$DIR/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = "$(CTRD_SOCK)"
[ttrpc]
  address = "$(CTRD_SOCK).ttrpc"
[debug]
  address = ""
[metrics]
  address = ""
[plugins."io.containerd.internal.v1.opt"]
  path = "$DIR/containerd/opt"
[plugins."io.containerd.grpc.v1.cri"]
  # exec/attach/port-forward streams on loopback only
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  sandbox_image = "$PAUSE"
  # root here lacks CAP_SYS_RESOURCE: runc cannot lower oom_score_adj below the parent's.
  restrict_oom_score_adj = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$CNI_BIN"
    conf_dir = "$DIR/cni/net.d"
EOF
  cat >"$DIR/cni/net.d/10-pdfqueue.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "pdfqueue",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$DIR/cni/ipam",
        "ranges": [[{"subnet": "$POD_SUBNET", "gateway": "$NODE_IP"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
EOF
}

containerd_ready() { ctr --address "$(CTRD_SOCK)" version; }

# import_images: every node image (tools/images.sh) not yet in containerd's k8s.io namespace, once
# the disk has room for them; then the node keeps only these (a warm node outlives code changes).
import_images() {
  local have line ref refs=() need=0 free
  local -A missing=()   # ref -> its archive
  have="$(ctr_ images ls -q 2>/dev/null || true)"
  while IFS= read -r line; do
    ref="${line#*=}"
    case "$line" in API=*|WORKER=*|OPERATOR=*|REDIS=*|POSTGRES=*|VERSITYGW=*|CURL=*|PAUSE=*) ;; *) continue ;; esac
    refs+=("$ref")
    grep -qxF "$ref" <<<"$have" && continue
    missing[$ref]="$(bash "$HERE/images.sh" archive "$ref")"
    need=$((need + $(stat -c %s "${missing[$ref]}")))
  done < <(bash "$HERE/images.sh" refs)
  # An image unpacks to about its archive's size again; the pods' logs, volumes and data need room
  # too. A disk that fills up mid-run fails pods in ways that say nothing about the cause.
  free=$(($(df --output=avail -B1 "$DIR" | tail -n 1)))
  need=$((2 * need + NODE_DISK_MARGIN))
  [ "$free" -ge "$need" ] ||
    node_die "$((free >> 20)) MiB free on the disk of $DIR; the node needs $((need >> 20)) MiB (its images unpacked, and $((NODE_DISK_MARGIN >> 20)) MiB for the pods): free some space"
  for ref in "${!missing[@]}"; do
    say "importing $ref into containerd"
    ctr_ images import "${missing[$ref]}" >/dev/null ||
      node_die "cannot import $ref into containerd"
  done
  while IFS= read -r ref; do
    case "$ref" in localhost/pdfqueue*) ;; *) continue ;; esac
    printf '%s\n' "${refs[@]}" | grep -qxF "$ref" && continue
    say "removing $ref from containerd (no longer built)"
    ctr_ images rm "$ref" >/dev/null 2>&1 || true
  done <<<"$have"
}

# ---- kubelet -------------------------------------------------------------------------------------
write_kubelet_config() {
  mkdir -p "$DIR/kubelet" "$DIR/pod-logs"
  : >"$DIR/kubelet/resolv.conf"   # pods get only the cluster DNS, none of the host's search domains
  cat >"$DIR/kubelet/config.yaml" <<EOF
# Generated by tools/kube.sh --real-node.
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$(CTRD_SOCK)
address: $NODE_IP
port: $KUBELET_PORT
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 0
tlsCertFile: $PKI/kubelet.crt
tlsPrivateKeyFile: $PKI/kubelet.key
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization:
  mode: Webhook
clusterDNS: [$NODE_IP]
clusterDomain: cluster.local
resolvConf: $DIR/kubelet/resolv.conf
podCIDR: $POD_SUBNET
podLogsDir: $DIR/pod-logs
failSwapOn: false
serializeImagePulls: false
registerNode: true
maxPods: 60
# Disk-based eviction off ("0%" disables a threshold): the node shares the build machine's disk,
# whose free share says nothing about the node's own use, and a DiskPressure taint would leave the
# chart's pods Pending until helm's --wait times out. import_images checks the room the node needs.
evictionHard: {memory.available: "100Mi", nodefs.available: "0%", imagefs.available: "0%", nodefs.inodesFree: "0%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
}

node_ready() {
  [ "$(kc get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}' 2>/dev/null)" = True ]
}

# ---- kube-proxy and CoreDNS ----------------------------------------------------------------------
write_proxy_config() {
  mkdir -p "$DIR/kube-proxy"
  cat >"$DIR/kube-proxy/config.yaml" <<EOF
# Generated by tools/kube.sh --real-node.
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
hostnameOverride: $NODE_NAME
clientConnection: {kubeconfig: $DIR/kube-proxy.kubeconfig}
clusterCIDR: $POD_SUBNET
detectLocalMode: ClusterCIDR
bindAddress: 127.0.0.1
# Loopback only.
healthzBindAddress: "127.0.0.1:$PROXY_HEALTHZ_PORT"
metricsBindAddress: "127.0.0.1:$((PROXY_HEALTHZ_PORT + 1))"
nodePortAddresses: ["$NODE_IP/32"]
# Leave the host's conntrack sysctls alone.
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
}

write_corefile() {
  mkdir -p "$DIR/coredns"
  # Only the cluster's names: nothing is forwarded off this machine.
  cat >"$DIR/coredns/Corefile" <<EOF
.:53 {
    bind $NODE_IP
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
        kubeconfig $DIR/coredns.kubeconfig $CONTEXT
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
EOF
}

proxy_ready() { curl -fsS -m 2 "http://127.0.0.1:$PROXY_HEALTHZ_PORT/healthz"; }

dns_ready() {
  # kubernetes.default resolves to the kubernetes Service's ClusterIP.
  local ip
  ip="$(kc -n default get svc kubernetes -o 'jsonpath={.spec.clusterIP}')" || return 1
  [ -n "$ip" ] || return 1
  python3 - "$NODE_IP" "$ip" <<'EOF'
import socket, struct, sys
server, want = sys.argv[1], sys.argv[2]
q = struct.pack(">HHHHHH", 0x1234, 0x0100, 1, 0, 0, 0)
for part in b"kubernetes.default.svc.cluster.local".split(b"."):
    q += bytes([len(part)]) + part
q += b"\0" + struct.pack(">HH", 1, 1)
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
s.sendto(q, (server, 53))
data = s.recv(512)
sys.exit(0 if socket.inet_aton(want) in data else 1)
EOF
}

# ---- PersistentVolumes ---------------------------------------------------------------------------
# Static hostPath PVs under DIR/pv (no StorageClass: PVCs without one bind to them). Released PVs
# (their PVC deleted) are wiped and made Available again.
node_pvs() {
  mkdir -p "$DIR/pv"
  local i name phase
  for i in $(seq 0 $((PV_COUNT - 1))); do
    name="pdfqueue-pv-$i"
    phase="$(kc get pv "$name" -o 'jsonpath={.status.phase}' 2>/dev/null || true)"
    case "$phase" in
      Bound|Available|Pending) continue ;;
      Released|Failed) kc delete pv "$name" --wait=true >/dev/null ;;
    esac
    rm -rf "${DIR:?}/pv/$name"
    mkdir -p "$DIR/pv/$name"
    # hostPath volumes get no fsGroup ownership: any pod uid may write (like local-path's 0777).
    chmod 0777 "$DIR/pv/$name"
    cat <<EOF | kc apply -f - >/dev/null
apiVersion: v1
kind: PersistentVolume
metadata:
  name: $name
  labels: {pdfqueue.local/node-pv: "true"}
spec:
  capacity: {storage: 20Gi}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  hostPath: {path: $DIR/pv/$name, type: Directory}
  nodeAffinity:
    required:
      nodeSelectorTerms:
        - matchExpressions:
            - {key: kubernetes.io/hostname, operator: In, values: [$NODE_NAME]}
EOF
  done
}

# ---- up / down -----------------------------------------------------------------------------------
node_up() {
  node_prereqs
  node_binaries
  node_pki
  kubeconfig "$DIR/kubelet.kubeconfig" kubelet
  kubeconfig "$DIR/kube-proxy.kubeconfig" kube-proxy
  kubeconfig "$DIR/coredns.kubeconfig" admin
  say "building images (tools/images.sh build; cached by content hash)"
  bash "$HERE/images.sh" build >&2 || node_die "image build failed"
  PAUSE="$(bash "$HERE/images.sh" refs | sed -n 's/^PAUSE=//p')"
  node_network_up
  write_containerd_config
  [ -f "$RUN/netns.before" ] || { ls /run/netns 2>/dev/null || true; } >"$RUN/netns.before"
  start containerd containerd --config "$DIR/containerd/config.toml"
  wait_until "containerd on $(CTRD_SOCK)" containerd containerd_ready
  import_images
  write_kubelet_config
  start kubelet "$BIN/kubelet" --config "$DIR/kubelet/config.yaml" \
    --kubeconfig "$DIR/kubelet.kubeconfig" --hostname-override "$NODE_NAME" \
    --node-ip "$NODE_IP" --root-dir "$DIR/kubelet/root" --cert-dir "$DIR/kubelet/pki"
  wait_until "node $NODE_NAME Ready" kubelet node_ready
  write_proxy_config
  start kube-proxy "$BIN/kube-proxy" --config "$DIR/kube-proxy/config.yaml"
  wait_until "kube-proxy healthz on 127.0.0.1:$PROXY_HEALTHZ_PORT" kube-proxy proxy_ready
  write_corefile
  start coredns "$BIN/coredns" -conf "$DIR/coredns/Corefile" -dns.port 53
  wait_until "cluster DNS on $NODE_IP:53 (kubernetes.default through CoreDNS)" coredns dns_ready
  node_pvs
  say "real node $NODE_NAME Ready: pods on $BRIDGE ($POD_SUBNET), DNS $NODE_IP, images imported"
}

# node_drain: the kubelet stops every pod (its CNI teardown included) before it stops itself.
node_drain() {
  pid_alive "$RUN/kubelet.pid" || return 0
  kc delete pods --all-namespaces --all --grace-period=5 --wait=false >/dev/null 2>&1 || true
  local deadline=$((SECONDS + 60))
  while [ $SECONDS -lt $deadline ]; do
    [ -z "$(ctr_ tasks ls -q 2>/dev/null)" ] && break
    [ -z "$(kc get pods -A -o name 2>/dev/null)" ] && [ -z "$(ctr_ tasks ls -q 2>/dev/null)" ] && break
    sleep 1
  done
  # Sandboxes (pause) are stopped by the kubelet once their pods are gone.
  deadline=$((SECONDS + 30))
  while [ $SECONDS -lt $deadline ] && [ -n "$(ctr_ tasks ls -q 2>/dev/null)" ]; do sleep 1; done
}

# node_unmount: every mount under DIR (pod volumes, container rootfs), deepest first.
node_unmount() {
  local m
  for m in $(awk -v d="$DIR/" 'index($5, d) == 1 {print $5}' /proc/self/mountinfo | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
}

node_down() {
  [ -d "$DIR/containerd" ] || [ -f "$RUN/kubelet.pid" ] || return 0
  # No controller recreates what the drain deletes.
  stop_pidfile kube-controller-manager "$RUN/kube-controller-manager.pid"
  node_drain
  stop_pidfile kubelet "$RUN/kubelet.pid"
  stop_pidfile coredns "$RUN/coredns.pid"
  if pid_alive "$RUN/kube-proxy.pid"; then
    stop_pidfile kube-proxy "$RUN/kube-proxy.pid"
  fi
  [ -x "$BIN/kube-proxy" ] && "$BIN/kube-proxy" --cleanup >>"$LOGS/kube-proxy.log" 2>&1 || true
  # Whatever still runs: kill it through containerd, then stop containerd.
  if pid_alive "$RUN/containerd.pid"; then
    local t
    for t in $(ctr_ tasks ls -q 2>/dev/null); do
      ctr_ tasks kill -s SIGKILL "$t" >/dev/null 2>&1 || true
    done
    sleep 1
    for t in $(ctr_ tasks ls -q 2>/dev/null); do ctr_ tasks delete -f "$t" >/dev/null 2>&1 || true; done
  fi
  stop_pidfile containerd "$RUN/containerd.pid"
  # Shims of this containerd (named by its socket) outlive it; end them by pid.
  local pid
  for pid in $(pgrep -f "containerd-shim-runc-v2 .*-address $(CTRD_SOCK)" || true); do
    kill -KILL "$pid" 2>/dev/null || true
  done
  # Mounts under DIR (volumes, rootfs) and the network namespaces the CRI left.
  node_unmount
  local m
  # Only namespaces that appeared while this node ran, and only empty ones.
  for m in /run/netns/cni-*; do
    [ -e "$m" ] || continue
    grep -qxF "${m##*/}" "$RUN/netns.before" 2>/dev/null && continue
    ip netns pids "${m##*/}" 2>/dev/null | grep -q . && continue
    ip netns del "${m##*/}" 2>/dev/null || true
  done
  node_network_down
  rm -f "$RUN/netns.before"
}
