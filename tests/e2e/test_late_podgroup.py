"""Pods created before their PodGroup: kube-scheduler rejects them while the group is missing and
sees no cluster event when it appears (its own gang plugins are off in Quorum's profile), so Quorum
wakes them. Native gang scheduling binds such pods as soon as the group exists; so must Quorum."""

from __future__ import annotations

import time

import pytest

from .scenario import Scenario

pytestmark = pytest.mark.e2e

# Far below the scheduler's own retry of rejected pods (which took about 23 s before Quorum woke
# them), far above what the wake-up takes.
BIND_WITHIN_SECONDS = 15


@pytest.mark.parametrize("policy", ["gang", "basic"])
def test_pods_created_before_their_podgroup_bind_once_it_appears(scenario: Scenario, policy: str) -> None:
    sc = scenario
    size = 4
    group = f"late-{policy}"
    names = sc.create([sc.pod(f"{group}-{i}", gpus=1, pod_group=group) for i in range(size)])
    sc.assert_unbound_for(names, 3, what="pods whose PodGroup does not exist yet")
    reason = " ".join(sc.scheduling_messages(names[0]))
    assert "waiting for its PodGroup" in reason, reason
    created = time.monotonic()
    sc.kube.create_podgroup(sc.ns, group, size if policy == "gang" else None)
    sc.wait_bound(names, timeout=BIND_WITHIN_SECONDS,
                  what=f"all {size} pods bound after their PodGroup appeared")
    sc.record("bound_after_podgroup_seconds", round(time.monotonic() - created, 2))
    sc.finish()
