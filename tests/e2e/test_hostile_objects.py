"""Pods with absurd quantities, in another namespace, change nothing for everyone else.

The apiserver accepts and stores ``cpu: "1e999999"`` and ``memory: "1e999999"`` in a pod's
requests. Quorum caches every pod, so both come through its watch (one through the Quorum profile,
which also sends it to /filter and /bind, one through the default scheduler). Quorum must clamp
them (they never fit), say which pods they are in its log and metrics, stay ready and quick, keep
placing gangs, and do all of that again when it restarts with the pods present.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from .cluster import E2E_LABEL, Quorum, pod_manifest
from .conftest import cleanup_namespace
from .process import LocalProcess
from .scenario import Scenario

pytestmark = pytest.mark.e2e

REJECTED = "quorum_objects_rejected_total"


def hostile_pods(sc: Scenario) -> dict[str, dict[str, Any]]:
    """A pod asking for 1e999999 cpu (Quorum's profile) and one asking for 1e999999 bytes (default)."""
    cpu = pod_manifest(sc.settings, "hog-cpu", gpus=0, cpu="1e999999", role="hostile")
    memory = pod_manifest(sc.settings, "hog-memory", gpus=0, cpu="100m", role="hostile")
    memory["spec"]["containers"][0]["resources"]["requests"]["memory"] = "1e999999"
    memory["spec"]["schedulerName"] = "default-scheduler"
    return {"hog-cpu": cpu, "hog-memory": memory}


def log_lines_naming(log: Path, offset: int, names: list[str]) -> dict[str, list[str]]:
    """Lines written after ``offset`` that name each object, by object."""
    with log.open("rb") as f:
        f.seek(offset)
        text = f.read().decode(errors="replace")
    return {name: [line for line in text.splitlines() if name in line] for name in names}


def beyond_capacity(quorum: Quorum) -> float:
    return quorum.metric(REJECTED, kind="pods", reason="beyond-capacity")


def assert_ready_and_quick(sc: Scenario, checks: int = 5) -> None:
    """/readyz answers 200 within its 2 s timeout, several times over (a frozen Quorum cannot)."""
    for _ in range(checks):
        started = time.monotonic()
        if not sc.quorum.ready():
            sc.fail(f"Quorum not ready (or slower than 2 s) after {time.monotonic() - started:.2f}s")
        time.sleep(0.2)


def run_gang(sc: Scenario, name: str) -> None:
    """A small gang with a required rack binds whole, in one rack."""
    per_pod = max(1, sc.topo.gpus_per_node // 2)
    size = max(2, sc.topo.rack_gpus // per_pod // 2)
    names = [m["metadata"]["name"] for m in sc.gang(name, size, gpus=per_pod, required="rack")]
    placement = sc.wait_bound(names, timeout=60, what=f"gang {name} bound")
    racks, _ = sc.racks_and_blocks(placement)
    assert len(racks) == 1, f"gang {name} (required rack) spans racks {sorted(racks)}"


def test_pods_with_absurd_quantities_do_not_stop_quorum(scenario: Scenario) -> None:
    sc = scenario
    process = LocalProcess.from_pid_file(sc.settings.quorum_pid_file, must_contain="extender")
    if isinstance(process, str):
        pytest.skip(process)
    if process.log_path is None:
        pytest.skip("Quorum's log is not a file this test can read")
    if sc.topo.shortfall(nodes_per_rack=2):
        pytest.skip(sc.topo.shortfall(nodes_per_rack=2) or "")
    log = Path(process.log_path)
    hostile_ns = f"{sc.ns}-hostile"
    sc.kube.create_namespace(hostile_ns, {E2E_LABEL: "true"})
    names = [f"{hostile_ns}/{name}" for name in ("hog-cpu", "hog-memory")]
    try:
        offset, counted = log.stat().st_size, beyond_capacity(sc.quorum)
        for manifest in hostile_pods(sc).values():
            sc.kube.create_pod(hostile_ns, manifest)
        sc.wait_for("both hostile pods counted as beyond capacity",
                    lambda: beyond_capacity(sc.quorum) >= counted + 2, timeout=20)
        lines = log_lines_naming(log, offset, names)
        assert all(lines.values()), f"Quorum's log does not name every hostile pod: {lines}"
        assert_ready_and_quick(sc)
        run_gang(sc, "before")

        process.kill()
        offset = log.stat().st_size
        process.restart()
        sc.wait_for("restarted Quorum ready (/readyz)", sc.quorum.ready, timeout=60, interval=0.2)
        sc.wait_for("hostile pods counted again after the restart",
                    lambda: beyond_capacity(sc.quorum) >= 2, timeout=20)
        lines = log_lines_naming(log, offset, names)
        assert all(lines.values()), f"after a restart, the log does not name every hostile pod: {lines}"
        assert_ready_and_quick(sc)
        run_gang(sc, "after")
        sc.record("hostile_pods_logged", {name: len(found) for name, found in lines.items()})
        sc.finish()
    finally:
        problem = cleanup_namespace(sc.kube, hostile_ns)
    assert not problem, problem
