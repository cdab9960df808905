"""Quorum is SIGKILLed while gangs are being placed and bound, and restarted as it was started.

One gang has a blocked member (a node selector no node matches until the test labels the nodes),
so at the moment of the kill its other members are certainly held at
bind (their HTTP calls die with the process); the others are created together with it and are
somewhere between quorum gate, reservation and bind. Quorum keeps no state on disk: after the
restart it rebuilds everything from the apiserver. Every gang must end fully bound.

A kill can land in the middle of one gang's concurrent bind calls; finishing such a gang then waits
for the restart and the scheduler's retry backoff, so the watcher's grace covers the restart here
(the longest partial time is recorded in the results).
"""

from __future__ import annotations

import time

import pytest

from .process import LocalProcess
from .scenario import Scenario, node_of

pytestmark = pytest.mark.e2e

RESTART_GRACE_SECONDS = 45.0


def test_quorum_killed_and_restarted_mid_run_leaves_no_partial_gang(scenario: Scenario) -> None:
    sc, topo, settings = scenario, scenario.topo, scenario.settings
    process = LocalProcess.from_pid_file(settings.quorum_pid_file, must_contain="extender")
    if isinstance(process, str):
        pytest.skip(process)
    why = topo.shortfall(nodes_per_rack=2) or (None if len(topo.racks) >= 5 else "needs >= 5 racks")
    if why:
        pytest.skip(why)
    sc.watcher.grace = RESTART_GRACE_SECONDS

    per_pod = max(1, topo.gpus_per_node // 2)
    size = topo.rack_gpus // per_pod  # default cluster: 8 x 4 GPUs, one rack each
    gangs = [f"g{i}" for i in range(4)]
    manifests = {g: sc.gang(g, size, gpus=per_pod, required="rack", create=False) for g in gangs}
    manifests["held"] = sc.gang("held", 4, gpus=per_pod, required="rack", blocked=[3], create=False)
    # The blocked member first (it is never filtered, see Scenario.gang), then all gangs interleaved.
    sc.create(manifests["held"][:1])
    rest = {g: ms[1:] if g == "held" else ms for g, ms in manifests.items()}
    order = [m for batch in zip(*(ms[:3] for ms in rest.values()), strict=True) for m in batch]
    order += [m for ms in rest.values() for m in ms[3:]]
    sc.create(order)

    # Kill as soon as the held gang's members wait at bind; the others are typically mid-flight.
    sc.wait_for("gang 'held' held at bind", lambda: (sc.gang_debug("held") or {}).get("held"),
                timeout=30, interval=0.05)
    at_kill = {k.split("/", 1)[1]: {"phase": g.get("phase"), "held": len(g.get("held") or []),
                                    "bound": len(g.get("bound") or [])}
               for k, g in sc.quorum.gangs(sc.ns).items()}
    process.kill()
    killed = time.monotonic()
    bound_after_kill = bound_counts(sc)

    new_pid = process.restart()
    sc.wait_for("restarted Quorum ready (/readyz)", sc.quorum.ready, timeout=60, interval=0.2)
    ready_after = round(time.monotonic() - killed, 2)
    sc.record("restart", {"old_pid": process.pid, "new_pid": new_pid, "ready_after_seconds": ready_after,
                          "gangs_at_kill": at_kill, "bound_right_after_kill": bound_after_kill})

    sc.kube.admit_blocked()
    everyone = [m["metadata"]["name"] for ms in manifests.values() for m in ms]
    placement = sc.wait_bound(everyone, timeout=120, what="every gang bound after the restart")
    for gang, ms in manifests.items():
        racks = {topo.rack_of(placement[m["metadata"]["name"]]) for m in ms}
        assert len(racks) == 1, f"gang {gang} (required rack) spans racks {sorted(racks)} after the restart"
    sc.record("all_bound_after_kill_seconds", round(time.monotonic() - killed, 2))
    sc.finish()


def bound_counts(sc: Scenario) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in sc.pods().values():
        gang = (pod["metadata"].get("labels") or {}).get("e2e.quorum.dev/gang")
        if gang:
            counts[gang] = counts.get(gang, 0) + (1 if node_of(pod) else 0)
    return counts
