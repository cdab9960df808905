# Real Kueue in the local cluster (hack/cluster-up.sh --kueue): upstream's CRDs, its controller
# manager built from its Go module (hack/build-kueue.sh) running in a container (podman, host
# network; Kueue reads its metrics certificate from a fixed path, /etc/kueue/metrics/certs, which
# the container mounts as its Deployment would), and upstream's
# webhooks for the kinds it manages here (its own, Jobs, and JobSets with --jobset) pointed at that
# process by URL, served with a certificate of the cluster CA. Kueue manages only workloads that
# name a LocalQueue (kueue.x-k8s.io/queue-name); with KUEUE_PODS_READY_TIMEOUT set (a duration such
# as 30s) its waitForPodsReady is on. Sourced by cluster-up.sh once the apiserver is ready (it uses
# its sign, start, wait_for and kubectl_admin) and after jobset.sh.
# shellcheck shell=bash
KUEUE_WEBHOOK_PORT="${KUEUE_WEBHOOK_PORT:-19543}"
KUEUE_HEALTH_PORT="${KUEUE_HEALTH_PORT:-19181}"
KUEUE_PODS_READY_TIMEOUT="${KUEUE_PODS_READY_TIMEOUT:-}"
KUEUE_IMAGE="localhost/quorum-standin/kueue:$KUEUE_VERSION"

# kueue_image BINARY: an image of the binary and the C libraries it links, made here (no registry).
kueue_image() {
  local bin="$1" root lib
  podman_cmd image exists "$KUEUE_IMAGE" && return 0
  root="$(mktemp -d)"
  mkdir -p "$root/etc/kueue/metrics/certs" "$root/tmp"
  cp "$bin" "$root/kueue"
  for lib in $(ldd "$bin" | awk '$3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
    mkdir -p "$root$(dirname "$lib")" && cp -L "$lib" "$root$lib"
  done
  tar -C "$root" -cf "$root.tar" .
  podman_cmd import --quiet --change 'ENTRYPOINT ["/kueue"]' "$root.tar" "$KUEUE_IMAGE" >/dev/null
  rm -rf "$root" "$root.tar"
}

kueue_up() {
  local bin src dir="$CLUSTER_DIR/kueue" crd groups=(kueue.x-k8s.io batch) frameworks='["batch/job"]'
  bin="$(QUORUM_CACHE="$QUORUM_CACHE" "$ROOT/hack/build-kueue.sh")"
  src="$QUORUM_CACHE/tools/kueue-$KUEUE_VERSION"
  if [[ "${JOBSET_UP:-0}" == 1 ]]; then
    groups+=(jobset.x-k8s.io)
    frameworks='["batch/job", "jobset.x-k8s.io/jobset"]'
  fi
  # shellcheck source=hack/lib/podman.sh
  source "$ROOT/hack/lib/podman.sh"
  ensure_podman
  kueue_image "$bin"
  mkdir -p "$dir/certs"
  sign ca kueue-webhook "/CN=kueue-webhook" \
    $'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1'
  cp "$PKI_DIR/kueue-webhook.crt" "$dir/certs/tls.crt"
  cp "$PKI_DIR/kueue-webhook.key" "$dir/certs/tls.key"
  log "installing Kueue's CRDs ($KUEUE_VERSION)"
  for crd in "$src"/config/components/crd/bases/*.yaml; do
    kubectl_admin apply --server-side -f "$crd" >/dev/null
  done
  wait_for kueue-crds "Established" established crd/workloads.kueue.x-k8s.io \
    crd/clusterqueues.kueue.x-k8s.io crd/localqueues.kueue.x-k8s.io crd/resourceflavors.kueue.x-k8s.io \
    crd/topologies.kueue.x-k8s.io
  {
    cat <<YAML
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
webhook: {host: 127.0.0.1, port: $KUEUE_WEBHOOK_PORT, certDir: $dir/certs}
health: {healthProbeBindAddress: "127.0.0.1:$KUEUE_HEALTH_PORT"}
metrics: {bindAddress: "0"}
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
manageJobsWithoutQueueName: false
integrations: {frameworks: $frameworks}
YAML
    if [[ -n "$KUEUE_PODS_READY_TIMEOUT" ]]; then
      cat <<YAML
waitForPodsReady:
  timeout: $KUEUE_PODS_READY_TIMEOUT
  blockAdmission: false
  requeuingStrategy: {timestamp: Eviction, backoffBaseSeconds: 5, backoffMaxSeconds: 30}
YAML
    fi
  } >"$dir/config.yaml"
  log "starting Kueue (webhooks on 127.0.0.1:$KUEUE_WEBHOOK_PORT)"
  start kueue env CONTAINERS_CONF="$PODMAN_CONF" podman --runtime "$(command -v runc)" run --rm \
    --name "$KUEUE_CONTAINER" --network host -v "$CLUSTER_DIR:$CLUSTER_DIR:ro" \
    -v "$dir/certs:/etc/kueue/metrics/certs:ro" -e KUBECONFIG="$ADMIN_KUBECONFIG" "$KUEUE_IMAGE" \
    --config "$dir/config.yaml" --feature-gates=VisibilityOnDemand=false
  wait_for kueue "ready (/readyz)" curl -sf --max-time 3 "http://127.0.0.1:$KUEUE_HEALTH_PORT/readyz"
  "$PYTHON" "$ROOT/hack/lib/webhooks.py" "$src/config/components/webhook" \
    "https://127.0.0.1:$KUEUE_WEBHOOK_PORT" "$PKI_DIR/ca.crt" kueue "${groups[@]}" >"$dir/webhooks.yaml"
  kubectl_admin apply -f "$dir/webhooks.yaml" >/dev/null
}
