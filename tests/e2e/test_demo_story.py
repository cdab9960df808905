"""The demo's story, as ``hack/demo.sh`` tells it, checked: the example gangs bind where they should,
the 24-node sweep binds no pod while it does not fit, then all 24 once the allreduce gang finishes.

``hack/demo.py`` runs as a user runs it (its own process, the cluster's kubeconfig) in the test's
namespace; it exits non-zero when the sweep binds part of itself or does not bind whole in time,
and the suite's watcher checks that no gang is ever partly bound meanwhile.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from .cluster import REPO_ROOT
from .scenario import Scenario

pytestmark = pytest.mark.e2e


def test_the_demo_sweep_binds_nothing_then_everything_when_a_rack_frees(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    why = topo.shortfall(blocks=2, racks_per_block=4, nodes_per_rack=4, gpus_per_node=8)
    if why or len(topo.nodes) != 32:
        pytest.skip(f"the demo is written for the default 32-node cluster: {why or len(topo.nodes)} nodes")
    env = dict(os.environ, KUBECONFIG=sc.settings.kubeconfig)
    done = subprocess.run(
        [sys.executable, str(REPO_ROOT / "hack" / "demo.py"), "--namespace", sc.ns, "--existing-namespace",
         "--quorum-url", sc.settings.quorum_url],
        env=env, capture_output=True, text=True, timeout=600, check=False)
    sc.record("demo_output", done.stdout[-1500:])
    assert done.returncode == 0, f"hack/demo.py failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    assert "sweep: 0 pods bound" in done.stdout, done.stdout
    assert "sweep: all 24 pods bound" in done.stdout, done.stdout
    sc.finish()
