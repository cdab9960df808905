"""Gangs made by the real JobSet controller (``hack/cluster-up.sh --jobset``, ``hack/lib/jobset.sh``).

JobSet (built from its Go module, with its CRD and webhooks) creates one Job per replica of each
replicated job; kube-controller-manager's Job controller creates the pods, with JobSet's labels and
what its pod webhook adds. The gang is declared in the JobSet's pod template with Quorum's
annotations (``minCount`` = replicas × parallelism); Quorum binds the JobSet's pods whole, in one
rack, or none of them.

JobSet v0.11.0 is built on the Kubernetes 1.35 API types: its CRD's pod template has no
``spec.schedulingGroup`` (1.37), so a JobSet's pods cannot name a native PodGroup; the field is
pruned (``kubectl apply`` refuses it). The last test holds that fact, which docs/conventions.md
tells JobSet users.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from .cluster import JOBSET_API
from .scenario import Scenario

pytestmark = pytest.mark.e2e

GROUP, VERSION, PLURAL = JOBSET_API
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"


def require_jobset(sc: Scenario) -> None:
    try:
        sc.kube.custom.list_namespaced_custom_object(GROUP, VERSION, sc.ns, PLURAL, _request_timeout=10)
    except ApiException as exc:
        if exc.status != 404:
            raise
        pytest.fail("the JobSet API is not served: start the cluster with hack/cluster-up.sh --jobset "
                    "(hack/test-all.sh does)")


def jobset(sc: Scenario, name: str, replicas: int, parallelism: int, gpus: int,
           **gang: Any) -> dict[str, Any]:
    """A JobSet of one replicated job whose pod template is ``Scenario.pod``'s (``gang`` its
    declaration: Quorum's annotations, or ``pod_group``)."""
    pod = sc.pod("unused", gpus=gpus, **gang)
    template = {"metadata": {key: pod["metadata"][key] for key in ("labels", "annotations")},
                "spec": pod["spec"]}
    job = {"parallelism": parallelism, "completions": parallelism, "backoffLimit": 0, "template": template}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"replicatedJobs": [{"name": "workers", "replicas": replicas,
                                         "template": {"spec": job}}]}}


def create(sc: Scenario, body: dict[str, Any]) -> None:
    sc.kube.custom.create_namespaced_custom_object(GROUP, VERSION, sc.ns, PLURAL, body, _request_timeout=30)


def test_a_jobsets_pods_bind_whole_in_one_rack(scenario: Scenario) -> None:
    sc, topo, settings = scenario, scenario.topo, scenario.settings
    require_jobset(sc)
    why = topo.shortfall(nodes_per_rack=2)
    if why:
        pytest.skip(why)
    replicas, parallelism = 2, topo.nodes_per_rack // 2
    pods = replicas * parallelism  # whole nodes: exactly one rack holds them
    create(sc, jobset(sc, "trainer", replicas, parallelism, topo.gpus_per_node, gang="trainer",
                      min_count=pods, required=settings.rack_label))

    def created() -> list[str] | None:
        names = sorted(sc.gang_pods("trainer"))
        return names if len(names) >= pods else None

    names = sc.wait_for(f"JobSet and the Job controller to create {pods} pods", created, timeout=60)
    made = sc.pods_named(names)
    assert all(p["metadata"]["labels"].get(JOBSET_NAME_LABEL) == "trainer" for p in made.values()), \
        "the pods are JobSet's"
    placement = sc.wait_bound(names, timeout=90, what=f"all {pods} JobSet pods bound")
    racks, _ = sc.racks_and_blocks(placement)
    assert len(racks) == 1, f"the PodGroup asks for one rack: {placement}"
    assert len(set(placement.values())) == pods, f"one whole node each: {placement}"
    debug = sc.gang_debug("trainer") or {}
    assert debug.get("minCount") == pods, f"Quorum reads the gang from the pod template: {debug}"
    sc.record("bind_skew", sc.bind_skew(names))
    sc.finish()


def test_a_jobset_that_no_rack_holds_binds_nothing(scenario: Scenario) -> None:
    sc, topo, settings = scenario, scenario.topo, scenario.settings
    require_jobset(sc)
    pods = topo.nodes_per_rack + 1  # whole nodes, one rack: never fits
    create(sc, jobset(sc, "toobig", 1, pods, topo.gpus_per_node, gang="toobig", min_count=pods,
                      required=settings.rack_label))

    def created() -> list[str] | None:
        names = sorted(sc.gang_pods("toobig"))
        return names if len(names) >= pods else None

    names = sc.wait_for(f"{pods} JobSet pods created", created, timeout=60)
    sc.wait_for("Quorum to say why the gang waits",
                lambda: "rack" in str((sc.gang_debug("toobig") or {}).get("reason", "")), timeout=60)
    assert not any(sc.placement(names).values()), "no pod of a gang that fits no rack is bound"
    sc.finish()


def test_a_jobsets_pod_template_cannot_name_a_native_podgroup(scenario: Scenario) -> None:
    sc = scenario
    require_jobset(sc)
    sc.kube.create_podgroup(sc.ns, "native", 1)
    create(sc, jobset(sc, "native", 1, 1, 1, pod_group="native"))
    stored = sc.kube.custom.get_namespaced_custom_object(GROUP, VERSION, sc.ns, PLURAL, "native",
                                                         _request_timeout=30)
    spec = stored["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert "schedulingGroup" not in spec, "JobSet now keeps spec.schedulingGroup: update docs/conventions.md"
    sc.finish()
