# One real node in the local cluster (hack/cluster-up.sh --real-node): a kubelet of the cluster's
# version with Debian's containerd and runc, beside the kwok nodes. It is labelled and tainted for
# system pods (quorum.dev/real-node), so no gang and no pod without the toleration lands there, and
# it runs the images hack/build-images.sh built (imported into its containerd; no registry).
#
# Every packet stays on this machine: pods get addresses on a bridge of their own ($NODE_BRIDGE,
# $NODE_POD_CIDR) that nothing routes anywhere else, and reach the apiserver at the bridge's own
# address ($NODE_BRIDGE_IP, where cluster-up --real-node lets the apiserver listen): the
# `kubernetes` Service's cluster IP would need a kube-proxy.
# Sourced by cluster-up.sh, whose helpers (start, wait_for, sign, write_kubeconfig) it uses;
# cluster-down.sh removes the node with the cluster (node_cleanup in cluster-common.sh).
# shellcheck shell=bash
# shellcheck source=hack/lib/podman.sh
source "$ROOT/hack/lib/podman.sh"

real_node_up() {
local NODE_CONF="$CLUSTER_DIR/node"  # configuration and kubeconfig (removed with the cluster)

command -v containerd >/dev/null && [[ -d /usr/lib/cni ]] || {
  log "installing containerd and the CNI plugins (Debian packages)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq containerd containernetworking-plugins >/dev/null
}
K8S_VERSION="$K8S_VERSION" bash "$ROOT/hack/build-kubelet.sh"
K8S_VERSION="$K8S_VERSION" bash "$ROOT/hack/build-images.sh"
mkdir -p "$NODE_CONF/cni" "$NODE_STATE"

# --- containerd: its own root, state and socket; the settings this machine needs ----------------
containerd config default | sed \
  -e "s#^root = .*#root = \"$NODE_STATE/containerd\"#" \
  -e "s#^state = .*#state = \"$NODE_STATE/run\"#" \
  -e "s#^  address = \"/run/containerd/containerd.sock\"#  address = \"$NODE_SOCKET\"#" \
  -e 's#restrict_oom_score_adj = false#restrict_oom_score_adj = true#' \
  -e "s#sandbox_image = .*#sandbox_image = \"$PAUSE_IMAGE\"#" \
  -e 's#bin_dir = "/opt/cni/bin"#bin_dir = "/usr/lib/cni"#' \
  -e "s#conf_dir = \"/etc/cni/net.d\"#conf_dir = \"$NODE_CONF/cni\"#" \
  >"$NODE_CONF/containerd.toml"
# restrict_oom_score_adj: this machine refuses a negative oom_score_adj, which the kubelet asks for
# every pod sandbox. The sandbox image is built here (no registry can be reached).
cat >"$NODE_CONF/cni/10-quorum-node.conflist" <<CNI
{"cniVersion": "1.0.0", "name": "quorum-node", "plugins": [
  {"type": "bridge", "bridge": "$NODE_BRIDGE", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "$NODE_POD_CIDR", "gateway": "$NODE_BRIDGE_IP"}]],
            "routes": [{"dst": "$NODE_BRIDGE_IP/32"}], "dataDir": "$NODE_STATE/ipam"}}]}
CNI
start containerd containerd --config "$NODE_CONF/containerd.toml"
wait_for containerd "socket" test -S "$NODE_SOCKET"

log "importing the images into the node's containerd"
podman_cmd save --quiet -m -o "$NODE_STATE/images.tar" localhost/quorum:dev "$PAUSE_IMAGE" \
  "registry.k8s.io/kube-scheduler:$K8S_VERSION" >/dev/null
ctr -a "$NODE_SOCKET" -n k8s.io images import --all-platforms "$NODE_STATE/images.tar" >/dev/null
rm -f "$NODE_STATE/images.tar"
# manifests/ names the image quorum:dev, which containerd reads as docker.io/library/quorum:dev.
ctr -a "$NODE_SOCKET" -n k8s.io images tag --force localhost/quorum:dev docker.io/library/quorum:dev >/dev/null

# --- kubelet: a client certificate in system:masters (a test node), its own ports -----------------
sign ca node "/O=system:masters/CN=system:node:$REAL_NODE" "$client_ext"
write_kubeconfig "$NODE_CONF/kubeconfig" "system:node:$REAL_NODE" cert node
cat >"$NODE_CONF/kubelet.yaml" <<CFG
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://$NODE_SOCKET
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
address: 127.0.0.1
port: $KUBELET_PORT
healthzPort: $KUBELET_HEALTHZ_PORT
readOnlyPort: 0
authentication: {anonymous: {enabled: false}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
registerWithTaints: [{key: quorum.dev/real-node, value: "true", effect: NoSchedule}]
imageGCHighThresholdPercent: 100
evictionHard: {}
CFG
start kubelet "$BIN_DIR/kubelet" --config "$NODE_CONF/kubelet.yaml" --kubeconfig "$NODE_CONF/kubeconfig" \
  --hostname-override "$REAL_NODE" --node-ip 127.0.0.1 --root-dir "$NODE_STATE/kubelet" \
  --cert-dir "$NODE_STATE/kubelet/pki" --node-labels "quorum.dev/real-node=true"
wait_for kubelet "node $REAL_NODE Ready" \
  kubectl_admin wait --for=condition=Ready "node/$REAL_NODE" --timeout=2s
# The cluster's default scheduler, as every real cluster has one: it places the system pods (the
# installed release's among them) on the real node; Quorum's profile is another scheduler's.
cat >"$NODE_CONF/default-scheduler.yaml" <<CFG
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection: {kubeconfig: "$CLUSTER_DIR/scheduler.kubeconfig"}
leaderElection: {leaderElect: false}
profiles: [{schedulerName: default-scheduler}]
CFG
start default-scheduler "$BIN_DIR/kube-scheduler" --config "$NODE_CONF/default-scheduler.yaml" \
  --secure-port "$DEFAULT_SCHEDULER_PORT" --bind-address 127.0.0.1 \
  --authentication-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
  --authorization-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig"
wait_for default-scheduler "healthy (/healthz)" https_ok "$DEFAULT_SCHEDULER_PORT" /healthz
log "real node $REAL_NODE is Ready (kubelet $K8S_VERSION, containerd $(containerd --version | awk '{print $3}'))"
}
