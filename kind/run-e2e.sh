#!/usr/bin/env bash
# Run Quorum's end-to-end tests against a kind cluster (needs a Docker engine).
#
#   kind/run-e2e.sh [pytest args...]
#
# Creates the kind cluster (reused if it exists), builds and loads the quorum:dev
# image, deploys kwok with hack/kwok/stages.yaml and the fake nodes of
# hack/gen-nodes.sh, deploys manifests/ (via kind/kustomization.yaml) and runs
# `pytest -m e2e tests/e2e`. The cluster is kept; delete it with
#   kind delete cluster --name quorum-e2e
# Environment: KIND_CLUSTER_NAME [quorum-e2e], KIND_NODE_IMAGE [kindest/node:$K8S_VERSION],
#   KWOK_VERSION [v0.8.0], PYTHON [python3], NODE_* as in hack/gen-nodes.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CLUSTER="${KIND_CLUSTER_NAME:-quorum-e2e}"
# shellcheck source=hack/lib/versions.sh
source "$ROOT/hack/lib/versions.sh"
NODE_IMAGE="${KIND_NODE_IMAGE:-kindest/node:$K8S_VERSION}"
PYTHON="${PYTHON:-python3}"
IMAGE=quorum:dev
FORWARD_PORT="${QUORUM_FORWARD_PORT:-18888}"
export KUBECONFIG="$ROOT/.cache/kind/$CLUSTER.kubeconfig"

log() { printf '[run-e2e] %s\n' "$*" >&2; }
for tool in docker kind kubectl "$PYTHON"; do
  command -v "$tool" >/dev/null || { log "ERROR: $tool is required"; exit 1; }
done
docker info >/dev/null 2>&1 || { log "ERROR: no Docker engine reachable; kind cannot run here"; exit 1; }

mkdir -p "$(dirname "$KUBECONFIG")"
if kind get clusters 2>/dev/null | grep -qx "$CLUSTER"; then
  log "reusing kind cluster $CLUSTER"
  kind export kubeconfig --name "$CLUSTER" --kubeconfig "$KUBECONFIG"
else
  log "creating kind cluster $CLUSTER ($NODE_IMAGE)"
  kind create cluster --name "$CLUSTER" --image "$NODE_IMAGE" \
    --config "$ROOT/kind/cluster.yaml" --kubeconfig "$KUBECONFIG" --wait 120s
fi

log "building $IMAGE"
docker build -t "$IMAGE" "$ROOT"
kind load docker-image "$IMAGE" --name "$CLUSTER"

log "deploying kwok $KWOK_VERSION"
kubectl apply -f "https://github.com/kubernetes-sigs/kwok/releases/download/$KWOK_VERSION/kwok.yaml"
kubectl -n kube-system patch deployment kwok-controller --type json \
  --patch-file "$ROOT/kind/infra-node-patch.yaml"
kubectl -n kube-system rollout status deployment/kwok-controller --timeout 180s
kubectl apply -f "$ROOT/hack/kwok/stages.yaml"
"$ROOT/hack/gen-nodes.sh" | kubectl apply -f -
kubectl wait --for condition=Ready nodes -l type=kwok --timeout 180s

log "deploying Quorum"
kubectl apply -k "$ROOT/kind"
kubectl -n quorum-system rollout restart deployment/quorum-scheduler
kubectl -n quorum-system rollout status deployment/quorum-scheduler --timeout 180s

# Quorum listens on the pod's loopback only; reach it through a port-forward.
kubectl -n quorum-system port-forward deployment/quorum-scheduler "127.0.0.1:$FORWARD_PORT:8888" >/dev/null 2>&1 &
forward_pid=$!
trap 'kill "$forward_pid" 2>/dev/null || true' EXIT
export QUORUM_URL="http://127.0.0.1:$FORWARD_PORT"

log "running end-to-end tests"
cd "$ROOT"
"$PYTHON" -m pytest -m e2e tests/e2e "$@"
