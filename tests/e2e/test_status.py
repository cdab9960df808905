"""``quorum-extender status`` against the real cluster: from Quorum's /debug/gangs, and, with Quorum
unreachable, from the PodGroups and Quorum's Events in the apiserver."""

from __future__ import annotations

import io

import pytest

from extender.adapters import status

from .lifecycle_support import live_bound, start_gang
from .scenario import Scenario

pytestmark = pytest.mark.e2e

UNREACHABLE = "http://127.0.0.1:9"  # nothing listens there


def test_status_reads_quorum_and_falls_back_to_podgroups_and_events(scenario: Scenario) -> None:
    sc = scenario
    size = 4
    start_gang(sc, "job", size, sc.topo.gpus_per_node, rack=True)
    sc.wait_for("the gang bound", lambda: live_bound(sc, "job", size), timeout=60)

    live = io.StringIO()
    assert status.main(["--url", sc.settings.quorum_url, "-n", sc.ns], live) == 0
    row = next(line for line in live.getvalue().splitlines() if line.startswith(f"{sc.ns}/job"))
    assert "Bound" in row and f"{size}/{size} min {size}" in row, live.getvalue()

    def fallback() -> str:
        out = io.StringIO()
        rc = status.main(["--url", UNREACHABLE, "--timeout", "2", "-n", sc.ns,
                          "--kubeconfig", sc.settings.kubeconfig], out)
        return out.getvalue() if rc == 0 else ""

    text = sc.wait_for("the PodGroup's Scheduled condition and Quorum's Event",
                       lambda: (t := fallback()) and "Scheduled" in t and ": gang" in t and t, timeout=30)
    assert text.startswith("# cannot read"), text
    row = next(line for line in text.splitlines() if line.startswith(f"{sc.ns}/job"))
    assert f"{size}/{size} min {size}" in row, text
    quiet = io.StringIO()
    assert status.main(["--url", UNREACHABLE, "--timeout", "2", "--no-fallback"], quiet) == 1
    sc.finish()
