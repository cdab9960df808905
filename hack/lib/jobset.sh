# The real JobSet controller in the local cluster (hack/cluster-up.sh --jobset): upstream's CRD,
# the controller built from its Go module (hack/build-jobset.sh) running as a local process, and
# upstream's webhooks pointed at that process by URL, served with a certificate of the cluster CA.
# Sourced by cluster-up.sh once the apiserver is ready (it uses its sign, start, wait_for and
# kubectl_admin).
# shellcheck shell=bash
JOBSET_WEBHOOK_PORT="${JOBSET_WEBHOOK_PORT:-19443}"
JOBSET_HEALTH_PORT="${JOBSET_HEALTH_PORT:-19081}"

jobset_up() {
  local bin src dir="$CLUSTER_DIR/jobset"
  bin="$(QUORUM_CACHE="$QUORUM_CACHE" "$ROOT/hack/build-jobset.sh")"
  src="$QUORUM_CACHE/tools/jobset-$JOBSET_VERSION"
  mkdir -p "$dir/certs"
  sign ca jobset-webhook "/CN=jobset-webhook" \
    $'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1'
  cp "$PKI_DIR/jobset-webhook.crt" "$dir/certs/tls.crt"
  cp "$PKI_DIR/jobset-webhook.key" "$dir/certs/tls.key"
  log "installing the JobSet CRD ($JOBSET_VERSION)"
  kubectl_admin apply --server-side -f "$src/config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml" >/dev/null
  wait_for jobset-crd "Established" established crd/jobsets.jobset.x-k8s.io
  cat >"$dir/config.yaml" <<YAML
apiVersion: config.jobset.x-k8s.io/v1alpha1
kind: Configuration
webhook: {host: 127.0.0.1, port: $JOBSET_WEBHOOK_PORT, certDir: $dir/certs}
health: {healthProbeBindAddress: "127.0.0.1:$JOBSET_HEALTH_PORT"}
metrics: {bindAddress: "0"}
leaderElection: {leaderElect: false}
internalCertManagement: {enable: false}
YAML
  log "starting the JobSet controller (webhooks on 127.0.0.1:$JOBSET_WEBHOOK_PORT)"
  KUBECONFIG="$ADMIN_KUBECONFIG" start jobset "$bin" --config "$dir/config.yaml"
  wait_for jobset "ready (/readyz)" curl -sf --max-time 3 "http://127.0.0.1:$JOBSET_HEALTH_PORT/readyz"
  "$PYTHON" "$ROOT/hack/lib/webhooks.py" "$src/config/components/webhook" \
    "https://127.0.0.1:$JOBSET_WEBHOOK_PORT" "$PKI_DIR/ca.crt" jobset >"$dir/webhooks.yaml"
  kubectl_admin apply -f "$dir/webhooks.yaml" >/dev/null
}
