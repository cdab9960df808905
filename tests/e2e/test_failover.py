"""Two kube-scheduler + Quorum pairs with leader election: the leader dies mid-gang, the standby
takes over, and every gang ends whole.

Both pairs serve the profile ``quorum-ha``; kube-scheduler's leader election (a short lease) lets
one of them schedule. The standby's Quorum keeps a warm cache and reports ready, but answers no
verb: its scheduler does not run. A gang with one member kube-scheduler cannot place yet (a node
selector no node matches) has its other members held at bind by the leader's Quorum when both
leader processes are SIGKILLed. The blocked member is then admitted and a second gang created:
the standby's scheduler takes the lease, its Quorum rebuilds everything from the cluster, and both
gangs bind whole. With leader election off, the standby answers verbs before the kill and the
test fails.

Mid-bind: an admission policy refuses the binding of one member, so the leader's bindings of the
others reach the apiserver and the last does not; the leader pair is killed in that state and the
policy lifted. The standby completes the gang in the same rack without binding any member again.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from ..certs import free_port
from .cluster import Quorum
from .pairs import Launcher, verb_calls, wait_ready
from .scenario import Scenario

pytestmark = pytest.mark.e2e

PROFILE = "quorum-ha"
# The lease the local scheduler's identity may hold (system:kube-scheduler may update only
# kube-system/kube-scheduler); the suite's own scheduler does not elect, so it is free.
LEASE = {"leaderElect": True, "resourceNamespace": "kube-system", "resourceName": "kube-scheduler",
         "leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "1s"}
FAILOVER_GRACE_SECONDS = 45.0  # a gang held at bind by the killed leader is partial until then


@dataclass
class HaPair:
    quorum: Quorum
    processes: list[subprocess.Popen[bytes]]


@dataclass
class Ha:
    leader: HaPair
    standby: HaPair


def start_pair(launcher: Launcher, name: str) -> HaPair:
    verbs, ops = free_port(), free_port()
    quorum = launcher.start_quorum(f"ha-{name}-quorum", verbs, {
        "listen": {"metricsPort": ops}, "schedulerNames": [PROFILE], "preemption": {"enabled": False}})
    handle = Quorum(f"http://127.0.0.1:{ops}")
    wait_ready(handle, f"Quorum {name}")
    scheduler = launcher.start_scheduler(f"ha-{name}-kube-scheduler", free_port(), PROFILE,
                                         {"urlPrefix": f"http://127.0.0.1:{verbs}"}, LEASE)
    return HaPair(handle, [quorum, scheduler])


def lease_holder(sc: Scenario) -> str:
    lease = client.CoordinationV1Api(sc.kube.api).read_namespaced_lease("kube-scheduler", "kube-system")
    return str(lease.spec.holder_identity or "") if lease.spec else ""


@pytest.fixture
def ha(scenario: Scenario) -> Iterator[Ha]:
    with tempfile.TemporaryDirectory(prefix="quorum-ha-") as tmp:
        launcher = Launcher.from_local(Path(tmp))
        if isinstance(launcher, str):
            pytest.skip(f"needs the local cluster's processes: {launcher}")
        try:
            before = lease_holder(scenario) if _lease_exists(scenario) else ""
            leader = start_pair(launcher, "a")
            if LEASE["leaderElect"]:
                taken = lambda: _lease_exists(scenario) and lease_holder(scenario) not in ("", before)  # noqa: E731
                scenario.wait_for("pair a to take the lease", taken, timeout=60)
            standby = start_pair(launcher, "b")
            yield Ha(leader, standby)
        finally:
            launcher.stop()


def _lease_exists(sc: Scenario) -> bool:
    try:
        client.CoordinationV1Api(sc.kube.api).read_namespaced_lease("kube-scheduler", "kube-system")
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


def test_the_leader_dies_mid_gang_and_the_standby_binds_every_gang_whole(scenario: Scenario,
                                                                        ha: Ha) -> None:
    sc, topo = scenario, scenario.topo
    if topo.shortfall(nodes_per_rack=2) or len(topo.racks) < 2:
        pytest.skip("needs >= 2 racks of >= 2 nodes")
    sc.watcher.grace = FAILOVER_GRACE_SECONDS
    size = topo.nodes_per_rack
    held = sc.gang("held", size, gpus=topo.gpus_per_node, required="rack", blocked=[size - 1], create=False)
    for manifest in held:
        manifest["spec"]["schedulerName"] = PROFILE
    sc.create(held[:1])
    sc.create(held[1:])
    sc.wait_for("the leader's Quorum holding the gang at bind",
                lambda: (ha.leader.quorum.gangs(sc.ns).get(f"{sc.ns}/held") or {}).get("held"), timeout=60)
    assert ha.standby.quorum.ready(), "the standby's Quorum reports ready"
    standby_calls = {verb: verb_calls(ha.standby.quorum, verb) for verb in ("filter", "bind")}
    assert standby_calls == {"filter": 0, "bind": 0}, f"the standby answered verbs: {standby_calls}"

    for proc in ha.leader.processes:
        proc.kill()
    killed = time.monotonic()
    sc.kube.admit_blocked()
    second = sc.gang("after", size, gpus=topo.gpus_per_node, required="rack", create=False)
    for manifest in second:
        manifest["spec"]["schedulerName"] = PROFILE
    sc.create(second)
    names = [m["metadata"]["name"] for m in held + second]
    placed = sc.wait_bound(names, timeout=120, what="both gangs bound by the standby")
    recovered = round(time.monotonic() - killed, 1)
    for gang in (held, second):
        assert len({topo.rack_of(placed[m["metadata"]["name"]]) for m in gang}) == 1
    assert verb_calls(ha.standby.quorum, "bind") >= 2 * size, "the standby's Quorum bound them"
    sc.record("failover", {"all_bound_after_kill_seconds": recovered,
                           "lease": {k: LEASE[k] for k in ("leaseDuration", "renewDeadline", "retryPeriod")},
                           "longest_partial_seconds": sc.watcher.longest_partial.get("held")})
    sc.finish()


def refuse_binding(sc: Scenario, pod: str) -> tuple[str, str]:
    """A ValidatingAdmissionPolicy (and its binding) that makes the apiserver refuse every Binding
    of ``pod`` in the test's namespace, as a webhook or a quota might: the pod's scheduler gets an
    error back, the rest of its gang binds. Returns the two objects' names for ``allow_binding``."""
    name = f"e2e-refuse-binding-{sc.ns}"[:63]
    api = client.AdmissionregistrationV1Api(sc.kube.api)
    api.create_validating_admission_policy({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": {"quorum.dev/e2e": "true"}},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{
                "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                "resources": ["pods/binding"]}]},
            "validations": [{
                "expression": f"!(request.namespace == '{sc.ns}' && request.name == '{pod}')",
                "message": f"the e2e suite refuses every binding of {sc.ns}/{pod} for now"}],
        }}, _request_timeout=30)
    api.create_validating_admission_policy_binding({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": {"quorum.dev/e2e": "true"}},
        "spec": {"policyName": name, "validationActions": ["Deny"]}}, _request_timeout=30)
    return name, name


def allow_binding(sc: Scenario, names: tuple[str, str]) -> None:
    api = client.AdmissionregistrationV1Api(sc.kube.api)
    for delete, name in ((api.delete_validating_admission_policy_binding, names[1]),
                         (api.delete_validating_admission_policy, names[0])):
        try:
            delete(name, _request_timeout=30)
        except ApiException as exc:
            if exc.status != 404:
                raise


def test_the_leader_dies_between_a_gangs_bindings_and_the_standby_completes_it(scenario: Scenario,
                                                                              ha: Ha) -> None:
    """Some of a gang's bindings reached the apiserver, the last was refused, then the leader pair
    died: the standby binds the missing member into the same rack, binds none of the others again,
    and the gang is whole within the grace."""
    sc, topo = scenario, scenario.topo
    if topo.shortfall(nodes_per_rack=2) or len(topo.racks) < 2:
        pytest.skip("needs >= 2 racks of >= 2 nodes")
    sc.watcher.grace = FAILOVER_GRACE_SECONDS
    size = topo.nodes_per_rack
    gang = sc.gang("mid", size, gpus=topo.gpus_per_node, required="rack", create=False)
    for manifest in gang:
        manifest["spec"]["schedulerName"] = PROFILE
    names = [m["metadata"]["name"] for m in gang]
    last = names[-1]
    policy = refuse_binding(sc, last)
    try:
        time.sleep(2.0)  # the policy reaches the apiserver's admission through its own informer
        sc.create(gang)

        def first_bound_last_refused() -> dict[str, str] | None:
            placed = sc.placement(names)
            bound = {n: node for n, node in placed.items() if node}
            return bound if len(bound) == size - 1 and not placed[last] else None

        bound_before = sc.wait_for(f"{size - 1} members bound and {last}'s binding refused",
                                   first_bound_last_refused, timeout=90)
        time.sleep(1.0)
        assert first_bound_last_refused() == bound_before, "the refused member stayed unbound"
        standby_binds = verb_calls(ha.standby.quorum, "bind")
        assert standby_binds == 0, f"the standby answered {standby_binds} bind calls before the kill"
        for proc in ha.leader.processes:
            proc.kill()
        killed = time.monotonic()
    finally:
        allow_binding(sc, policy)

    placed = sc.wait_bound(names, timeout=120, what="the gang completed by the standby")
    completed = round(time.monotonic() - killed, 1)
    assert len({topo.rack_of(node) for node in placed.values()}) == 1, f"one rack: {placed}"
    kept = {n: placed[n] for n in bound_before}
    assert kept == bound_before, "members bound before the kill kept their nodes"
    binds = verb_calls(ha.standby.quorum, "bind")
    assert binds >= 1, "the standby's Quorum bound the missing member"
    sc.record("failover_mid_bind", {"completed_after_kill_seconds": completed, "standby_bind_calls": binds,
                                    "longest_partial_seconds": sc.watcher.longest_partial.get("mid")})
    sc.finish()
