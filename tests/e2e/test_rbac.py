"""Quorum's identity, checked by the real authorizer and admission chain.

- The rules the apiserver grants Quorum's ServiceAccount (SelfSubjectRulesReview, less what any
  ServiceAccount gets) are exactly the ClusterRole in manifests/quorum-rbac.yaml (and those in
  manifests/started-configmaps.yaml and scale-up-requests.yaml when the cluster installed them).
- Everything Quorum asked the apiserver for during the suite (its audit log: the local apiserver
  audits that account's requests, see hack/cluster-up.sh) is inside those rules, and nothing it
  asked for was forbidden. Grants not used in this run are recorded.
- With Quorum's own token, a pod can be given a ``quorum.dev/`` annotation, and nothing else: the
  ValidatingAdmissionPolicy in the same file refuses a changed image, label or other annotation.

This file sorts after the lifecycle, preemption and queue scenarios, so the audit log already holds
their binds, evictions, patches and Events when the whole suite runs.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from .cluster import REPO_ROOT, Kube
from .scenario import Scenario

pytestmark = pytest.mark.e2e

RBAC_FILE = REPO_ROOT / "manifests" / "quorum-rbac.yaml"
# Extra grants an install adds when a feature is on: (file, ClusterRole and its binding's name).
EXTRA_GRANTS = ((REPO_ROOT / "manifests" / "started-configmaps.yaml", "quorum-started-configmaps"),
                (REPO_ROOT / "manifests" / "scale-up-requests.yaml", "quorum-scale-up-requests"))
QUORUM_KUBECONFIG = REPO_ROOT / ".cache" / "cluster" / "quorum.kubeconfig"
LOCAL_KUBECONFIG = REPO_ROOT / ".cache" / "cluster" / "kubeconfig"
APISERVER_LOG = REPO_ROOT / ".cache" / "cluster" / "logs" / "kube-apiserver.log"
KLOG_START = re.compile(r"^I(\d{2})(\d{2}) (\d{2}:\d{2}:\d{2}\.\d+) .*\] Version: ")
RBAC_WARMUP = timedelta(seconds=60)
AUDIT_LOG = REPO_ROOT / ".cache" / "cluster" / "logs" / "audit.log"
QUORUM_USER = "system:serviceaccount:quorum-system:quorum"
QUORUM_USER_AGENT = "quorum-extender"  # extender/adapters/kube.py
Grant = tuple[str, str, str]  # (apiGroup, resource[/subresource], verb)


def role_rules(path: Path, name: str) -> set[Grant]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    (role,) = [d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == name]
    return expand(role["rules"])


def documented(kube: Kube) -> set[Grant]:
    """The base ClusterRole, and each feature's extra one that this cluster installed (cluster-up
    does when Quorum's configuration turns the feature on)."""
    rules = role_rules(RBAC_FILE, "quorum")
    for path, name in EXTRA_GRANTS:
        try:
            kube.rbac.read_cluster_role_binding(name, _request_timeout=30)
        except ApiException as exc:
            if exc.status != 404:
                raise
            continue
        rules |= role_rules(path, name)
    return rules


def expand(rules: Iterable[dict[str, Any]]) -> set[Grant]:
    return {(group, resource, verb) for rule in rules for group in rule.get("apiGroups") or []
            for resource in rule.get("resources") or [] for verb in rule.get("verbs") or []}


def token_api(token: str, kube: Kube) -> client.ApiClient:
    """A client with the admin's endpoint and CA, authenticated by ``token``."""
    configuration = client.Configuration()
    configuration.host = kube.configuration.host
    configuration.ssl_ca_cert = kube.configuration.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {token}"}
    return client.ApiClient(configuration)


def granted(api: client.ApiClient, namespace: str) -> set[Grant]:
    review = client.AuthorizationV1Api(api).create_self_subject_rules_review(
        client.V1SelfSubjectRulesReview(spec=client.V1SelfSubjectRulesReviewSpec(namespace=namespace)))
    rules = [{"apiGroups": r.api_groups, "resources": r.resources, "verbs": r.verbs}
             for r in review.status.resource_rules]
    return expand(rules)


@pytest.fixture
def quorum_api() -> Iterator[client.ApiClient]:
    if not QUORUM_KUBECONFIG.exists():
        pytest.skip(f"needs the local cluster's Quorum credentials ({QUORUM_KUBECONFIG})")
    api = config.new_client_from_config(config_file=str(QUORUM_KUBECONFIG))  # type: ignore[no-untyped-call]
    yield api
    api.close()


def test_quorums_granted_rules_are_the_documented_ones(scenario: Scenario,
                                                       quorum_api: client.ApiClient) -> None:
    sc = scenario
    core = sc.kube.core
    core.create_namespaced_service_account(sc.ns, client.V1ServiceAccount(
        metadata=client.V1ObjectMeta(name="baseline")))
    token = core.create_namespaced_service_account_token(
        "baseline", sc.ns, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[])))
    baseline_api = token_api(token.status.token, sc.kube)
    try:
        baseline = granted(baseline_api, sc.ns)  # what every ServiceAccount may do (discovery, reviews)
    finally:
        baseline_api.close()
    quorum = granted(quorum_api, sc.ns) - baseline
    rules = documented(sc.kube)
    assert quorum == rules - baseline, (
        f"granted but not documented: {sorted(quorum - rules)}; "
        f"documented but not granted: {sorted(rules - baseline - quorum)}")
    sc.record("grants", len(quorum))
    sc.finish()


def audited() -> list[dict[str, Any]]:
    out = []
    with AUDIT_LOG.open() as log:
        for line in log:
            event = json.loads(line)
            # Quorum's own requests: the tests here also use its token (with another client).
            if (event.get("user") or {}).get("username") == QUORUM_USER and event.get("objectRef") \
                    and event.get("userAgent") == QUORUM_USER_AGENT:
                out.append(event)
    return out


def as_grant(event: dict[str, Any]) -> Grant:
    ref = event["objectRef"]
    resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    return ref.get("apiGroup", ""), resource, event["verb"]


def apiserver_starts() -> list[datetime]:
    """When the local apiserver started (its log; klog stamps carry no year: this one's)."""
    year = datetime.now(UTC).year
    out = []
    for line in APISERVER_LOG.read_text(errors="replace").splitlines():
        match = KLOG_START.match(line)
        if match:
            month, day, clock = match.groups()
            out.append(datetime.strptime(f"{year}-{month}-{day} {clock[:15]}", "%Y-%m-%d %H:%M:%S.%f")
                       .replace(tzinfo=UTC))
    return out


def just_started(event: dict[str, Any], starts: list[datetime]) -> bool:
    """A fresh apiserver refuses requests until its RBAC caches are filled; a refusal of a granted
    request that soon after a (re)start (the soak restarts it) is that, not a missing grant."""
    stamp = datetime.fromisoformat(str(event.get("requestReceivedTimestamp")).replace("Z", "+00:00"))
    return any(timedelta(0) <= stamp - start <= RBAC_WARMUP for start in starts)


def test_quorum_asked_only_for_what_it_is_granted_and_was_never_refused(scenario: Scenario) -> None:
    if not AUDIT_LOG.exists():
        if Path(scenario.settings.kubeconfig).resolve() == LOCAL_KUBECONFIG.resolve():
            pytest.fail(f"the local cluster's apiserver wrote no audit log at {AUDIT_LOG}; "
                        "was it started by this checkout's hack/cluster-up.sh?")
        pytest.skip("another cluster: its apiserver's audit log is not readable here")
    events = audited()
    assert events, "Quorum made requests during the suite; the audit log has none of them"
    used = {as_grant(e) for e in events}
    rules = documented(scenario.kube)
    starts = apiserver_starts()
    refused = [e for e in events if (e.get("responseStatus") or {}).get("code") == 403]
    transient = [e for e in refused if as_grant(e) in rules and just_started(e, starts)]
    # Admission, not RBAC, refuses new objects in a namespace being deleted (a test's cleanup while
    # Quorum still reports on its gangs there): a granted write, refused for another reason.
    terminating = [e for e in refused if as_grant(e) in rules and "being terminated" in
                   str((e.get("responseStatus") or {}).get("message"))]
    forbidden = sorted({as_grant(e) for e in refused if e not in transient and e not in terminating})
    assert forbidden == [], f"Quorum was refused: {forbidden}"
    assert used - rules == set(), f"used but not granted: {sorted(used - rules)}"
    scenario.record("audit", {"requests": len(events),
                              "refused_just_after_an_apiserver_start": len(transient),
                              "refused_in_a_terminating_namespace": len(terminating),
                              "used": sorted("/".join(g) for g in used),
                              "granted_not_used_in_this_run": sorted("/".join(g) for g in rules - used)})
    scenario.finish()


def patch_as_quorum(api: client.ApiClient, namespace: str, name: str, body: dict[str, Any]) -> int:
    try:
        client.CoreV1Api(api).patch_namespaced_pod(name, namespace, body, _request_timeout=30)
    except ApiException as exc:
        return int(exc.status)
    return 200


def test_quorum_may_set_only_its_own_annotations_on_a_pod(scenario: Scenario,
                                                          quorum_api: client.ApiClient) -> None:
    sc = scenario
    (name,) = sc.create([sc.pod("target", gpus=0, node_selector={"e2e.quorum.dev/nowhere": "x"})])
    image = sc.pods_named([name])[name]["spec"]["containers"][0]["image"]
    assert patch_as_quorum(quorum_api, sc.ns, name, {"metadata": {"annotations": {
        "quorum.dev/requeue": "now"}}}) == 200, "the requeue nudge must pass"
    refused = {
        "image": {"spec": {"containers": [{"name": "main", "image": "registry.example/evil:1"}]}},
        "label": {"metadata": {"labels": {"e2e.quorum.dev/role": "changed"}}},
        "annotation": {"metadata": {"annotations": {"other.example/owner": "quorum"}}},
    }
    answers = {what: patch_as_quorum(quorum_api, sc.ns, name, body) for what, body in refused.items()}
    assert all(code in (403, 422) for code in answers.values()), answers
    pod = sc.pods_named([name])[name]
    assert pod["spec"]["containers"][0]["image"] == image
    assert pod["metadata"]["annotations"].get("quorum.dev/requeue") == "now"
    assert "other.example/owner" not in pod["metadata"]["annotations"]
    sc.record("refused_writes", answers)
    sc.finish()
