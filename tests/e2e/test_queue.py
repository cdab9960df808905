"""The gang queue through the real kube-scheduler: starvation, priority order and backfill.

- (a) A gang that needs a whole block waits while a stream of small gangs keeps arriving and
  finishing in that block. Without claims it starves: the block is never empty at once. With claims
  the block is earmarked ``claimAfterSeconds`` after the gang started waiting, the small gangs are
  kept off it, and the gang binds once the work already there has finished. Both runs restart
  Quorum with the setting they need (``reconfigure``).
- (b) A low- and a higher-priority gang both wait; when capacity frees for one of them, the
  higher-priority one binds first, although the lower one arrived first and held the claim.
- (c) While a claim holds a block, a small gang and a plain pod that fit elsewhere bind at once,
  outside it; the claimed block then fills with the gang it was kept for.

Priorities come from PriorityClasses. Pinned blockers (``spec.nodeName``) stand for running work.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from .cluster import ANN_GANG
from .lifecycle_support import HIGH, LOW, MID, kwok_annotations, with_priority
from .reconfigure import Reconfigurer
from .scenario import Scenario, node_of

pytestmark = pytest.mark.e2e

CLAIM_AFTER_SECONDS = 5.0  # starvation.claimAfterSeconds for the starvation runs
STREAM_RUN_SECONDS = 6  # how long each small gang's pods run (kwok complete-after)
STREAM_GANG_SIZE = 2
STARVATION_WATCH_SECONDS = 25.0  # the no-claims watch: twice what the with-claims run takes (~12 s)
SLACK_SECONDS = 30.0  # scheduling latency allowed on top of the bound


def quorum_gang(sc: Scenario, name: str) -> dict[str, object]:
    return sc.gang_debug(name) or {}


def block_nodes(sc: Scenario, block: str) -> list[str]:
    return [n for rack in sc.topo.blocks[block] for n in sc.topo.racks[rack]]


def claim_holder(sc: Scenario) -> str | None:
    claim = sc.quorum.debug().get("claim") or {}
    return str(claim["gang"]).split("/", 1)[1] if claim.get("gang") else None


# ------------------------------------------------------------------------------ (a) starvation
@dataclass
class SmallGangStream:
    """Keeps up to ``limit`` small gangs' pods alive, creating a new gang whenever one finishes,
    staggered so that their run times never end together (the block is never empty at once)."""

    sc: Scenario
    limit: int
    gpus: int
    created: int = 0
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="small-gang-stream", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def alive(self) -> int:
        pods = self.sc.kube.pods(self.sc.ns, label_selector="e2e.quorum.dev/role=stream")
        return sum(1 for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                if self.alive() + STREAM_GANG_SIZE <= self.limit:
                    self._create_one()
            except Exception as exc:  # reported by the test
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
            # One new gang per second at most: the first wave's run times are spread out.
            self._stop.wait(1.0)

    def _create_one(self) -> None:
        name = f"s{self.created}"
        self.created += 1
        members = self.sc.gang(name, STREAM_GANG_SIZE, gpus=self.gpus, create=False)
        for manifest in members:
            manifest["metadata"]["labels"]["e2e.quorum.dev/role"] = "stream"
            manifest["metadata"]["annotations"].update(
                kwok_annotations(complete_after=f"{STREAM_RUN_SECONDS}s"))
        self.sc.create(members)

    def bound_gangs(self) -> set[str]:
        pods = self.sc.kube.pods(self.sc.ns, label_selector="e2e.quorum.dev/role=stream")
        return {p["metadata"]["annotations"][ANN_GANG] for p in pods if node_of(p)}


@pytest.fixture
def stream_of(scenario: Scenario) -> Iterator[list[SmallGangStream]]:
    streams: list[SmallGangStream] = []
    yield streams
    for stream in streams:
        stream.stop()


@pytest.mark.parametrize("claims", [False, True], ids=["without-claims", "with-claims"])
def test_a_block_sized_gang_behind_a_stream_of_small_gangs(reconfigure: Reconfigurer, scenario: Scenario,
                                                           stream_of: list[SmallGangStream],
                                                           claims: bool) -> None:
    """Acceptance (a). The bound with claims: ``claimAfterSeconds`` (5 s here) plus the longest
    remaining run time of the work in the claimed block (6 s), plus scheduling latency."""
    sc, topo = scenario, scenario.topo
    blocks = sorted(topo.blocks)
    if len(blocks) < 2 or topo.shortfall(nodes_per_rack=2):
        pytest.skip("needs >= 2 blocks")
    reconfigure.apply({"starvation": {"enabled": claims, "claimAfterSeconds": CLAIM_AFTER_SECONDS},
                       "preemption": {"enabled": False}})
    gpn = topo.gpus_per_node
    target = block_nodes(sc, blocks[0])
    sc.blockers([n for b in blocks[1:] for n in block_nodes(sc, b)], gpus=gpn)  # only block 0 is usable
    stream = SmallGangStream(sc, limit=len(target) - 4, gpus=gpn)  # 4 nodes stay free for the stream
    stream_of.append(stream)
    stream.start()
    sc.wait_for("the stream's first wave running", lambda: len(stream.bound_gangs()) >= 4, timeout=60)

    claims_before = sc.quorum.metric("quorum_claims_total", event="made")
    big = sc.gang("big", len(target), gpus=gpn, required="block")
    names = [m["metadata"]["name"] for m in big]
    started, bound_before = time.monotonic(), len(stream.bound_gangs())
    if not claims:
        sc.assert_unbound_for(names, STARVATION_WATCH_SECONDS, what="the block-sized gang (no claims)")
        served = len(stream.bound_gangs()) - bound_before
        assert served >= 5, f"the stream must keep binding meanwhile (it bound {served} gangs)"
        assert claim_holder(sc) is None
        sc.record("starved", {"watched_seconds": STARVATION_WATCH_SECONDS,
                              "small_gangs_bound_meanwhile": served})
    else:
        bound = CLAIM_AFTER_SECONDS + STREAM_RUN_SECONDS + SLACK_SECONDS
        placed = sc.wait_bound(names, timeout=bound, what="the block-sized gang, with claims")
        waited = round(time.monotonic() - started, 1)
        assert {topo.block_of(n) for n in placed.values()} == {blocks[0]}
        assert sc.quorum.metric("quorum_claims_total", event="made") > claims_before
        sc.record("claimed", {"bound_after_seconds": waited, "bound_seconds": bound,
                              "small_gangs_bound_meanwhile": len(stream.bound_gangs()) - bound_before})
    stream.stop()
    assert not stream.errors, stream.errors
    sc.finish()


# ------------------------------------------------------------------------------ (b) priority
def test_the_higher_priority_gang_binds_first_when_capacity_frees_for_one(
        scenario: Scenario, priorities: dict[str, int]) -> None:
    """Acceptance (b). Every rack is full at priority 1000 except one node short in rack 0, so
    rack 0 is where a rack-sized gang could fit soonest. The low gang (100) arrives first and
    claims it; the mid gang (500) arrives, goes first in the queue and takes the claim over. When
    rack 0's blocker goes, the mid gang binds there; the low gang binds only when a second rack
    frees."""
    sc, topo = scenario, scenario.topo
    racks = list(topo.racks)
    if len(racks) < 2 or topo.shortfall(nodes_per_rack=2):
        pytest.skip("needs >= 2 racks of >= 2 nodes")
    gpn, size = topo.gpus_per_node, len(topo.racks[racks[0]])
    first_rack = topo.racks[racks[0]]
    (gate,) = sc.blockers(first_rack[:1], gpus=gpn, prefix="gate", priority_class=HIGH)
    second = sc.blockers(topo.racks[racks[1]], gpus=gpn, prefix="second", priority_class=HIGH)
    sc.blockers([n for r in racks[2:] for n in topo.racks[r]], gpus=gpn, prefix="keep", priority_class=HIGH)

    low = sc.create(with_priority(sc.gang("low", size, gpus=gpn, required="rack", create=False), LOW))
    sc.wait_for("the low gang to claim rack 0", lambda: claim_holder(sc) == "low", timeout=60)
    mid = sc.create(with_priority(sc.gang("mid", size, gpus=gpn, required="rack", create=False), MID))
    sc.wait_for("the mid gang to take the claim over", lambda: claim_holder(sc) == "mid", timeout=60)
    assert quorum_gang(sc, "mid").get("queuePosition") == 1
    assert quorum_gang(sc, "low").get("queuePosition") == 2

    sc.delete([gate])
    placed = sc.wait_bound(mid, timeout=60, what="the mid gang in rack 0")
    assert set(placed.values()) == set(first_rack)
    sc.assert_unbound_for(low, 5, what="the low gang while no second rack is free")
    sc.delete(second)
    low_placed = sc.wait_bound(low, timeout=60, what="the low gang once rack 1 frees")
    assert set(low_placed.values()) == set(topo.racks[racks[1]])
    sc.finish()


# ------------------------------------------------------------------------------ (c) backfill
def test_work_that_fits_outside_a_claim_binds_at_once(scenario: Scenario, priorities: dict[str, int]) -> None:
    """Acceptance (c). One node of block 0 and two of block 1 run work at priority 1000, so a
    block-sized gang (priority 100) fits nowhere and claims block 0 at once (the only waiting gang,
    with a priority). A small gang and a plain pod of priority 0 bind in block 1 at once, never on
    block 0's free nodes; when block 0's blocker goes, the claimed block fills with the big gang."""
    sc, topo = scenario, scenario.topo
    blocks = sorted(topo.blocks)
    if len(blocks) < 2 or topo.shortfall(nodes_per_rack=2):
        pytest.skip("needs >= 2 blocks")
    gpn = topo.gpus_per_node
    claimed, other = block_nodes(sc, blocks[0]), block_nodes(sc, blocks[1])
    (gate,) = sc.blockers(claimed[:1], gpus=gpn, prefix="gate", priority_class=HIGH)
    sc.blockers(other[:2], gpus=gpn, prefix="keep", priority_class=HIGH)

    members = sc.gang("big", len(claimed), gpus=gpn, required="block", create=False)
    big = sc.create(with_priority(members, LOW))
    sc.wait_for("the big gang to claim block 0", lambda: claim_holder(sc) == "big", timeout=60)

    started = time.monotonic()
    small = [m["metadata"]["name"] for m in sc.gang("small", 2, gpus=gpn)]
    plain = sc.create([sc.pod("plain", gpus=1)])
    placed = sc.wait_bound(small + plain, timeout=30, what="backfill outside the claim")
    backfill_seconds = round(time.monotonic() - started, 1)
    assert {topo.block_of(n) for n in placed.values()} == {blocks[1]}, placed
    assert not any(sc.placement(big).values())
    assert quorum_gang(sc, "big").get("claim"), "the claim still stands"

    sc.delete([gate])
    big_placed = sc.wait_bound(big, timeout=60, what="the big gang in its claimed block")
    assert {topo.block_of(n) for n in big_placed.values()} == {blocks[0]}
    sc.wait_for("the claim released", lambda: claim_holder(sc) is None, timeout=30)
    sc.record("backfill", {"bound_after_seconds": backfill_seconds})
    sc.finish()
