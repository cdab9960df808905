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
# native-scheduler: the second kube-scheduler bench/cluster_bench.py starts, if it is still running.
# cluster-autoscaler (cluster-up --autoscaler) stops first: on SIGTERM it deletes its nodes.
COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler native-scheduler kwok quorum
            cluster-autoscaler)

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
  local i
  for ((i = ${#COMPONENTS[@]} - 1; i >= 0; i--)); do
    stop_component "${COMPONENTS[i]}"
  done
}

# port_in_use PORT succeeds if something accepts connections on 127.0.0.1:PORT.
port_in_use() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}
