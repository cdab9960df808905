#!/usr/bin/env bash
# Start a real cluster-autoscaler (kwok provider) against the local cluster: one node group per
# rack of the same topology as the static nodes (hack/gen-nodes.sh), min 0, max AUTOSCALER_MAX
# nodes each. Its nodes are kwok fake nodes named <group>-<5 chars>, adopted by the cluster's kwok.
# Called by hack/cluster-up.sh --autoscaler; hack/cluster-down.sh stops it (SIGTERM), and stopping it
# deletes every node it made.
#
# Environment (defaults in brackets):
#   NODE_BLOCKS [2]  NODE_RACKS_PER_BLOCK [4]  NODE_CPU [64]  NODE_MEMORY [512Gi]  NODE_GPUS [8]
#   NODE_PODS [110]          the shape of every node group's nodes (as the static nodes)
#   AUTOSCALER_MAX [4]       nodes per node group at most
#   AUTOSCALER_FLAGS         extra flags for cluster-autoscaler (they come last, so they win)
#   AUTOSCALER_BYPASS [quorum]  --bypassed-scheduler-names ("" to keep the autoscaler's 30 s delay
#                            for pods asking GPUs)
#   AUTOSCALER_BOOTING [0]   1: every node it makes carries a startup taint
#                            (startup-taint.cluster-autoscaler.kubernetes.io/booting) until something
#                            removes it: a node that is still booting, as a cloud's nodes are for
#                            minutes (the tests' boot simulator, tests/e2e/booting.py, removes it)
set -euo pipefail
# shellcheck source=hack/lib/cluster-common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib/cluster-common.sh"

NAMESPACE=kube-system
GROUP_LABEL=autoscaling.quorum.dev/node-group
blocks="${NODE_BLOCKS:-2}" racks="${NODE_RACKS_PER_BLOCK:-4}" max="${AUTOSCALER_MAX:-4}"
cpu="${NODE_CPU:-64}" memory="${NODE_MEMORY:-512Gi}" gpus="${NODE_GPUS:-8}" pods="${NODE_PODS:-110}"
bypass="${AUTOSCALER_BYPASS-quorum}" booting="${AUTOSCALER_BOOTING:-0}"
export KUBECONFIG="$CLUSTER_DIR/kubeconfig"
kubectl() { "$BIN_DIR/kubectl" "$@"; }

install_crd() {
  # The ProvisioningRequest API (autoscaling.x-k8s.io/v1), from the same source as the binary.
  local crd_dir
  crd_dir="$(mktemp -d)"
  tar -xzf "${AUTOSCALER_SOURCE:-$ROOT/../shared/vendor/cluster-autoscaler-${AUTOSCALER_VERSION:-1.36.1}-kwok-src.tar.gz}" \
    -C "$crd_dir" --wildcards '*provisioningrequests.yaml'
  kubectl apply --server-side -f "$(find "$crd_dir" -name '*provisioningrequests.yaml' | head -1)" >/dev/null
  rm -rf "$crd_dir"
}
if [[ "${1:-}" == --crd-only ]]; then  # cluster-up installs the API before Quorum starts watching it
  install_crd
  exit 0
fi

binary="$("$ROOT/hack/build-autoscaler.sh")"

# The node group templates: one Node per rack, with the rack's labels. No hostname label: the
# autoscaler copies every label to each node it makes, so all would share one hostname.
booting_taint() {
  [[ "$booting" == 1 ]] || return 0
  printf '  spec:\n    taints:\n    - {key: startup-taint.cluster-autoscaler.kubernetes.io/booting, value: "true", effect: NoSchedule}'
}

templates() {
  local b r
  printf 'apiVersion: v1\nkind: List\nitems:\n'
  for ((b = 0; b < blocks; b++)); do
    for ((r = 0; r < racks; r++)); do
      cat <<EOF
- apiVersion: v1
  kind: Node
  metadata:
    name: template-b$b-r$r
    annotations:
      cluster-autoscaler.kwok.nodegroup/min-count: "0"
      cluster-autoscaler.kwok.nodegroup/max-count: "$max"
      kwok.x-k8s.io/node: fake
    labels:
      type: kwok
      kubernetes.io/os: linux
      kubernetes.io/arch: amd64
      $GROUP_LABEL: b$b-r$r
      topology.quorum.dev/block: b$b
      topology.quorum.dev/rack: b$b-r$r
$(booting_taint)
  status:
    capacity: {cpu: "$cpu", memory: "$memory", pods: "$pods", nvidia.com/gpu: "$gpus"}
    allocatable: {cpu: "$cpu", memory: "$memory", pods: "$pods", nvidia.com/gpu: "$gpus"}
EOF
    done
  done
}

provider_config() {
  cat <<EOF
apiVersion: v1alpha1
readNodesFrom: configmap
nodegroups:
  fromNodeLabelKey: $GROUP_LABEL
nodes:
  skipTaint: true
configmap:
  name: kwok-provider-templates
EOF
}

kubectl -n "$NAMESPACE" create configmap kwok-provider-config --from-literal=config="$(provider_config)" \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null
kubectl -n "$NAMESPACE" create configmap kwok-provider-templates --from-literal=templates="$(templates)" \
  --dry-run=client -o yaml | kubectl apply -f - >/dev/null

install_crd

log "starting cluster-autoscaler ($((blocks * racks)) node groups of at most $max nodes)"
flags=(--cloud-provider=kwok --kubeconfig="$KUBECONFIG" --namespace="$NAMESPACE" --leader-elect=false
       --address=127.0.0.1:18085 --scan-interval=5s --scale-down-unneeded-time=15s
       --scale-down-delay-after-add=15s --scale-down-delay-after-delete=0s --max-node-provision-time=2m
       --enable-provisioning-requests=true --v=2)
[[ -n "$bypass" ]] && flags+=(--bypassed-scheduler-names="$bypass")
# shellcheck disable=SC2206  # extra flags are words by design
flags+=(${AUTOSCALER_FLAGS:-})
KWOK_PROVIDER_MODE=local POD_NAMESPACE="$NAMESPACE" \
  setsid "$binary" "${flags[@]}" >"$LOG_DIR/cluster-autoscaler.log" 2>&1 </dev/null &
echo $! >"$PID_DIR/cluster-autoscaler.pid"
for ((i = 0; i < 300; i++)); do
  if curl -fsS http://127.0.0.1:18085/health-check >/dev/null 2>&1; then
    log "cluster-autoscaler ready (logs: ${LOG_DIR#"$ROOT"/}/cluster-autoscaler.log)"
    exit 0
  fi
  kill -0 "$(<"$PID_DIR/cluster-autoscaler.pid")" 2>/dev/null || break
  sleep 0.2
done
log "ERROR: cluster-autoscaler did not become healthy; last lines of its log:"
tail -n 25 "$LOG_DIR/cluster-autoscaler.log" | sed 's/^/    /' >&2
exit 1
