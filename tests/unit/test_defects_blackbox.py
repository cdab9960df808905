"""Black-box regression tests for the defects listed in issue 11 (the gang core's redesign).

Each test drives Quorum only from the outside (HTTP verbs and probes, watch events, the fake
apiserver's bindings and nudges, log records), so the same file runs against the code from before
the redesign: ``hack/regressions-on-old-code.sh`` shows every test failing there. One test per
defect; the docstring quotes the defect.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging

import pytest

from .blackbox import (
    HOST,
    PODS,
    bound,
    extender_args,
    gang_pod,
    load,
    make_node,
    make_pod,
    retained_bytes,
    running_quorum,
)

ALL = [f"b{b}-r{r}-n{n}" for b in range(2) for r in range(2) for n in range(2)]


def _deep(payload: bytes, depth: int) -> bytes:
    """The payload with the string "<deep>" replaced by lists nested ``depth`` levels."""
    return payload.replace(b'"<deep>"', b"[" * depth + b"]" * depth)


# --------------------------------------------------------------------------- HTTP 500s for bad input


async def test_a_node_nested_too_deep_to_encode_is_400_not_500() -> None:
    """HTTP 500s for bad input: a TypeError in wire.py (encoding a Node nested over 255 levels)."""
    async with running_quorum() as quorum:
        node = load("node_kwok.json")
        node["metadata"]["name"] = "b0-r0-n0"
        node["status"]["deep"] = "<deep>"
        body = _deep(extender_args(make_pod("p", "uid-p"), nodes=[node]), 300)
        status, doc = await quorum.post("/filter", body)
        assert status == 400, doc


async def test_deeply_nested_values_read_as_strings_are_400_not_500() -> None:
    """HTTP 500s for bad input: a RecursionError on deeply nested JSON."""
    async with running_quorum() as quorum:
        member = gang_pod("w0", gang="w", min_count=2)
        member["metadata"]["creationTimestamp"] = "<deep>"
        status, doc = await quorum.post("/filter", _deep(extender_args(member, names=ALL), 1000))
        assert status == 400, doc
        victims = load("preempt_args_meta.json")
        victims["NodeNameToMetaVictims"]["kwok-b0-r0-n0"]["Pods"][0]["UID"] = "<deep>"
        status, doc = await quorum.post("/preempt", _deep(json.dumps(victims).encode(), 1018))
        assert status == 400, doc


async def test_a_quantity_overflowing_the_arithmetic_is_400_not_500() -> None:
    """HTTP 500s for bad input: an OverflowError in resources.py on huge quantities."""
    async with running_quorum() as quorum:
        for cpu in ("1e999999999999999", "1e9999999"):
            pod = gang_pod("w0", gang="w", min_count=1, cpu=cpu)  # read from the request
            status, doc = await quorum.post("/filter", extender_args(pod, names=ALL))
            assert status in (200, 400), doc
            if status == 200:
                assert not doc["NodeNames"], doc  # beyond any node: never fits


# --------------------------------------------------------------------------- the gang core


async def test_a_pod_claimed_by_a_second_gang_never_leaves_its_first_gang_partly_bound() -> None:
    """A pod reserved by two gangs at once; deleting a member of the second: a partial gang."""
    async with running_quorum(bind_timeout=0.5) as quorum:
        a0, a1 = (gang_pod(f"a{i}", gang="a", min_count=2, gpus=8) for i in range(2))
        b1 = gang_pod("b1", gang="b", min_count=2, gpus=8)
        quorum.api.add(PODS, a1, b1)  # a0 is not in the watch yet: it is read from the request
        await quorum.settle()
        node = (await quorum.filter(a0, ALL))["NodeNames"][0]  # gang a is placed, a0 and a1 reserved
        # The same pod (same uid) is filtered again, its annotations now naming gang b.
        await quorum.filter(gang_pod("a0", gang="b", min_count=2, gpus=8), ALL)
        quorum.api.delete(PODS, b1)
        await quorum.settle()
        await quorum.bind(a0, node)  # a1 never comes to bind
        bound = {name for name, _ in quorum.api.bound}
        assert not bound or {"a0", "a1"} <= bound, f"gang a partly bound: {sorted(bound)}"


async def test_members_whose_binds_are_in_flight_are_not_repaired_as_missing() -> None:
    """Partial-gang repair counts members whose binds are in flight as missing and reserves fresh
    nodes for them; pods already bound get pointless requeue patches."""
    async with running_quorum() as quorum:
        members = [gang_pod(f"w{i}", gang="w", min_count=4, gpus=8) for i in range(4)]
        quorum.api.add(PODS, *members)
        await quorum.settle()
        await quorum.filter(members[0], ALL)
        gang = await quorum.gang("ml/w")
        assert gang is not None
        nodes = dict(gang["reservation"])
        answers = await asyncio.gather(*(quorum.bind(m, nodes[m["metadata"]["name"]]) for m in members))
        assert answers == ["", "", "", ""]
        for member in members[:2]:  # the watch has shown two of the four bindings so far
            quorum.api.modify(PODS, bound(member, nodes[member["metadata"]["name"]]))
        await quorum.settle()
        nudged = len(quorum.api.requeued)
        other = gang_pod("v0", gang="v", min_count=1, gpus=8)  # another gang is placed meanwhile
        quorum.api.add(PODS, other)
        await quorum.settle()
        await quorum.filter(other, ALL)
        await asyncio.sleep(0.05)
        gang = await quorum.gang("ml/w")
        assert gang is not None and gang["reservation"] == {}, gang
        assert quorum.api.requeued[nudged:] == []


# --------------------------------------------------------------------------- protocol


async def test_filter_names_only_nodes_of_the_request() -> None:
    """`FailedNodes` naming nodes that were not in the request."""
    async with running_quorum() as quorum:
        members = [gang_pod(f"w{i}", gang="w", min_count=2, gpus=8) for i in range(2)]
        quorum.api.add(PODS, *members)
        await quorum.settle()
        reserved = [(await quorum.filter(m, ALL))["NodeNames"][0] for m in members]
        free = next(n for n in ALL if n not in reserved)
        offered = [reserved[1], reserved[1], free]  # the other reserved node is not offered
        doc = await quorum.filter(make_pod("plain", "uid-plain", gpus=8), offered)
        named = set(doc["NodeNames"] or ()) | set(doc["FailedNodes"]) | set(doc["FailedAndUnresolvableNodes"])
        assert named <= set(offered), doc


# --------------------------------------------------------------------------- the HTTP edge


async def test_a_body_declared_far_over_the_limit_is_refused_at_once() -> None:
    """A request that declares a 10 GB Content-Length and sends 1 KiB is held open indefinitely."""
    async with running_quorum() as quorum:
        server = quorum.client.server
        reader, writer = await asyncio.open_connection(server.host, server.port)
        head = (f"POST /filter HTTP/1.1\r\nHost: quorum\r\nContent-Type: application/json\r\n"
                f"Content-Length: {10 * 10**9}\r\n\r\n").encode()
        writer.write(head + b"{" + b" " * 1023)
        await writer.drain()
        try:
            answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2.0)
        except TimeoutError:
            answer = b"(no answer)"
        finally:
            writer.close()
        assert answer.startswith(b"HTTP/1.1 400"), answer


async def test_a_client_disconnecting_mid_body_is_not_logged_as_an_error(
        caplog: pytest.LogCaptureFixture) -> None:
    """A client disconnect is logged at ERROR as an unexpected error."""
    caplog.set_level(logging.DEBUG, logger="extender")
    async with running_quorum() as quorum:
        server = quorum.client.server
        _, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(b"POST /filter HTTP/1.1\r\nHost: quorum\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 5000\r\n\r\n" + b'{"Pod": ')
        await writer.drain()
        await asyncio.sleep(0.05)
        writer.close()
        await writer.wait_closed()
        await asyncio.sleep(0.2)
        assert (await quorum.filter(make_pod("p", "uid-p"), ALL[:1]))["NodeNames"] == ALL[:1]
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


# --------------------------------------------------------------------------- state that never goes away


async def test_filter_calls_naming_gangs_that_do_not_exist_leave_no_gangs_behind() -> None:
    """Filter calls naming gangs that do not exist leave phantom gangs on /debug/gangs for ever."""
    async with running_quorum() as quorum:
        for i in range(20):
            await quorum.filter(gang_pod(f"ghost{i}", gang=f"nowhere{i}", min_count=3), ALL)
        await asyncio.sleep(0.05)
        doc = await quorum.debug_gangs()
        assert [g["gang"] for g in doc["gangs"]] == []


async def test_unknown_node_names_on_prioritize_leave_no_state_behind() -> None:
    """A million unknown node names sent to /prioritize leave +210 MiB in a per-name cache."""
    async with running_quorum() as quorum:
        pod = make_pod("p", "uid-p")

        async def prioritize(first: int, count: int, chunk: int = 4000) -> None:
            for start in range(first, first + count, chunk):
                names = [f"unknown-{i:07d}" for i in range(start, start + chunk)]
                status, doc = await quorum.post("/prioritize", extender_args(pod, names=names))
                assert status == 200, doc

        await prioritize(0, 12_000)  # warm-up: whatever is bounded by the cluster's size fills here
        kept = await retained_bytes(prioritize(12_000, 60_000))
        # 60,000 new names: the per-name cache kept about 200 bytes each (12 MiB).
        assert kept < 2 * 2**20, f"{kept / 2**20:.1f} MiB kept after 60,000 unknown names"


# --------------------------------------------------------------------------- peer schedulers' behaviours


async def test_nodes_missing_a_topology_label_are_not_placed_into_as_a_domain() -> None:
    """Nodes that lack one of the configured topology labels are placed into as if in a domain."""
    labelled = [make_node("b0-r0-n0", "b0", "b0-r0"), make_node("b1-r0-n0", "b1", "b1-r0")]
    loose = []
    for name in ("loose-0", "loose-1"):  # no block or rack label; together they hold the gang
        node = make_node(name, "", "")
        node["metadata"]["labels"] = {HOST: name}
        loose.append(node)
    async with running_quorum(nodes=labelled + loose) as quorum:
        members = [gang_pod(f"w{i}", gang="w", min_count=2, gpus=8, preferred="rack") for i in range(2)]
        free = gang_pod("f0", gang="f", min_count=1, gpus=8)
        quorum.api.add(PODS, *members, free)
        await quorum.settle()
        answered = (await quorum.filter(members[0], ["loose-0", "loose-1"]))["NodeNames"]
        assert answered == [], "a gang asking for a rack was placed on nodes in no rack"
        # The loose nodes are usable nodes all the same, by pods that ask for no topology.
        assert (await quorum.filter(free, ["loose-0", "loose-1"]))["NodeNames"]


async def test_a_gang_with_an_unreadable_min_count_shows_misconfigured_with_a_reason() -> None:
    """An annotation gang with `quorum.dev/min-count: "abc"` has no phase and no reason."""
    async with running_quorum() as quorum:
        members = [gang_pod(f"w{i}", gang="w", min_count=None) for i in range(2)]
        for member in members:
            member["metadata"]["annotations"]["quorum.dev/min-count"] = "abc"
        quorum.api.add(PODS, *members)
        await quorum.settle()
        await quorum.post("/filter", extender_args(copy.deepcopy(members[0]), names=ALL))
        gang = await quorum.gang("ml/w")
        assert gang is not None
        assert gang["phase"] == "Misconfigured", gang
        assert "abc" in (gang["reason"] or ""), gang
