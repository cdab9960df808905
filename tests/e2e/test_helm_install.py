"""Quorum installed as users install it, on a cluster with a real node: gangs through the release.

The cluster (``hack/cluster-up.sh --real-node --no-scheduler``, ``bash hack/test-all.sh`` starts it)
has no process-started scheduler or Quorum. Its one real node (a kubelet with containerd and runc)
runs the release's pods from the images ``hack/build-images.sh`` built here (stand-in base images:
no registry can be reached); the gangs land on kwok nodes. The order of the tests is the story:

1. ``helm install`` with two replicas: both pods Ready; kube-scheduler's lease names one of them,
   the other stands by. Both of the release's accounts are classified by its FlowSchema, at the
   default scheduler's priority level (workload-high).
   Quorum's container runs with an expiring token of its own account, asked for with the pod's
   projected token (``extenderToken.mode: tokenRequest``) and refreshed every 15 s here: every
   step below runs across refreshes, and the metrics show them.
2. A gang of the installed profile binds whole, inside one rack when it asks for one; a gang that
   fits no rack binds nothing.
3. The status command and the metrics, scraped from the Service's endpoints, tell the same story.
4. ``helm upgrade`` with a changed Quorum setting rolls both pods while gangs keep arriving: every
   gang ends whole, none partial, none lost.
5. ``helm uninstall`` leaves none of the release's objects.
6. ``kubectl apply -k`` of an overlay of ``manifests/`` (the shipped manifests with the real node's
   placement, as a user's overlay would add): its gang binds whole, every binding made with the
   expiring token Quorum asked for (the audit log says whose); ``kubectl delete -k`` cleans up.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .cluster import REPO_ROOT, Kube, Settings
from .install_support import (
    apiserver_for_pods,
    binders,
    bound,
    create,
    flow_schema,
    flow_schema_of,
    gang_pods,
    lease_holder,
    left_after,
    on_the_real_node,
    ready_pods,
    run,
    scrape,
    service_endpoints,
    tool,
    wait_until,
)

pytestmark = pytest.mark.install

RELEASE = NAMESPACE = "quorum-install"
PROFILE = "quorum-installed"
SELECTOR = f"app.kubernetes.io/instance={RELEASE}"
GANGS = "install-gangs"
KUSTOMIZE_POD = "app.kubernetes.io/name=quorum-scheduler"
figures: dict[str, float] = {}


@pytest.fixture(scope="module")
def kube(settings: Settings) -> Kube:
    return Kube(settings.kubeconfig)


@pytest.fixture(scope="module")
def values(tmp_path_factory: pytest.TempPathFactory, kube: Kube) -> Path:
    path = tmp_path_factory.mktemp("helm") / "values.yaml"
    path.write_text(yaml.safe_dump({
        "replicas": 2, "profile": PROFILE,
        "image": {"repository": "localhost/quorum", "tag": "dev", "pullPolicy": "Never"},
        # Quorum's own token is asked for again every 15 s: the tests run across several refreshes.
        "extenderToken": {"mode": "tokenRequest", "refreshSeconds": 15},
        "extraEnv": apiserver_for_pods(kube), **on_the_real_node()}))
    return path


def namespace_exists(kube: Kube, name: str) -> bool:
    return any(ns["metadata"]["name"] == name for ns in kube.raw(kube.core.list_namespace)["items"])


def helm(settings: Settings, *argv: str) -> subprocess.CompletedProcess[str]:
    return run(tool("helm", "QUORUM_HELM"), "--kubeconfig", settings.kubeconfig, *argv)


@pytest.fixture(scope="module")
def release(settings: Settings, kube: Kube, values: Path) -> Iterator[str]:
    started = time.monotonic()
    done = helm(settings, "install", RELEASE, str(REPO_ROOT / "charts" / "quorum"), "-n", NAMESPACE,
                "--create-namespace", "-f", str(values), "--wait", "--timeout", "240s")
    assert done.returncode == 0, done.stdout + done.stderr
    figures["install_to_ready_s"] = time.monotonic() - started
    wait_until(f"namespace {GANGS} of an earlier run gone", lambda: not namespace_exists(kube, GANGS), 120)
    kube.create_namespace(GANGS, {})
    yield RELEASE
    helm(settings, "uninstall", RELEASE, "-n", NAMESPACE, "--wait")
    kube.core.delete_namespace(GANGS, _request_timeout=30)


def test_install_two_replicas_one_leads(release: str, kube: Kube) -> None:
    pods = ready_pods(kube, NAMESPACE, SELECTOR)
    assert len(pods) == 2, [p["metadata"]["name"] for p in kube.pods(NAMESPACE, SELECTOR)]
    assert {p["spec"]["nodeName"] for p in pods} == {"quorum-real-node"}
    names = {p["metadata"]["name"] for p in pods}
    wait_until("kube-scheduler's lease names a pod of the release",
               lambda: lease_holder(kube, NAMESPACE, RELEASE) in names, 60)
    print(f"\ninstall: helm install --wait to both pods Ready: {figures['install_to_ready_s']:.1f} s")


def test_the_releases_requests_go_at_the_default_schedulers_priority(release: str, kube: Kube) -> None:
    """Both accounts' requests (kube-scheduler's and Quorum's) are classified by the release's
    FlowSchema, at workload-high, not with every other service account's at workload-low."""
    schema = flow_schema(kube, RELEASE)
    assert schema["spec"]["priorityLevelConfiguration"]["name"] == "workload-high"
    for account in (f"{RELEASE}-scheduler", f"{RELEASE}-extender"):
        assert flow_schema_of(kube, NAMESPACE, account) == (schema["metadata"]["uid"], "200"), account


def test_gang_binds_whole_in_one_rack_through_the_release(release: str, kube: Kube) -> None:
    create(kube, GANGS, gang_pods("racked", 4, 4, PROFILE, gpus=8, required="rack"))
    create(kube, GANGS, gang_pods("toobig", 5, 5, PROFILE, gpus=8, required="rack"))  # a rack has 4 nodes
    wait_until("gang racked bound whole", lambda: len(bound(kube, GANGS, "racked")) == 4, 90)
    nodes = {p["spec"]["nodeName"]: p for p in bound(kube, GANGS, "racked")}
    racks = {kube.raw(kube.core.read_node, n)["metadata"]["labels"]["topology.quorum.dev/rack"]
             for n in nodes}
    assert len(racks) == 1, racks
    time.sleep(5)
    assert bound(kube, GANGS, "toobig") == [], "a gang that fits no rack bound members"


def leader_url(kube: Kube) -> str:
    holder = lease_holder(kube, NAMESPACE, RELEASE)
    (pod,) = [p for p in kube.pods(NAMESPACE, SELECTOR) if p["metadata"]["name"] == holder]
    return f"http://{pod['status']['podIP']}:8080"


def test_status_and_metrics_from_the_service(release: str, kube: Kube) -> None:
    endpoints = service_endpoints(kube, NAMESPACE, f"{RELEASE}-metrics")
    assert len(endpoints) == 2, endpoints
    texts = {f"{ip}:{port}": scrape(f"http://{ip}:{port}/metrics") for ip, port in endpoints}
    assert all("quorum_cache_objects" in text for text in texts.values())


    def issued() -> list[float]:
        return [float(line.rsplit(" ", 1)[1]) for ip, port in endpoints
                for line in scrape(f"http://{ip}:{port}/metrics").splitlines()
                if line.startswith('quorum_token_requests_total{result="issued"}')]

    wait_until("each pod's Quorum asked for its token again (refreshSeconds 15)",
               lambda: len(issued()) == 2 and min(issued()) >= 2, 45)
    leader = leader_url(kube)
    gangs = [line for line in texts[leader.removeprefix("http://")].splitlines()
             if line.startswith("quorum_gangs{")]
    assert gangs and any(float(line.rsplit(" ", 1)[1]) > 0 for line in gangs), gangs
    status = run(str(REPO_ROOT / ".venv" / "bin" / "quorum-extender"), "status", "--url", leader)
    assert status.returncode == 0, status.stderr
    assert f"{GANGS}/toobig" in status.stdout and f"{GANGS}/racked" in status.stdout, status.stdout


class Arrivals(threading.Thread):
    """Creates a gang of two every ``every`` seconds until stopped (the upgrade's traffic)."""

    def __init__(self, kube: Kube, every: float) -> None:
        super().__init__(daemon=True)
        self.kube, self.every, self.names = kube.fork(), every, list[str]()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            name = f"rolling-{len(self.names)}"
            create(self.kube, GANGS, gang_pods(name, 2, 2, PROFILE, gpus=0))
            self.names.append(name)
            self.stop.wait(self.every)


def bind_times(kube: Kube, names: list[str]) -> list[float]:
    out = []
    for name in names:
        for pod in bound(kube, GANGS, name):
            for cond in pod["status"].get("conditions", []):
                if cond["type"] == "PodScheduled" and cond["status"] == "True":
                    out.append(time.mktime(time.strptime(cond["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")))
    return sorted(out)


def test_upgrade_rolls_the_pods_with_no_partial_or_lost_gang(
        release: str, kube: Kube, settings: Settings, values: Path) -> None:
    before = {p["metadata"]["name"] for p in kube.pods(NAMESPACE, SELECTOR)}
    arrivals = Arrivals(kube, every=2.0)
    arrivals.start()
    time.sleep(6)
    started = time.monotonic()
    done = helm(settings, "upgrade", RELEASE, str(REPO_ROOT / "charts" / "quorum"), "-n", NAMESPACE,
                "-f", str(values), "--set", "config.gang.bindTimeoutSeconds=45",
                "--wait", "--timeout", "240s")
    figures["upgrade_s"] = time.monotonic() - started
    time.sleep(6)
    arrivals.stop.set()
    arrivals.join()
    assert done.returncode == 0, done.stdout + done.stderr
    after = {p["metadata"]["name"] for p in ready_pods(kube, NAMESPACE, SELECTOR)}
    assert len(after) == 2 and not after & before, (before, after)
    names = arrivals.names

    def whole() -> bool:
        return all(len(bound(kube, GANGS, n)) == 2 for n in names)

    wait_until(f"all {len(names)} gangs that arrived during the upgrade bound whole", whole, 120)
    times = bind_times(kube, names)
    gap = max((b - a for a, b in itertools.pairwise(times)), default=0.0)
    print(f"\nupgrade: helm upgrade --wait {figures['upgrade_s']:.1f} s; {len(names)} gangs arrived "
          f"every 2 s, all bound whole; longest pause between binds {gap:.0f} s (1-s resolution)")


def test_uninstall_leaves_none_of_the_releases_objects(release: str, settings: Settings) -> None:
    done = helm(settings, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "120s")
    assert done.returncode == 0, done.stdout + done.stderr
    kubectl = tool("kubectl", "QUORUM_KUBECTL")
    left = left_after(kubectl, settings.kubeconfig, SELECTOR)
    assert left == [], left


def overlay(tmp: Path, kube: Kube) -> Path:
    """A user's overlay of the shipped manifests: where the pod runs, how it reaches the apiserver."""
    placement = on_the_real_node()
    env = apiserver_for_pods(kube)
    patch = {"apiVersion": "apps/v1", "kind": "Deployment",
             "metadata": {"name": "quorum-scheduler", "namespace": "quorum-system"},
             "spec": {"template": {"spec": {**placement, "containers": [
                 {"name": "kube-scheduler", "env": env}, {"name": "quorum", "env": env}]}}}}
    base = os.path.relpath(REPO_ROOT / "manifests", tmp)  # kustomize takes bases by relative path
    (tmp / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [base], "patches": [{"path": "placement.yaml"}]}))
    (tmp / "placement.yaml").write_text(yaml.safe_dump(patch))
    return tmp


def test_kustomize_install_binds_a_gang_and_deletes_cleanly(
        tmp_path: Path, kube: Kube, settings: Settings) -> None:
    kubectl = tool("kubectl", "QUORUM_KUBECTL")
    directory = overlay(tmp_path, kube)
    applied = run(kubectl, "--kubeconfig", settings.kubeconfig, "apply", "-k", str(directory))
    assert applied.returncode == 0, applied.stderr
    try:
        wait_until("the kustomize pod Ready",
                   lambda: len(ready_pods(kube, "quorum-system", KUSTOMIZE_POD)) == 1, 180)
        kube.create_namespace("kustomize-gangs", {})
        create(kube, "kustomize-gangs", gang_pods("k", 3, 3, "quorum"))
        wait_until("the kustomize install's gang bound whole",
                   lambda: len(bound(kube, "kustomize-gangs", "k")) == 3, 90)
        # No token Secret is installed: the binds carried the expiring token of Quorum's own
        # account, which it asked for with the pod's (the scheduler's) token.
        assert binders("kustomize-gangs") == {"system:serviceaccount:quorum-system:quorum"}
        # ... and at the default scheduler's priority (manifests/flowschema.yaml).
        expected = (flow_schema(kube, "quorum")["metadata"]["uid"], "200")
        assert flow_schema_of(kube, "quorum-system", "quorum") == expected
    finally:
        if namespace_exists(kube, "kustomize-gangs"):
            kube.core.delete_namespace("kustomize-gangs", _request_timeout=30)
        deleted = run(kubectl, "--kubeconfig", settings.kubeconfig, "delete", "-k", str(directory),
                      "--wait", "--ignore-not-found")
    assert deleted.returncode == 0, deleted.stderr
    assert left_after(kubectl, settings.kubeconfig, "app.kubernetes.io/part-of=quorum") == []
