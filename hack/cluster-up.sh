#!/usr/bin/env bash
# Start a real Kubernetes control plane on loopback, with kwok fake nodes and
# Quorum as the scheduler extender of the "quorum" profile. No containers are
# involved: every component is a local process.
#
#   etcd -> kube-apiserver -> kube-controller-manager, kube-scheduler
#   (scheduler-config/kube-scheduler.yaml), kwok (hack/kwok/stages.yaml),
#   Quorum (python -m extender, with its own ServiceAccount token and the
#   RBAC from manifests/quorum-rbac.yaml, its FlowSchema from manifests/flowschema.yaml)
#
# Any cluster started earlier from this checkout is stopped first; state lives
# in .cache/cluster (kubeconfigs, certificates, logs, pids, etcd data).
# Stop with hack/cluster-down.sh.
#
# Usage: hack/cluster-up.sh [options]
#   --blocks N --racks N --nodes N   topology: blocks, racks per block, nodes per rack
#   --cpu Q --memory Q --gpus N --pods N   allocatable of every node
#   --no-quorum                      do not start Quorum (same as QUORUM_EXTERNAL=1)
#   --autoscaler                     also run a real cluster-autoscaler (kwok provider), one node
#                                    group per rack of the same topology, min 0, max
#                                    AUTOSCALER_MAX [4] nodes (hack/autoscaler-up.sh); combine with
#                                    --nodes 0 for a cluster that starts without GPU nodes
#   --no-scheduler                   start neither the "quorum" kube-scheduler nor Quorum: a cluster
#                                    for installing them (tests/e2e/test_helm_install.py)
#   --jobset                         also run the real JobSet controller (JOBSET_VERSION), its CRD
#                                    and its webhooks (hack/lib/jobset.sh)
#   --kueue                          also run real Kueue (KUEUE_VERSION), its CRDs and its webhooks
#                                    for Jobs (and JobSets with --jobset); KUEUE_PODS_READY_TIMEOUT
#                                    (e.g. 30s) turns its waitForPodsReady on (hack/lib/kueue.sh)
#   --job-workloads                  turn on WorkloadWithJob (alpha, 1.37+) in the apiserver and the
#                                    controller-manager: the Job controller writes a Workload and a
#                                    PodGroup for every Job that names none
#   --real-node                      also run one real node: a kubelet with containerd and runc,
#                                    tainted for system pods (hack/lib/real-node.sh); the apiserver
#                                    then listens on every address (pods reach it on their bridge)
#   --manifests DIR                  apply every DIR/*.yaml once the apiserver is ready, before
#                                    Quorum starts (same as EXTRA_MANIFESTS=DIR); files that
#                                    define CustomResourceDefinitions go first and are waited on
#                                    until Established, so objects of those kinds may sit in the
#                                    other files (not in the same file as their CRD)
# Environment (defaults in brackets):
#   K8S_VERSION [see hack/lib/versions.sh]  binaries from .cache/bin/<version> (built if
#                        missing); 1.35 or newer (the first with a Workload API)
#   NODE_BLOCKS [2] NODE_RACKS_PER_BLOCK [4] NODE_NODES_PER_RACK [4]
#   NODE_CPU [64] NODE_MEMORY [512Gi] NODE_GPUS [8] NODE_PODS [110]
#   QUORUM_LAUNCH []     words put between the interpreter and "-m extender", e.g.
#                        "bench/cpu_sampler.py --" to profile Quorum's CPU
#   QUORUM_EXTERNAL [0]  1 = run Quorum yourself; the scheduler still calls
#                        http://127.0.0.1:$QUORUM_PORT
#   PYTHON               interpreter for Quorum [.venv/bin/python, else python3]
#   QUORUM_CONFIG        Quorum's configuration file [scheduler-config/quorum.yaml]
#   ETCD_PORT [12379] ETCD_PEER_PORT [12380] APISERVER_PORT [16443]
#   CONTROLLER_MANAGER_PORT [17257] SCHEDULER_PORT [17259] QUORUM_PORT [8888]
#   APISERVER_EXTRA_ARGS, CONTROLLER_MANAGER_EXTRA_ARGS, SCHEDULER_EXTRA_ARGS   extra flags
#                        (space separated; a second --feature-gates adds to the first)
#   READY_TIMEOUT [120]  seconds to wait for each component (plus 0.1 s a node for the nodes)
#   KWOK_LOG_LEVEL [WARN]  kwok's log level (INFO logs every heartbeat)
#   WORKLOAD_API         Workload API version to serve [from K8S_VERSION:
#                        scheduling.k8s.io/v1alpha1 on 1.35, v1alpha2 on 1.36, v1beta1 on 1.37+]
#   EXTRA_MANIFESTS      directory of manifests to apply (see --manifests) [none]
set -euo pipefail

# shellcheck source=hack/lib/cluster-common.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib/cluster-common.sh"

QUORUM_EXTERNAL="${QUORUM_EXTERNAL:-0}"
QUORUM_LAUNCH="${QUORUM_LAUNCH:-}"
AUTOSCALER="${AUTOSCALER:-0}"
REAL_NODE_UP="${REAL_NODE_UP:-0}"
JOBSET_UP="${JOBSET_UP:-0}"
KUEUE_UP="${KUEUE_UP:-0}"
JOB_WORKLOADS="${JOB_WORKLOADS:-0}"
SCHEDULER_OFF="${SCHEDULER_OFF:-0}"
QUORUM_CONFIG="${QUORUM_CONFIG:-$ROOT/scheduler-config/quorum.yaml}"
EXTRA_MANIFESTS="${EXTRA_MANIFESTS:-}"
READY_TIMEOUT="${READY_TIMEOUT:-120}"

# --- what each Kubernetes minor serves and needs ---------------------------------
# The apiserver (and the controller-manager) get the Workload API; the scheduler keeps its own
# gang handling off, so that only Quorum gates gang members:
#   1.35  scheduling.k8s.io/v1alpha1 (Workload.spec.podGroups, pod spec.workloadRef);
#         the scheduler's gang plugin is behind its own gate, GangScheduling.
#   1.36  scheduling.k8s.io/v1alpha2 (Workload templates, standalone PodGroup, pod
#         spec.schedulingGroup); still a separate GangScheduling gate. Without
#         TopologyAwareWorkloadScheduling the apiserver silently drops a PodGroup's
#         schedulingConstraints (its required topology).
#   1.37+ scheduling.k8s.io/v1beta1; GangScheduling was folded into GenericWorkload (and no
#         longer exists: naming it is an error). Without PodGroupPreemptionPolicy (alpha) the
#         apiserver silently drops a PodGroup's spec.preemptionPolicy. CompositePodGroup (alpha)
#         and scheduling.k8s.io/v1alpha3 serve CompositePodGroups and keep a PodGroup's
#         spec.parentCompositePodGroupName. DRAWorkloadResourceClaims (beta, off by default)
#         keeps a PodGroup's spec.resourceClaims (and lets the controller-manager make its
#         claims from templates); kube-scheduler needs it and GenericWorkload to allocate them.
[[ "$K8S_VERSION" =~ ^v1\.([0-9]+)\.[0-9]+$ ]] || die "K8S_VERSION must look like v1.<minor>.<patch>, got '$K8S_VERSION'"
K8S_MINOR="${BASH_REMATCH[1]}"
case "$K8S_MINOR" in
  35)
    default_workload_api=scheduling.k8s.io/v1alpha1
    APISERVER_GATES="GenericWorkload=true"
    SCHEDULER_GATES="GenericWorkload=false,GangScheduling=false" ;;
  36)
    default_workload_api=scheduling.k8s.io/v1alpha2
    APISERVER_GATES="GenericWorkload=true,TopologyAwareWorkloadScheduling=true"
    SCHEDULER_GATES="GenericWorkload=false,GangScheduling=false" ;;
  *)
    ((K8S_MINOR >= 37)) || die "Kubernetes $K8S_VERSION has no Workload API; use 1.35 or newer"
    default_workload_api=scheduling.k8s.io/v1beta1
    APISERVER_GATES="GenericWorkload=true,TopologyAwareWorkloadScheduling=true,PodGroupPreemptionPolicy=true"
    APISERVER_GATES+=",CompositePodGroup=true,DRAWorkloadResourceClaims=true"
    CONTROLLER_MANAGER_EXTRA_GATES=",DRAWorkloadResourceClaims=true"
    EXTRA_APIS=",scheduling.k8s.io/v1alpha3=true"
    SCHEDULER_GATES="GenericWorkload=false" ;;
esac
WORKLOAD_API="${WORKLOAD_API:-$default_workload_api}"
export NODE_BLOCKS="${NODE_BLOCKS:-2}" NODE_RACKS_PER_BLOCK="${NODE_RACKS_PER_BLOCK:-4}"
export NODE_NODES_PER_RACK="${NODE_NODES_PER_RACK:-4}" NODE_CPU="${NODE_CPU:-64}"
export NODE_MEMORY="${NODE_MEMORY:-512Gi}" NODE_GPUS="${NODE_GPUS:-8}" NODE_PODS="${NODE_PODS:-110}"

while (($#)); do
  case "$1" in
    --blocks) NODE_BLOCKS="$2"; shift 2 ;;
    --racks) NODE_RACKS_PER_BLOCK="$2"; shift 2 ;;
    --nodes) NODE_NODES_PER_RACK="$2"; shift 2 ;;
    --cpu) NODE_CPU="$2"; shift 2 ;;
    --memory) NODE_MEMORY="$2"; shift 2 ;;
    --gpus) NODE_GPUS="$2"; shift 2 ;;
    --pods) NODE_PODS="$2"; shift 2 ;;
    --no-quorum) QUORUM_EXTERNAL=1; shift ;;
    --autoscaler) AUTOSCALER=1; shift ;;
    --real-node) REAL_NODE_UP=1; shift ;;
    --jobset) JOBSET_UP=1; shift ;;
    --kueue) KUEUE_UP=1; shift ;;
    --job-workloads) JOB_WORKLOADS=1; shift ;;
    --no-scheduler) SCHEDULER_OFF=1; QUORUM_EXTERNAL=1; shift ;;
    --manifests) [[ $# -ge 2 ]] || die "--manifests needs a directory"; EXTRA_MANIFESTS="$2"; shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument: $1 (see --help)" ;;
  esac
done

CONTROLLER_MANAGER_GATES="GenericWorkload=true${CONTROLLER_MANAGER_EXTRA_GATES:-}"
if [[ "$JOB_WORKLOADS" == 1 ]]; then
  ((K8S_MINOR >= 37)) || die "--job-workloads needs Kubernetes 1.37 or newer (the Job controller writes v1beta1)"
  APISERVER_GATES+=",WorkloadWithJob=true"
  CONTROLLER_MANAGER_GATES+=",WorkloadWithJob=true"
fi

if [[ -z "${PYTHON:-}" ]]; then
  if [[ -x "$ROOT/.venv/bin/python" ]]; then PYTHON="$ROOT/.venv/bin/python"; else PYTHON=python3; fi
fi

for tool in curl openssl; do
  command -v "$tool" >/dev/null || die "$tool is required"
done
if [[ -n "$EXTRA_MANIFESTS" ]]; then
  [[ -d "$EXTRA_MANIFESTS" ]] || die "--manifests / EXTRA_MANIFESTS: '$EXTRA_MANIFESTS' is not a directory"
  EXTRA_MANIFESTS="$(cd "$EXTRA_MANIFESTS" && pwd)"
fi

started=$SECONDS
KUBECTL="$BIN_DIR/kubectl"
ADMIN_KUBECONFIG="$CLUSTER_DIR/kubeconfig"
APISERVER_URL="https://127.0.0.1:$APISERVER_PORT"

# --- binaries -----------------------------------------------------------------
K8S_VERSION="$K8S_VERSION" QUORUM_CACHE="$QUORUM_CACHE" "$ROOT/hack/build-binaries.sh"

# --- leftovers ----------------------------------------------------------------
stop_all
rm -rf "$CLUSTER_DIR"
mkdir -p "$PKI_DIR" "$LOG_DIR" "$PID_DIR" "$CLUSTER_DIR/etcd"

busy=()
for var in ETCD_PORT ETCD_PEER_PORT APISERVER_PORT CONTROLLER_MANAGER_PORT SCHEDULER_PORT QUORUM_PORT; do
  if [[ "$var" == QUORUM_PORT && "$QUORUM_EXTERNAL" == 1 ]]; then continue; fi
  if [[ "$var" == SCHEDULER_PORT && "$SCHEDULER_OFF" == 1 ]]; then continue; fi
  if port_in_use "${!var}"; then busy+=("$var=${!var}"); fi
done
((${#busy[@]} == 0)) || die "ports already in use by processes not started from this checkout: ${busy[*]} (stop them or override the variables)"

# --- certificates -------------------------------------------------------------
# A private CA signs the apiserver serving certificate and one client
# certificate per component; a second CA backs the front-proxy (request header)
# authentication that the scheduler and controller-manager look up; a separate
# key pair signs ServiceAccount tokens.
log "generating certificates"
newkey() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }

# new_ca NAME CN
new_ca() {
  newkey "$PKI_DIR/$1.key"
  openssl req -x509 -new -key "$PKI_DIR/$1.key" -subj "/CN=$2" -days 3650 -out "$PKI_DIR/$1.crt" 2>/dev/null
}

# sign CA NAME SUBJECT EXTENSIONS
sign() {
  local ca="$1" name="$2" subject="$3" ext="$4"
  newkey "$PKI_DIR/$name.key"
  openssl req -new -key "$PKI_DIR/$name.key" -subj "$subject" -out "$PKI_DIR/$name.csr" 2>/dev/null
  printf '%s\n' "$ext" >"$PKI_DIR/$name.ext"
  openssl x509 -req -in "$PKI_DIR/$name.csr" -CA "$PKI_DIR/$ca.crt" -CAkey "$PKI_DIR/$ca.key" \
    -CAcreateserial -days 3650 -extfile "$PKI_DIR/$name.ext" -out "$PKI_DIR/$name.crt" 2>/dev/null
  rm -f "$PKI_DIR/$name.csr" "$PKI_DIR/$name.ext"
}
client_ext=$'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=clientAuth'
new_ca ca quorum-local-ca
new_ca front-proxy-ca quorum-local-front-proxy-ca
sign ca apiserver "/CN=kube-apiserver" \
  $'keyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,IP:10.0.0.1,IP:'"$NODE_BRIDGE_IP"$',DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local'
sign ca admin "/O=system:masters/CN=quorum-admin" "$client_ext"
sign ca controller-manager "/CN=system:kube-controller-manager" "$client_ext"
sign ca scheduler "/CN=system:kube-scheduler" "$client_ext"
sign ca kwok "/O=system:masters/CN=kwok" "$client_ext"
sign front-proxy-ca front-proxy-client "/CN=front-proxy-client" "$client_ext"
newkey "$PKI_DIR/sa.key"
openssl pkey -in "$PKI_DIR/sa.key" -pubout -out "$PKI_DIR/sa.pub" 2>/dev/null

# write_kubeconfig FILE USER then either "cert NAME" or "token TOKEN"
write_kubeconfig() {
  local file="$1" user="$2" kind="$3" value="$4" creds
  if [[ "$kind" == cert ]]; then
    creds="    client-certificate: $PKI_DIR/$value.crt
    client-key: $PKI_DIR/$value.key"
  else
    creds="    token: $value"
  fi
  (umask 077 && cat >"$file" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: quorum-local
  cluster:
    server: $APISERVER_URL
    certificate-authority: $PKI_DIR/ca.crt
users:
- name: $user
  user:
$creds
contexts:
- name: quorum-local
  context:
    cluster: quorum-local
    user: $user
current-context: quorum-local
EOF
  )
}
write_kubeconfig "$ADMIN_KUBECONFIG" quorum-admin cert admin
write_kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" system:kube-controller-manager cert controller-manager
write_kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" system:kube-scheduler cert scheduler
write_kubeconfig "$CLUSTER_DIR/kwok.kubeconfig" kwok cert kwok

# --- process helpers ----------------------------------------------------------
# start NAME COMMAND... runs COMMAND in its own session, logging to logs/NAME.log.
start() {
  local name="$1"; shift
  setsid "$@" >"$LOG_DIR/$name.log" 2>&1 </dev/null &
  echo $! >"$PID_DIR/$name.pid"
}

# fail NAME REASON reports a component that did not become healthy and exits.
fail() {
  local name="$1" reason="$2" logfile="$LOG_DIR/$1.log"
  log "ERROR: $name failed: $reason"
  if [[ -f "$logfile" ]]; then
    log "last lines of $logfile:"
    tail -n 25 "$logfile" | sed 's/^/    /' >&2
  fi
  log "other components keep running; inspect ${LOG_DIR#"$ROOT"/}/ and stop them with hack/cluster-down.sh"
  exit 1
}

# wait_for NAME DESCRIPTION COMMAND... retries COMMAND until it succeeds, the
# component's process exits, or READY_TIMEOUT passes.
# running NAME: the process just started for NAME still exists. Not pid_of: right after the fork
# the child is still this script (not yet the component), so its command line does not match.
running() {
  local pid
  pid="$(<"$PID_DIR/$1.pid")" || return 1
  kill -0 "$pid" 2>/dev/null
}

wait_for() {
  local name="$1" what="$2" deadline=$((SECONDS + READY_TIMEOUT)); shift 2
  until "$@" >/dev/null 2>&1; do
    if [[ -f "$PID_DIR/$name.pid" ]] && ! running "$name"; then
      fail "$name" "process exited before $what"
    fi
    ((SECONDS < deadline)) || fail "$name" "no $what within ${READY_TIMEOUT}s"
    sleep 0.5
  done
  log "$name: $what"
}

# all_nodes_ready N succeeds once N kwok nodes report Ready=True.
all_nodes_ready() {
  local ready
  ready="$(kubectl_admin get nodes -l type=kwok --request-timeout=20s \
    -o jsonpath='{range .items[*]}{range .status.conditions[?(@.type=="Ready")]}{.status}{"\n"}{end}{end}' \
    | grep -c '^True$')" || return 1
  ((ready >= $1))
}
https_ok() { curl -sfk --max-time 3 "https://127.0.0.1:$1$2"; }
# A discovery cache of its own: the one in ~/.kube may describe a cluster of another version
# that listened on the same port.
kubectl_admin() { "$KUBECTL" --kubeconfig "$ADMIN_KUBECONFIG" --cache-dir "$CLUSTER_DIR/kubectl-cache" "$@"; }

# established CRD... succeeds once every named CRD reports Established=True. (kubectl wait
# --for=condition fails at once, instead of waiting, on a CRD whose status has no conditions yet.)
established() {
  local crd status
  for crd in "$@"; do
    status="$(kubectl_admin get "$crd" --request-timeout=10s \
      -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" || return 1
    [[ "$status" == True ]] || return 1
  done
}

# apply_manifests DIR applies DIR/*.yaml: first the files that define CustomResourceDefinitions,
# waiting until every CRD among them is Established, then the others (in name order each time).
apply_manifests() {
  local dir="$1" f out name attempt
  local files=() crd_files=() other_files=() crds=() args=()
  shopt -s nullglob
  files=("$dir"/*.yaml)
  shopt -u nullglob
  ((${#files[@]})) || die "no *.yaml files in $dir"
  for f in "${files[@]}"; do
    if grep -Eq '^kind:[[:space:]]*CustomResourceDefinition[[:space:]]*$' "$f"; then
      crd_files+=("$f")
    else
      other_files+=("$f")
    fi
  done
  if ((${#crd_files[@]})); then
    args=()
    for f in "${crd_files[@]}"; do args+=(-f "$f"); done
    out="$(kubectl_admin apply "${args[@]}" -o name)" || die "could not apply the CRD files of $dir"
    for name in $out; do
      if [[ "$name" == customresourcedefinition.* ]]; then crds+=("$name"); fi
    done
    if ((${#crds[@]})); then
      wait_for crds "Established: ${crds[*]#*/}" established "${crds[@]}"
    fi
  fi
  if ((${#other_files[@]})); then
    args=()
    for f in "${other_files[@]}"; do args+=(-f "$f"); done
    # Right after a CRD is Established its kind can take a moment to be served.
    for attempt in 1 2 3 4 5 6 7 8 9 10; do
      if out="$(kubectl_admin apply "${args[@]}" 2>&1)"; then break; fi
      ((attempt < 10)) || die "could not apply the manifests of $dir: $out"
      sleep 1
    done
  fi
  log "applied ${#files[@]} manifest file(s) from ${dir#"$ROOT"/}"
}

# --- etcd -----------------------------------------------------------------------
log "starting etcd on 127.0.0.1:$ETCD_PORT"
start etcd "$BIN_DIR/etcd" \
  --name quorum-local \
  --data-dir "$CLUSTER_DIR/etcd" \
  --listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "quorum-local=http://127.0.0.1:$ETCD_PEER_PORT" \
  --unsafe-no-fsync \
  --quota-backend-bytes 8589934592 \
  --log-level warn
wait_for etcd "healthy" curl -sf --max-time 3 "http://127.0.0.1:$ETCD_PORT/health"

# --- kube-apiserver -------------------------------------------------------------
log "starting kube-apiserver on $APISERVER_URL"
# Every request made as Quorum's ServiceAccount is audited (metadata only), so the end-to-end suite
# can hold what Quorum really does against what its RBAC grants (tests/e2e/test_rbac.py); so is
# every binding, whoever makes it, so that bench/cluster_bench.py reads bind times to the microsecond.
cat >"$CLUSTER_DIR/audit-policy.yaml" <<EOF
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  users: ["system:serviceaccount:quorum-system:quorum"]
- level: Metadata
  verbs: [create]
  resources: [{group: "", resources: ["pods/binding"]}]
- level: None
EOF
# shellcheck disable=SC2086
# With the real node, pods reach the apiserver on their bridge's address (hack/lib/real-node.sh).
apiserver_bind=127.0.0.1
[[ "$REAL_NODE_UP" == 0 ]] || apiserver_bind=0.0.0.0
start kube-apiserver "$BIN_DIR/kube-apiserver" \
  --etcd-servers "http://127.0.0.1:$ETCD_PORT" \
  --bind-address "$apiserver_bind" \
  --advertise-address 127.0.0.1 \
  --secure-port "$APISERVER_PORT" \
  --tls-cert-file "$PKI_DIR/apiserver.crt" \
  --tls-private-key-file "$PKI_DIR/apiserver.key" \
  --client-ca-file "$PKI_DIR/ca.crt" \
  --requestheader-client-ca-file "$PKI_DIR/front-proxy-ca.crt" \
  --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User \
  --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$PKI_DIR/front-proxy-client.crt" \
  --proxy-client-key-file "$PKI_DIR/front-proxy-client.key" \
  --authorization-mode RBAC \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$PKI_DIR/sa.pub" \
  --service-account-signing-key-file "$PKI_DIR/sa.key" \
  --service-cluster-ip-range 10.0.0.0/24 \
  --endpoint-reconciler-type none \
  --disable-admission-plugins ServiceAccount \
  --feature-gates "$APISERVER_GATES" \
  --runtime-config "$WORKLOAD_API=true${EXTRA_APIS:-}" \
  --profiling=false \
  --audit-policy-file "$CLUSTER_DIR/audit-policy.yaml" \
  --audit-log-path "$LOG_DIR/audit.log" \
  --audit-log-maxsize 200 --audit-log-maxbackup 1 \
  ${APISERVER_EXTRA_ARGS:-}
wait_for kube-apiserver "ready (/readyz)" \
  curl -sf --max-time 3 --cacert "$PKI_DIR/ca.crt" --cert "$PKI_DIR/admin.crt" --key "$PKI_DIR/admin.key" "$APISERVER_URL/readyz"

# --- extra manifests (CRDs and objects the scheduler or Quorum should find at start) ----
if [[ -n "$EXTRA_MANIFESTS" ]]; then
  apply_manifests "$EXTRA_MANIFESTS"
fi

# --- kube-controller-manager ----------------------------------------------------
log "starting kube-controller-manager on 127.0.0.1:$CONTROLLER_MANAGER_PORT"
start kube-controller-manager "$BIN_DIR/kube-controller-manager" \
  --kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
  --authentication-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
  --authorization-kubeconfig "$CLUSTER_DIR/controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 \
  --secure-port "$CONTROLLER_MANAGER_PORT" \
  --cert-dir "$CLUSTER_DIR/controller-manager-certs" \
  --leader-elect=false \
  --use-service-account-credentials \
  --service-account-private-key-file "$PKI_DIR/sa.key" \
  --root-ca-file "$PKI_DIR/ca.crt" \
  --cluster-signing-cert-file "$PKI_DIR/ca.crt" \
  --cluster-signing-key-file "$PKI_DIR/ca.key" \
  --feature-gates "$CONTROLLER_MANAGER_GATES" \
  --kube-api-qps 200 --kube-api-burst 400 \
  --profiling=false \
  ${CONTROLLER_MANAGER_EXTRA_ARGS:-}

# --- kube-scheduler -------------------------------------------------------------
# The committed configuration, with only the kubeconfig and the extender URL
# pointed at this cluster.
SCHED_CONFIG="$CLUSTER_DIR/kube-scheduler.yaml"
sed -e "s#^\(  kubeconfig:\) \"\".*#\1 \"$CLUSTER_DIR/scheduler.kubeconfig\"#" \
    -e "s#^\(- urlPrefix:\) http://127.0.0.1:8888\$#\1 http://127.0.0.1:$QUORUM_PORT#" \
    "$ROOT/scheduler-config/kube-scheduler.yaml" >"$SCHED_CONFIG"
if ! grep -q "kubeconfig: \"$CLUSTER_DIR/scheduler.kubeconfig\"" "$SCHED_CONFIG" \
  || ! grep -q "urlPrefix: http://127.0.0.1:$QUORUM_PORT\$" "$SCHED_CONFIG"; then
  die "could not rewrite clientConnection.kubeconfig / extender urlPrefix in scheduler-config/kube-scheduler.yaml"
fi

if [[ "$SCHEDULER_OFF" == 0 ]]; then
log "starting kube-scheduler on 127.0.0.1:$SCHEDULER_PORT (extender http://127.0.0.1:$QUORUM_PORT)"
# shellcheck disable=SC2086
start kube-scheduler "$BIN_DIR/kube-scheduler" \
  --config "$SCHED_CONFIG" \
  --authentication-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
  --authorization-kubeconfig "$CLUSTER_DIR/scheduler.kubeconfig" \
  --bind-address 127.0.0.1 \
  --secure-port "$SCHEDULER_PORT" \
  --cert-dir "$CLUSTER_DIR/scheduler-certs" \
  --feature-gates "$SCHEDULER_GATES" \
  --profiling=false \
  ${SCHEDULER_EXTRA_ARGS:-}
fi

# --- kwok and nodes -------------------------------------------------------------
# kwok works through nodes a few at a time; a thousand nodes need more workers to turn Ready
# within the wait below (measured on 2 cores: 1,000 nodes took over 120 s with 4).
node_count=$((NODE_BLOCKS * NODE_RACKS_PER_BLOCK * NODE_NODES_PER_RACK))
kwok_parallelism=$((node_count / 50))
((kwok_parallelism >= 4)) || kwok_parallelism=4
((kwok_parallelism <= 32)) || kwok_parallelism=32
cat >"$CLUSTER_DIR/kwok.yaml" <<EOF
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  manageAllNodes: false
  manageNodesWithAnnotationSelector: kwok.x-k8s.io/node=fake
  cidr: 10.64.0.0/12
  nodeIP: 10.63.0.1
  nodeLeaseDurationSeconds: 40
  nodeLeaseParallelism: $kwok_parallelism
  nodePlayStageParallelism: $kwok_parallelism
  podPlayStageParallelism: $kwok_parallelism
  podsOnNodeSyncParallelism: 4
EOF
log "starting kwok"
# At INFO kwok logs every node heartbeat and lease renewal: megabytes a minute at 1,000 nodes.
start kwok "$BIN_DIR/kwok" \
  --v "${KWOK_LOG_LEVEL:-WARN}" \
  --kubeconfig "$CLUSTER_DIR/kwok.kubeconfig" \
  --config "$CLUSTER_DIR/kwok.yaml" \
  --config "$ROOT/hack/kwok/stages.yaml"

log "creating $node_count nodes ($NODE_BLOCKS blocks x $NODE_RACKS_PER_BLOCK racks x $NODE_NODES_PER_RACK nodes; cpu $NODE_CPU, memory $NODE_MEMORY, nvidia.com/gpu $NODE_GPUS, pods $NODE_PODS)"
"$ROOT/hack/gen-nodes.sh" >"$CLUSTER_DIR/nodes.yaml"
if ((node_count > 0)); then
  kubectl_admin apply -f "$CLUSTER_DIR/nodes.yaml" >/dev/null
fi

# --- Quorum's identity ------------------------------------------------------------
kubectl_admin apply -f "$ROOT/manifests/namespace.yaml" -f "$ROOT/manifests/quorum-rbac.yaml" \
  -f "$ROOT/manifests/flowschema.yaml" >/dev/null  # and the installed priority (API Priority and Fairness)
if grep -Eq '^[^#]*startedConfigMaps:[[:space:]]*true' "$QUORUM_CONFIG"; then
  # The gang-started ConfigMaps are on in this configuration: grant them as an install would.
  kubectl_admin apply -f "$ROOT/manifests/started-configmaps.yaml" >/dev/null
fi
if [[ "$AUTOSCALER" == 1 ]]; then
  "$ROOT/hack/autoscaler-up.sh" --crd-only
fi
if [[ "$JOBSET_UP" == 1 ]]; then
  # shellcheck source=hack/lib/jobset.sh
  source "$ROOT/hack/lib/jobset.sh"
  jobset_up
fi
if [[ "$KUEUE_UP" == 1 ]]; then
  # shellcheck source=hack/lib/kueue.sh
  source "$ROOT/hack/lib/kueue.sh"
  kueue_up
fi
if grep -Eq '^[^#]*provisioningRequests:[[:space:]]*true' "$QUORUM_CONFIG"; then
  kubectl_admin apply -f "$ROOT/manifests/scale-up-requests.yaml" >/dev/null  # the same, for scale-up
fi
QUORUM_KUBECONFIG_FILE="$CLUSTER_DIR/quorum.kubeconfig"
token="$(kubectl_admin -n quorum-system create token quorum --duration 720h)"
write_kubeconfig "$QUORUM_KUBECONFIG_FILE" quorum token "$token"
unset token

# --- Quorum -------------------------------------------------------------------------
if [[ "$QUORUM_EXTERNAL" != 1 ]]; then
  log "starting Quorum on 127.0.0.1:$QUORUM_PORT ($PYTHON -m extender)"
  (
    cd "$ROOT"
    export QUORUM_HOST=127.0.0.1 QUORUM_PORT QUORUM_KUBECONFIG="$QUORUM_KUBECONFIG_FILE"
    # shellcheck disable=SC2086  # QUORUM_LAUNCH is words on purpose
    start quorum "$PYTHON" $QUORUM_LAUNCH -m extender \
      --config "$QUORUM_CONFIG" \
      --kubeconfig "$QUORUM_KUBECONFIG_FILE" \
      --host 127.0.0.1 \
      --port "$QUORUM_PORT"
  )
fi

# --- health ---------------------------------------------------------------------------
wait_for kube-controller-manager "healthy (/healthz)" https_ok "$CONTROLLER_MANAGER_PORT" /healthz
[[ "$SCHEDULER_OFF" == 1 ]] || wait_for kube-scheduler "healthy (/healthz)" https_ok "$SCHEDULER_PORT" /healthz
# One list per poll (not one wait per node), and more time for more nodes: about 0.1 s a node
# on 2 cores while everything else is starting too.
if ((node_count > 0)); then
  READY_TIMEOUT=$((READY_TIMEOUT + node_count / 10)) wait_for kwok "all $node_count nodes Ready" \
    all_nodes_ready "$node_count"
fi
if [[ "$QUORUM_EXTERNAL" != 1 ]]; then
  wait_for quorum "ready (/readyz)" curl -sf --max-time 3 "http://127.0.0.1:$QUORUM_PORT/readyz"
fi
if [[ "$AUTOSCALER" == 1 ]]; then
  "$ROOT/hack/autoscaler-up.sh"
fi
if [[ "$REAL_NODE_UP" == 1 ]]; then
  # shellcheck source=hack/lib/real-node.sh
  source "$ROOT/hack/lib/real-node.sh"
  real_node_up
fi

cat >"$CLUSTER_DIR/env" <<EOF
export KUBECONFIG="$ADMIN_KUBECONFIG"
export PATH="$BIN_DIR:\$PATH"
export QUORUM_URL="http://127.0.0.1:$QUORUM_PORT"
export QUORUM_LOCAL_KUBECONFIG="$QUORUM_KUBECONFIG_FILE"
EOF

log "cluster is up in $((SECONDS - started))s (Kubernetes $K8S_VERSION, $WORKLOAD_API, $node_count kwok nodes)"
if [[ "$QUORUM_EXTERNAL" == 1 ]]; then
  log "Quorum was not started (QUORUM_EXTERNAL=1); run it with:"
  log "  python -m extender --config scheduler-config/quorum.yaml --kubeconfig $QUORUM_KUBECONFIG_FILE --port $QUORUM_PORT"
fi
cat <<EOF
# Use the cluster with:
#   source ${CLUSTER_DIR#"$ROOT"/}/env
export KUBECONFIG="$ADMIN_KUBECONFIG"
export PATH="$BIN_DIR:\$PATH"
# logs: ${LOG_DIR#"$ROOT"/}/   stop: hack/cluster-down.sh
EOF
