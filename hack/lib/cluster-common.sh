# Shared settings and helpers for hack/cluster-up.sh and hack/cluster-down.sh.
# Source it; do not run it.
# shellcheck shell=bash disable=SC2034  # variables are used by the sourcing scripts

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"

# shellcheck source=hack/lib/versions.sh
source "$ROOT/hack/lib/versions.sh"
QUORUM_CACHE="${QUORUM_CACHE:-$ROOT/.cache}"
BIN_DIR="$QUORUM_CACHE/bin/$K8S_VERSION"
CLUSTER_DIR="${CLUSTER_DIR:-$QUORUM_CACHE/cluster}"
PKI_DIR="$CLUSTER_DIR/pki"
LOG_DIR="$CLUSTER_DIR/logs"
PID_DIR="$CLUSTER_DIR/pids"

ETCD_PORT="${ETCD_PORT:-12379}"
ETCD_PEER_PORT="${ETCD_PEER_PORT:-12380}"
APISERVER_PORT="${APISERVER_PORT:-16443}"
CONTROLLER_MANAGER_PORT="${CONTROLLER_MANAGER_PORT:-17257}"
SCHEDULER_PORT="${SCHEDULER_PORT:-17259}"
QUORUM_PORT="${QUORUM_PORT:-8888}"

# Components in start order; stopped in reverse.
# native-scheduler, members-scheduler, null-scheduler (and its null-extender): what
# bench/cluster_bench.py starts, if still running.
# cluster-autoscaler (cluster-up --autoscaler) stops first: on SIGTERM it deletes its nodes.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler native-scheduler members-scheduler
            null-extender null-scheduler kwok quorum
            cluster-autoscaler jobset kueue)
# Kueue runs in a container (hack/lib/kueue.sh): removed even if its podman process was killed.
KUEUE_CONTAINER="quorum-kueue-${KUEUE_WEBHOOK_PORT:-19543}"

log() { printf '[%s] %s\n' "$(basename "$0" .sh)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# pid_of NAME prints the pid of a component started by cluster-up.sh, if it is
# still running. A pid is trusted only if its command line mentions
# a path under CLUSTER_DIR, so a recycled pid never gets signalled.
pid_of() {
  local file="$PID_DIR/$1.pid" pid cmd
  [[ -f "$file" ]] || return 1
  pid="$(<"$file")"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  cmd="$(ps -o args= -p "$pid" 2>/dev/null)" || return 1
  [[ "$cmd" == *"$CLUSTER_DIR/"* ]] || return 1
  printf '%s\n' "$pid"
}

# stop_component NAME sends SIGTERM, waits up to 15s, then SIGKILL.
stop_component() {
  local name="$1" pid i
  if pid="$(pid_of "$name")"; then
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
      log "$name did not exit after 15s; killing it"
      kill -KILL "$pid" 2>/dev/null || true
    fi
  fi
  rm -f "$PID_DIR/$name.pid"
}

stop_all() {
  local i kueue=0
  [[ ! -f "$PID_DIR/kueue.pid" ]] || kueue=1
  node_cleanup
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    stop_component "${COMPONENTS[i]}"
  done
  if ((kueue)); then
    # shellcheck source=hack/lib/podman.sh
    source "$ROOT/hack/lib/podman.sh"
    podman_cmd rm --force --ignore "$KUEUE_CONTAINER" >/dev/null 2>&1 || true
  fi
}

# port_in_use PORT succeeds if something accepts connections on 127.0.0.1:PORT.
port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# --- the real node (cluster-up --real-node; hack/lib/real-node.sh) ------------------------------
REAL_NODE="${REAL_NODE_NAME:-quorum-real-node}"
NODE_STATE="$QUORUM_CACHE/node-state"   # containerd's and the kubelet's state: holds mounts while up
NODE_SOCKET="$NODE_STATE/run/containerd.sock"
NODE_BRIDGE=qnode0
NODE_POD_CIDR="${NODE_POD_CIDR:-10.244.0.0/24}"
NODE_BRIDGE_IP="${NODE_POD_CIDR%.*}.1"
PAUSE_IMAGE=localhost/quorum-standin/pause:1
KUBELET_PORT="${KUBELET_PORT:-10350}"
KUBELET_HEALTHZ_PORT="${KUBELET_HEALTHZ_PORT:-10348}"
DEFAULT_SCHEDULER_PORT="${DEFAULT_SCHEDULER_PORT:-17261}"

# node_cleanup stops the kubelet, kills the containers it started, stops containerd and removes
# what they leave behind on the host: mounts, network namespaces, the bridge, the state directory.
node_cleanup() {
  local task mnt ns
  stop_component default-scheduler
  stop_component kubelet
  if [[ -S "$NODE_SOCKET" ]] && pid_of containerd >/dev/null; then
    for task in $(ctr -a "$NODE_SOCKET" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$NODE_SOCKET" -n k8s.io tasks kill -a -s SIGKILL "$task" >/dev/null 2>&1 || true
    done
    sleep 1
    for task in $(ctr -a "$NODE_SOCKET" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$NODE_SOCKET" -n k8s.io tasks delete -f "$task" >/dev/null 2>&1 || true
    done
  fi
  stop_component containerd
  pkill -KILL -f "containerd-shim.*-address $NODE_SOCKET" 2>/dev/null || true
  [[ -d "$NODE_STATE" ]] || return 0
  for ns in $(ip netns list 2>/dev/null | awk '/^cni-/ { print $1 }'); do   # pods killed above
    if ip netns exec "$ns" ip -4 -o addr 2>/dev/null | grep -q " ${NODE_POD_CIDR%.*}\."; then
      ip netns delete "$ns" 2>/dev/null || true
    fi
  done
  while read -r mnt; do umount -l "$mnt" 2>/dev/null || true; done \
    < <(awk -v root="$NODE_STATE" 'index($2, root) == 1 { print $2 }' /proc/mounts | sort -r)
  ip link delete "$NODE_BRIDGE" 2>/dev/null || true
  rm -rf "$NODE_STATE"
  log "removed the real node's state"
}
