"""A 64-member gang binds whole inside one block; the bind skew is reported, never asserted."""

from __future__ import annotations

import json

import pytest

from .scenario import Scenario

pytestmark = pytest.mark.e2e


def test_gang_of_64_binds_whole_and_reports_bind_skew(scenario: Scenario) -> None:
    sc, topo = scenario, scenario.topo
    block_gpus = topo.racks_per_block * topo.rack_gpus
    size = min(64, block_gpus)
    names = [m["metadata"]["name"] for m in sc.gang("wide64", size, gpus=1, required="block")]
    placement = sc.wait_bound(names, timeout=120, what=f"all {size} members bound")
    _, blocks = sc.racks_and_blocks(placement)
    assert len(blocks) == 1, f"required block: {size} members must share one block, got {sorted(blocks)}"
    skew = sc.bind_skew(names)
    sc.record("bind_skew", skew)
    print(f"\n{size}-pod gang bind skew: {json.dumps(skew)}")
    sc.finish()
