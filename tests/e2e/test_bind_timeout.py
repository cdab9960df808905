"""A gang held at bind that never reaches its quorum: the timeout answers every held bind, releases
the whole reservation and backs the gang off, doubling, before it is tried again.

One member can never pass kube-scheduler's own filter (see ``pod_manifest``'s ``blocked``), so its
mates reach bind and are held there. The gang is a coscheduling PodGroup whose
``scheduleTimeoutSeconds`` shortens the bind timeout (30 s in the suite's configuration) to a few
seconds; the suite's backoff starts at 5 s (``gang.backoffBaseSeconds``).
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from .cluster import ADMIT_LABEL, ADMIT_VALUE
from .conventions_support import COSCHEDULING, create_object, member
from .scenario import Scenario

pytestmark = pytest.mark.e2e

TIMEOUTS = "quorum_reservation_timeouts_total"
RELEASES = "quorum_reservation_releases_total"
BIND_TIMEOUT = 4  # the PodGroup's scheduleTimeoutSeconds
BACKOFF_BASE = 5  # tests/e2e/quorum-e2e.yaml gang.backoffBaseSeconds


def in_phase(sc: Scenario, gang: str, phase: str, held: int | None = None) -> dict[str, Any] | None:
    entry = sc.gang_debug(gang)
    if entry and entry.get("phase") == phase and (held is None or len(entry.get("held") or []) == held):
        return entry
    return None


def test_a_held_gang_times_out_releases_everything_and_backs_off_doubling(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    size, gpus = 4, max(1, topo.gpus_per_node // 2)
    create_object(sc, COSCHEDULING, "held", {"minMember": size, "scheduleTimeoutSeconds": BIND_TIMEOUT})
    label = {"scheduling.x-k8s.io/pod-group": "held"}
    blocked = member(sc, "held", size - 1, size, gpus=gpus, labels=label,
                     spec={"nodeSelector": {ADMIT_LABEL: ADMIT_VALUE}})
    mates = [member(sc, "held", i, size, gpus=gpus, labels=label) for i in range(size - 1)]
    timeouts_before = sc.quorum.metric(TIMEOUTS)
    releases_before = sc.quorum.metric(RELEASES, reason="timeout")
    sc.create([blocked])  # first: the gang's quorum must exist when the last mate is filtered
    names = sc.create(mates)

    # 1. Held at bind, the blocked member's node reserved too.
    entry = sc.wait_for(f"{size - 1} members of 'held' held at bind",
                        lambda: in_phase(sc, "held", "Binding", held=size - 1), timeout=30, interval=0.1)
    held_at = time.monotonic()
    assert f"held-{size - 1}" in (entry.get("reservation") or {}), (
        f"the blocked member must be reserved: {entry}")

    # 2. The timeout: no member bound, every held bind answered, the reservation released, backoff.
    first = sc.wait_for("the bind timeout to release 'held' into Backoff",
                        lambda: in_phase(sc, "held", "Backoff"), timeout=BIND_TIMEOUT + 10, interval=0.1)
    released_at = time.monotonic()
    sc.record("held_to_backoff_seconds", round(released_at - held_at, 2))
    assert not first.get("held") and not first.get("reservation") and not first.get("bindsInFlight"), (
        f"the timeout must answer every held bind and release the whole reservation: {first}")
    assert f"quorum not reached within {BIND_TIMEOUT:g}s" in str(first.get("reason")), first
    assert 0 < float(first.get("backoffSeconds") or 0) <= BACKOFF_BASE, first
    assert sc.quorum.metric(TIMEOUTS) == timeouts_before + 1
    assert sc.quorum.metric(RELEASES, reason="timeout") == releases_before + 1
    elsewhere = sum(len(g.get("reservation") or {}) for key, g in sc.quorum.gangs().items()
                    if not key.startswith(f"{sc.ns}/"))
    reserved = sc.quorum.metric("quorum_reserved_pods")
    assert reserved == elsewhere, f"quorum_reserved_pods={reserved} after the timeout ({elsewhere} elsewhere)"
    messages = sc.wait_for(
        "the held binds answered with the timeout reason (FailedScheduling)",
        lambda: [m for n in names for m in sc.scheduling_messages(n) if "quorum not reached" in m],
        timeout=15)
    sc.record("held_bind_answer", messages[-1][:300])

    # 3. Nothing is tried during the backoff; afterwards the gang is held again, then backs off for
    # twice as long.
    again = sc.wait_for("'held' held at bind again after its backoff",
                        lambda: in_phase(sc, "held", "Binding", held=size - 1),
                        timeout=BACKOFF_BASE + 20, interval=0.1)
    delay = time.monotonic() - released_at
    sc.record("backoff_before_retry_seconds", round(delay, 2))
    assert delay >= BACKOFF_BASE - 1, f"'held' was tried again {delay:.1f}s after its release: {again}"
    second = sc.wait_for("the second timeout", lambda: in_phase(sc, "held", "Backoff"),
                         timeout=BIND_TIMEOUT + 10, interval=0.1)
    assert BACKOFF_BASE < float(second.get("backoffSeconds") or 0) <= 2 * BACKOFF_BASE, (
        f"the second backoff must double the first ({BACKOFF_BASE}s): {second}")
    assert int(second.get("failures") or 0) == 2, second
    sc.assert_unbound_for([*names, f"held-{size - 1}"], 1, what="members of the timed-out gang")

    # 4. Once the blocked member may schedule, the gang binds whole.
    sc.kube.admit_blocked()
    sc.wait_bound([*names, f"held-{size - 1}"], timeout=60, what="'held' bound once its member is admitted")
    sc.finish()
