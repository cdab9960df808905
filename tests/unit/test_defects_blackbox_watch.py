"""Black-box regression tests for issue 11's defects seen through the watches: hostile objects,
readiness, restarts and nudges.

Like ``test_defects_blackbox.py``, these drive Quorum only from the outside, so they run against
the code from before the redesign too (``hack/regressions-on-old-code.sh``). A scenario that may
keep the event loop busy in C code runs in a forked process: only from there can a hang be
detected and stopped.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from .blackbox import (
    PODGROUPS,
    PODS,
    FakeApiserver,
    eventually,
    extender_args,
    gang_pod,
    make_pod,
    make_podgroup,
    run_isolated,
    running_quorum,
)

ALL = [f"b{b}-r{r}-n{n}" for b in range(2) for r in range(2) for n in range(2)]
# A generous bound on scenarios that take well under a second: only a hang detector.
HANG_SECONDS = 10.0


def hog(resource: str) -> dict[str, Any]:
    """A pod the apiserver accepts from anyone who may create pods, in a namespace of its own."""
    pod = make_pod("hog", "uid-hog", namespace="other")
    pod["spec"]["containers"][0]["resources"]["requests"][resource] = "1e999999"
    return pod


def gang(name: str, size: int, **kw: Any) -> list[dict[str, Any]]:
    """``size`` annotation members ``<name>0..`` of gang ``name`` with min-count ``size``."""
    return [gang_pod(f"{name}{i}", gang=name, min_count=size, **kw) for i in range(size)]


# --------------------------------------------------------------------------- hostile objects


async def test_a_pod_with_a_huge_cpu_request_does_not_end_the_pod_watch(
        caplog: pytest.LogCaptureFixture) -> None:
    """cpu "1e999999": the pod watch dies for good and nothing is logged, so a new gang is rejected
    for ever with "1/2 pods exist"."""
    async with running_quorum() as quorum:
        quorum.api.add(PODS, hog("cpu"))
        members = gang("w", 2)
        quorum.api.add(PODS, *members)
        await quorum.settle()
        assert (await quorum.filter(members[0], ALL))["NodeNames"]
        assert quorum.api.watching(PODS)
    assert any("other/hog" in r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING)


async def _gang_placed_with_a_memory_hog_in_the_cluster() -> list[str]:
    async with running_quorum() as quorum:
        quorum.api.add(PODS, hog("memory"))
        members = gang("w", 2)
        quorum.api.add(PODS, *members)
        await quorum.settle()
        names: list[str] = (await quorum.filter(members[0], ALL))["NodeNames"]
        return names


def test_a_pod_with_a_huge_memory_request_does_not_freeze_quorum() -> None:
    """memory "1e999999": Quorum freezes for about 25 s on every evaluation."""
    assert run_isolated(_gang_placed_with_a_memory_hog_in_the_cluster, HANG_SECONDS)


async def _filter_a_pod_requesting_huge_memory() -> int:
    async with running_quorum() as quorum:
        pod = hog("memory")  # not in the watch: read from the request
        status, _ = await quorum.post("/filter", extender_args(pod, names=ALL))
        return status


def test_a_request_cannot_block_the_event_loop_for_seconds() -> None:
    """Requests that block the event loop for seconds (hangs)."""
    assert run_isolated(_filter_a_pod_requesting_huge_memory, HANG_SECONDS) in (200, 400)


async def test_a_restart_with_a_hostile_pod_present_becomes_ready() -> None:
    """After a restart /readyz stays 503 until the pod is force-deleted."""
    api = FakeApiserver()
    members = gang("w", 2)
    api.objects[PODS] = [hog("cpu"), *members]
    async with running_quorum(api, wait_ready=False) as quorum:
        await quorum.until_ready()
        assert (await quorum.filter(members[0], ALL))["NodeNames"]


# --------------------------------------------------------------------------- readiness


async def test_readyz_is_never_200_while_a_watch_is_down() -> None:
    """/readyz still answers 200 while the pod watch is dead."""
    async with running_quorum() as quorum:
        quorum.api.break_watch(PODS, RuntimeError("watch stream ended unexpectedly"))
        lies = 0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 1.0
        while loop.time() < deadline:
            if await quorum.readyz() == 200 and not quorum.api.watching(PODS):
                lies += 1
            await asyncio.sleep(0.01)
        assert lies == 0, f"/readyz answered 200 {lies} times while no pod watch was open"
        await quorum.until_ready()
        assert quorum.api.watching(PODS)


# --------------------------------------------------------------------------- nudges


async def test_waiting_gangs_are_nudged_once_the_caches_have_synced_after_a_restart() -> None:
    """Gangs the previous instance rejected get no nudge after a restart (bound after ~139 s)."""
    api = FakeApiserver()
    members = gang("w", 2)
    api.objects[PODS] = members
    async with running_quorum(api) as quorum:
        await eventually(lambda: bool({"w0", "w1"} & set(quorum.api.requeued)),
                         "a member of the waiting gang is nudged")


async def _pods_before_their_podgroup(policy: int | None) -> None:
    """Pods rejected while their PodGroup is missing are woken when it appears, then placed."""
    async with running_quorum() as quorum:
        pods = [gang_pod(f"s{i}", podgroup="svc", gpus=8) for i in range(3)]
        quorum.api.add(PODS, *pods)
        await quorum.settle()
        for member in pods:  # kube-scheduler tries each one, and parks it
            rejected = await quorum.filter(member, ALL)
            assert "waiting for its PodGroup" in rejected["FailedAndUnresolvableNodes"][ALL[0]]
        quorum.api.add(PODGROUPS, make_podgroup("svc", policy))
        await eventually(lambda: {"s0", "s1", "s2"} <= set(quorum.api.requeued),
                         "every pod rejected for the missing PodGroup is nudged")
        assert (await quorum.filter(pods[0], ALL))["NodeNames"]


async def test_a_basic_podgroup_created_after_its_pods_wakes_them() -> None:
    """A basic PodGroup created after its pods never completes (2 of 3 unbound after 90 s)."""
    await _pods_before_their_podgroup(None)


async def test_a_gang_podgroup_created_after_its_pods_wakes_them() -> None:
    """A gang whose PodGroup is created after its pods binds only 23 s after it appears."""
    await _pods_before_their_podgroup(3)
