"""The soak's deadlock check (tests/e2e/soak_checks.py) on hand-made cluster views: it flags a
waiting gang that fits the free capacity for longer than the limit, and nothing else."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from tests.e2e.cluster import NodeInfo, Topology
from tests.e2e.soak_checks import Deadlocks

GPU = "nvidia.com/gpu"


def pod(name: str, gang: str, node: str = "", gpus: int = 8, required: str = "rack") -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": {"quorum.dev/gang": gang, "quorum.dev/min-count": "2",
                                                          "quorum.dev/required-topology": required},
                         "labels": {"e2e.quorum.dev/role": "soak"}},
            "spec": {"nodeName": node, "containers": [{"resources": {"requests": {GPU: str(gpus)}}}]},
            "status": {"phase": "Running" if node else "Pending"}}


def world(pods: list[dict[str, Any]], debug: dict[str, Any] | None = None) -> Deadlocks:
    nodes = {f"r{r}-n{n}": NodeInfo(f"r{r}-n{n}", "b0", f"r{r}", 8) for r in range(2) for n in range(2)}
    topo = Topology(nodes, {"r0": ["r0-n0", "r0-n1"], "r1": ["r1-n0", "r1-n1"]}, {"b0": ["r0", "r1"]})
    kube = SimpleNamespace(pods=lambda ns, label_selector=None: pods, all_pods=lambda: pods)
    quorum = SimpleNamespace(debug=lambda: debug or {"gangs": [], "claim": None})
    settings = SimpleNamespace(gpu_resource=GPU)
    sc = SimpleNamespace(ns="soak", kube=kube, quorum=quorum, topo=topo, settings=settings)
    return Deadlocks(sc, limit=60.0)  # type: ignore[arg-type]


def busy_rack_r1() -> list[dict[str, Any]]:
    return [pod("x-0", "x", "r1-n0"), pod("x-1", "x", "r1-n1")]


def test_a_waiting_gang_that_fits_free_capacity_too_long_is_a_deadlock() -> None:
    checks = world([pod("g-0", "g"), pod("g-1", "g"), *busy_rack_r1()])
    checks.check(0.0)
    assert checks.found == {}
    checks.check(61.0)
    assert list(checks.found) == ["g"] and "fitted free capacity for 61s" in checks.found["g"]


def test_a_gang_that_does_not_fit_waits_legitimately() -> None:
    checks = world([pod("g-0", "g"), pod("g-1", "g"), pod("y-0", "y", "r0-n0"), *busy_rack_r1()])
    checks.check(0.0)
    checks.check(61.0)
    assert checks.found == {}


def test_capacity_claimed_by_another_gang_or_a_backoff_is_a_reason_to_wait() -> None:
    pods = [pod("g-0", "g"), pod("g-1", "g"), *busy_rack_r1()]
    claimed = world(pods, {"gangs": [], "claim": {"gang": "soak/big", "nodes": ["r0-n0", "r0-n1"]}})
    backing_off = world(pods, {"gangs": [{"gang": "soak/g", "backoffSeconds": 20.0}], "claim": None})
    own_claim = world(pods, {"gangs": [], "claim": {"gang": "soak/g", "nodes": ["r0-n0", "r0-n1"]}})
    for checks in (claimed, backing_off, own_claim):
        checks.check(0.0)
        checks.check(61.0)
    assert claimed.found == {} and backing_off.found == {}
    assert list(own_claim.found) == ["g"], "its own claim is free capacity for the gang"


def test_a_gang_that_stopped_fitting_starts_over() -> None:
    pods = [pod("g-0", "g"), pod("g-1", "g"), *busy_rack_r1()]
    checks = world(pods)
    checks.check(0.0)
    pods.append(pod("y-0", "y", "r0-n0"))
    checks.check(30.0)
    pods.pop()
    checks.check(61.0)
    checks.check(100.0)
    assert checks.found == {}, "fitting again at 61 s: only 39 s so far"
