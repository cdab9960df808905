"""Installing Quorum: the Helm chart and the kustomize manifests, against the real apiserver.

- ``helm lint`` passes for the default values and for HA + TLS values.
- ``helm template`` renders, for several value sets, manifests that pass a server-side dry-run
  apply (the apiserver validates every object, RBAC and the admission policy included). Kinds whose
  CRDs this cluster lacks (ServiceMonitor, cert-manager's Certificate) are checked as rendered.
- The rendered ``quorum.yaml`` loads with Quorum's own configuration loader, and the rendered
  kube-scheduler configuration matches it (profile, leader election, HTTPS and its certificates).
- Values that would run two schedulers of one profile without leader election are refused.
- ``kubectl apply -k manifests/`` passes the same dry-run.

helm is built from its Go module by hack/build-helm.sh (the test command does it).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
from typing import Any

import pytest
import yaml

from extender.config import from_mapping

from .cluster import REPO_ROOT
from .install_support import tool

pytestmark = pytest.mark.e2e

CHART = REPO_ROOT / "charts" / "quorum"
NAMESPACE = "quorum-system"  # exists on the local cluster (hack/cluster-up.sh)
VALUE_SETS: dict[str, list[str]] = {
    "defaults": [],
    "ha-tls": ["replicas=2", "tls.enabled=true", "tls.secretName=quorum-tls",
               "config.preemption.enabled=true"],
    "crds": ["serviceMonitor.enabled=true", "tls.enabled=true", "tls.certManager.enabled=true",
             "tls.certManager.issuerRef.name=ca"],
}


def run(*argv: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=120)


def kubeconfig() -> str:
    return os.environ.get("KUBECONFIG") or str(REPO_ROOT / ".cache" / "cluster" / "kubeconfig")


@functools.cache
def server_version() -> str:
    """The cluster's version: helm template assumes an old one unless told (the chart needs 1.30+)."""
    done = run(tool("kubectl", "QUORUM_KUBECTL"), "--kubeconfig", kubeconfig(), "version", "-o", "json")
    assert done.returncode == 0, done.stderr
    return str(json.loads(done.stdout)["serverVersion"]["gitVersion"])


def template(*args: str) -> subprocess.CompletedProcess[str]:
    return run(tool("helm", "QUORUM_HELM"), "template", "quorum", str(CHART), "--namespace", NAMESPACE,
               "--kube-version", server_version(), *args)


def render(values: list[str]) -> list[dict[str, Any]]:
    done = template(*[arg for value in values for arg in ("--set", value)])
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def dry_run(manifests: str, *source: str) -> subprocess.CompletedProcess[str]:
    kubectl = tool("kubectl", "QUORUM_KUBECTL")
    return run(kubectl, "--kubeconfig", kubeconfig(), "apply", "--dry-run=server", *(source or ("-f", "-")),
               stdin=manifests)


def config_map(docs: list[dict[str, Any]], suffix: str) -> dict[str, str]:
    (found,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith(suffix)]
    return dict(found["data"])


@pytest.mark.parametrize("values", ["defaults", "ha-tls"])
def test_helm_lint(values: str) -> None:
    flags = [arg for value in VALUE_SETS[values] for arg in ("--set", value)]
    done = run(tool("helm", "QUORUM_HELM"), "lint", "--strict", str(CHART), *flags)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("values", ["defaults", "ha-tls"])
def test_rendered_chart_passes_a_server_side_dry_run(values: str) -> None:
    docs = render(VALUE_SETS[values])
    done = dry_run(yaml.safe_dump_all(docs))
    assert done.returncode == 0, done.stderr
    assert "(server dry run)" in done.stdout


def test_rendered_configurations_load_and_agree() -> None:
    docs = render(VALUE_SETS["ha-tls"])
    data = config_map(docs, "-config")
    quorum = from_mapping(yaml.safe_load(data["quorum.yaml"]))
    assert quorum.scheduler_names == ("quorum",) and quorum.preemption.enabled
    assert quorum.tls is not None and quorum.tls.client_names == ("kube-scheduler",)
    assert quorum.host == "127.0.0.1" and quorum.metrics_host == "0.0.0.0"
    scheduler = yaml.safe_load(data["kube-scheduler.yaml"])
    assert scheduler["leaderElection"]["leaderElect"] is True
    assert scheduler["profiles"][0]["schedulerName"] == "quorum"
    (extender,) = scheduler["extenders"]
    assert extender["urlPrefix"] == f"https://127.0.0.1:{quorum.port}" and extender["enableHTTPS"]
    assert extender["tlsConfig"]["certFile"] == quorum.tls.cert_file
    assert int(extender["httpTimeout"].rstrip("s")) > quorum.gang.bind_timeout_seconds
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    pod = deployment["spec"]["template"]["spec"]
    own = yaml.safe_load(data["quorum.yaml"])["tokenRequest"]
    assert own["serviceAccount"] != pod["serviceAccountName"], \
        "the scheduler and Quorum run as different ServiceAccounts"
    assert not any("secret" in v and v["name"] == "extender-token" for v in pod["volumes"]), \
        "no long-lived token is mounted (extenderToken.mode tokenRequest)"
    (grant,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"].endswith("-token")]
    assert grant["rules"] == [{"apiGroups": [""], "resources": ["serviceaccounts/token"],
                               "resourceNames": [own["serviceAccount"]], "verbs": ["create"]}]
    secret_mode = next(d for d in render(VALUE_SETS["ha-tls"] + ["extenderToken.mode=secret"])
                   if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    assert any(v.get("secret", {}).get("secretName", "").endswith("-extender-token")
               for v in secret_mode["volumes"])
    dashboard = json.loads(config_map(render([]), "-dashboard")["quorum.json"])
    assert dashboard == json.loads((CHART / "dashboards" / "quorum.json").read_text())


def test_scheduler_feature_gates_follow_the_value() -> None:
    """The default keeps kube-scheduler's group cycle off; 1.38 users set the gate on, or pass none."""
    def gates(values: list[str]) -> list[str]:
        (deployment,) = [d for d in render(values) if d["kind"] == "Deployment"]
        (scheduler,) = [c for c in deployment["spec"]["template"]["spec"]["containers"]
                        if c["name"] == "kube-scheduler"]
        return [arg for arg in scheduler["command"] if arg.startswith("--feature-gates")]

    assert gates([]) == ["--feature-gates=GenericWorkload=false"]
    assert gates(["scheduler.featureGates=GenericWorkload=true"]) == ["--feature-gates=GenericWorkload=true"]
    assert gates(["scheduler.featureGates="]) == []


def test_rendered_extras_need_crds_this_cluster_lacks() -> None:
    kinds = {d["kind"] for d in render(VALUE_SETS["crds"])}
    assert {"ServiceMonitor", "Certificate", "PodDisruptionBudget", "ValidatingAdmissionPolicy"} <= kinds


def test_two_schedulers_without_leader_election_are_refused() -> None:
    done = template("--set", "replicas=2", "--set", "scheduler.leaderElection=false")
    assert done.returncode != 0 and "leaderElection" in done.stderr


def test_kustomize_manifests_pass_a_server_side_dry_run() -> None:
    done = dry_run("", "-k", str(REPO_ROOT / "manifests"))
    assert done.returncode == 0, done.stderr
    assert "deployment.apps/quorum-scheduler" in done.stdout


def test_kustomize_manifests_mount_no_long_lived_token() -> None:
    """Quorum's container gets the pod's expiring token and asks for its own with it."""
    done = run(tool("kubectl", "QUORUM_KUBECTL"), "kustomize", str(REPO_ROOT / "manifests"))
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert not [d for d in docs if d["kind"] == "Secret"], "no token Secret is installed"
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    (quorum,) = [c for c in pod["containers"] if c["name"] == "quorum"]
    (mount,) = [m for m in quorum["volumeMounts"] if m["mountPath"].endswith("serviceaccount")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    sources = volume["projected"]["sources"]
    (token,) = [source["serviceAccountToken"] for source in sources if "serviceAccountToken" in source]
    assert token["expirationSeconds"] <= 3607
    (config,) = [d["data"]["quorum.yaml"] for d in docs
                 if d["kind"] == "ConfigMap" and d["metadata"]["name"].startswith("quorum-config-")]
    own = yaml.safe_load(config)["tokenRequest"]
    assert own["serviceAccount"] == "quorum" != pod["serviceAccountName"]
    (grant,) = [d for d in docs if d["kind"] == "Role" and d["metadata"]["name"] == "quorum-token"]
    assert grant["rules"] == [{"apiGroups": [""], "resources": ["serviceaccounts/token"],
                               "resourceNames": ["quorum"], "verbs": ["create"]}]
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == "quorum-token"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                    "namespace": NAMESPACE}]


def test_the_chart_and_the_manifests_grant_and_guard_the_same() -> None:
    """Two ways to install, one policy: Quorum's rules and its pod-write validations agree."""
    source = (REPO_ROOT / "manifests" / "quorum-rbac.yaml").read_text()
    manifests = [d for d in yaml.safe_load_all(source) if d]
    chart = render([])

    def one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
        (found,) = [d for d in docs if d["kind"] == kind]
        return found

    assert one(chart, "ClusterRole")["rules"] == one(manifests, "ClusterRole")["rules"]
    policy = "ValidatingAdmissionPolicy"
    assert one(chart, policy)["spec"]["validations"] == one(manifests, policy)["spec"]["validations"]
