#!/usr/bin/env bash
# Print Node manifests for kwok-managed fake nodes in a block/rack topology.
#
#   hack/gen-nodes.sh | kubectl apply -f -
#
# Node names are kwok-b<i>-r<j>-n<k> (0-based). Labels (the topology levels Quorum uses by default, see docs/configuration.md):
#   kubernetes.io/hostname=<node>
#   topology.quorum.dev/block=b<i>
#   topology.quorum.dev/rack=b<i>-r<j>
# Environment (defaults in brackets):
#   NODE_BLOCKS [2]  NODE_RACKS_PER_BLOCK [4]  NODE_NODES_PER_RACK [4]
#   NODE_CPU [64]  NODE_MEMORY [512Gi]  NODE_GPUS [8]  NODE_PODS [110]
set -euo pipefail

blocks="${NODE_BLOCKS:-2}"
racks="${NODE_RACKS_PER_BLOCK:-4}"
per_rack="${NODE_NODES_PER_RACK:-4}"
cpu="${NODE_CPU:-64}"
memory="${NODE_MEMORY:-512Gi}"
gpus="${NODE_GPUS:-8}"
pods="${NODE_PODS:-110}"

for v in blocks racks per_rack gpus pods; do
  [[ "${!v}" =~ ^[0-9]+$ ]] || { echo "gen-nodes: $v must be a non-negative integer, got '${!v}'" >&2; exit 2; }
done

resources() {
  printf '    cpu: "%s"\n    memory: "%s"\n    pods: "%s"\n' "$cpu" "$memory" "$pods"
  if ((gpus > 0)); then
    printf '    nvidia.com/gpu: "%s"\n' "$gpus"
  fi
}

for ((b = 0; b < blocks; b++)); do
  for ((r = 0; r < racks; r++)); do
    for ((n = 0; n < per_rack; n++)); do
      name="kwok-b$b-r$r-n$n"
      cat <<EOF
---
apiVersion: v1
kind: Node
metadata:
  name: $name
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    type: kwok
    kubernetes.io/hostname: $name
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    topology.quorum.dev/block: b$b
    topology.quorum.dev/rack: b$b-r$r
status:
  capacity:
$(resources)
  allocatable:
$(resources)
EOF
    done
  done
done
