"""extender.adapters.server over real HTTP (aiohttp test server): verbs, probes, metrics and bad input."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from .fixtures import (
    GANG_POD_UID,
    VICTIM_UID,
    binding_args,
    extender_args,
    load,
    make_pod,
    make_podgroup,
    node_names,
    raw,
    topology_nodes,
)
from .server_stack import Stack

FILTER_RESULT_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}


ALL_NAMES = node_names(topology_nodes())


def plain_pod(name: str = "serve-llm-0", uid: str = "uid-serve-llm-0") -> dict[str, Any]:
    return make_pod(name, uid)


async def assert_serves_good_request(stack: Stack) -> None:
    """After bad input the server must still answer a normal filter call."""
    status, doc = await stack.post_json("/filter", extender_args(plain_pod(), names=ALL_NAMES[:2]))
    assert status == 200
    assert doc["NodeNames"] == ALL_NAMES[:2]


# --------------------------------------------------------------------------- filter


async def test_filter_node_names_mode(stack: Stack) -> None:
    status, doc = await stack.post_json("/filter", extender_args(plain_pod(), names=ALL_NAMES))
    assert status == 200
    assert set(doc) == FILTER_RESULT_KEYS
    assert doc["Nodes"] is None
    assert doc["NodeNames"] == ALL_NAMES  # nothing reserved: a plain pod may go anywhere
    assert doc["Error"] == ""


async def test_filter_node_list_mode(stack: Stack) -> None:
    nodes = topology_nodes()[:3]
    status, doc = await stack.post_json("/filter", extender_args(plain_pod(), nodes=nodes))
    assert status == 200
    assert set(doc) == FILTER_RESULT_KEYS
    assert doc["NodeNames"] is None
    assert doc["Nodes"]["items"] == nodes


async def test_filter_recorded_requests_in_both_modes(stack: Stack) -> None:
    # The recorded gang member has no PodGroup in the cache yet: every node is rejected, unresolvably.
    for name in ("filter_args_node_names.json", "filter_args_nodes.json"):
        sent = load(name)
        status, doc = await stack.post_json("/filter", raw(name))
        assert status == 200
        assert set(doc) == FILTER_RESULT_KEYS
        candidates = sent["NodeNames"] or node_names(sent["Nodes"]["items"])
        assert set(doc["FailedAndUnresolvableNodes"]) == set(candidates)
        assert all("train-a" in reason for reason in doc["FailedAndUnresolvableNodes"].values())
        if sent["NodeNames"] is not None:
            assert doc["NodeNames"] == [] and doc["Nodes"] is None
        else:
            assert doc["Nodes"]["items"] == [] and doc["NodeNames"] is None


async def test_filter_with_both_node_fields_null(stack: Stack) -> None:
    status, doc = await stack.post_json("/filter", extender_args(plain_pod()))
    assert status == 200
    assert doc["NodeNames"] == []
    assert doc["Nodes"] is None


async def test_filter_places_a_whole_gang_and_answers_each_member_its_node(stack: Stack) -> None:
    stack.cache.upsert_podgroup(make_podgroup("train-a", 2, topology_key="topology.quorum.dev/rack"))
    members = [make_pod(f"train-a-worker-{i}", f"uid-w{i}", group="train-a", gpus=8) for i in range(2)]
    for member in members:
        stack.cache.upsert_pod(member)

    chosen: list[str] = []
    for member in members:
        for mode in ("names", "nodes"):
            if mode == "names":
                status, doc = await stack.post_json("/filter", extender_args(member, names=ALL_NAMES))
                passing = doc["NodeNames"]
            else:
                status, doc = await stack.post_json("/filter", extender_args(member, nodes=topology_nodes()))
                passing = node_names(doc["Nodes"]["items"])
            assert status == 200
            assert len(passing) == 1 and passing[0] in ALL_NAMES
            chosen.append(passing[0])
    # Same answer in both modes, and 8 GPUs each means two different hosts in one rack.
    assert chosen[0] == chosen[1] and chosen[2] == chosen[3]
    assert chosen[0] != chosen[2]
    racks = {stack.cache.nodes[n].domains[1] for n in chosen}
    assert len(racks) == 1


async def test_filter_only_returns_input_names(stack: Stack) -> None:
    stack.cache.upsert_podgroup(make_podgroup("train-a", 2))
    members = [make_pod(f"train-a-worker-{i}", f"uid-w{i}", group="train-a", gpus=8) for i in range(2)]
    for member in members:
        stack.cache.upsert_pod(member)
    offered = ["kwok-b1-r1-n0", "kwok-b1-r1-n1", "not-in-cache"]
    for member in members:
        status, doc = await stack.post_json("/filter", extender_args(member, names=offered))
        assert status == 200
        assert set(doc["NodeNames"]) <= set(offered)
        assert doc["NodeNames"], doc
    # A pod outside the gang must not be offered the capacity the gang reserved.
    status, doc = await stack.post_json(
        "/filter", extender_args(make_pod("other", "uid-other", gpus=8), names=offered)
    )
    assert status == 200
    assert set(doc["NodeNames"]) <= {"not-in-cache"}
    assert {"kwok-b1-r1-n0", "kwok-b1-r1-n1"} <= set(doc["FailedAndUnresolvableNodes"])


# --------------------------------------------------------------------------- prioritize


async def test_prioritize_returns_bare_array_with_int_scores_in_range(stack: Stack) -> None:
    # One pod already running in rack b0-r0 makes that rack (and block b0) preferred.
    stack.cache.upsert_pod(make_pod("running", "uid-running", node="kwok-b0-r0-n0", phase="Running"))
    for payload in (extender_args(plain_pod(), names=ALL_NAMES),
                    extender_args(plain_pod(), nodes=topology_nodes())):
        status, doc = await stack.post_json("/prioritize", payload)
        assert status == 200
        assert isinstance(doc, list)
        # Only nodes above the lowest score are listed (kube-scheduler adds nothing for the rest).
        assert [entry["Host"] for entry in doc] == [name for name in ALL_NAMES if "-b0-" in name]
        for entry in doc:
            assert set(entry) == {"Host", "Score"}
            assert type(entry["Score"]) is int and 0 <= entry["Score"] <= 10
        scores = dict.fromkeys(ALL_NAMES, 0) | {entry["Host"]: entry["Score"] for entry in doc}
        assert scores["kwok-b0-r0-n0"] == 10
        assert scores["kwok-b0-r0-n0"] > scores["kwok-b0-r1-n0"] > scores["kwok-b1-r0-n0"]


async def test_prioritize_subset_of_input(stack: Stack) -> None:
    stack.cache.upsert_pod(make_pod("running", "uid-running", node="kwok-b1-r0-n0", phase="Running"))
    offered = ["kwok-b1-r0-n1", "kwok-b0-r1-n0"]
    status, doc = await stack.post_json("/prioritize", extender_args(plain_pod(), names=offered))
    assert status == 200
    assert [entry["Host"] for entry in doc] == offered[:1]  # the other scores lowest: left out


async def test_prioritize_answers_no_entries_when_every_candidate_scores_the_same(stack: Stack) -> None:
    # An empty cluster: a plain pod has no preference, and an empty list ranks the nodes as the full
    # one would (kube-scheduler adds nothing for a missing host).
    status, doc = await stack.post_json("/prioritize", extender_args(plain_pod(), names=ALL_NAMES))
    assert (status, doc) == (200, [])
    # Both answers from the table kept across calls (the same occupancy epoch), then one node in use.
    assert (await stack.post_json("/prioritize", extender_args(plain_pod(), names=ALL_NAMES)))[1] == []
    stack.cache.upsert_pod(make_pod("running", "uid-running", node="kwok-b1-r0-n0", phase="Running"))
    status, doc = await stack.post_json("/prioritize", extender_args(plain_pod(), names=ALL_NAMES))
    assert doc and {entry["Host"] for entry in doc} <= set(ALL_NAMES)


async def test_prioritize_with_no_candidates(stack: Stack) -> None:
    status, doc = await stack.post_json("/prioritize", extender_args(plain_pod()))
    assert (status, doc) == (200, [])


# --------------------------------------------------------------------------- bind


async def test_bind_plain_pod_calls_the_api_and_answers_empty_error(stack: Stack) -> None:
    status, doc = await stack.post_json("/bind", raw("bind_args.json"))
    assert status == 200
    assert doc == {"Error": ""}
    assert stack.actions.binds == [("ml", "train-a-worker-0", GANG_POD_UID, "kwok-b0-r0-n0")]


async def test_bind_refused_by_the_api_is_reported_in_error(stack: Stack) -> None:
    stack.actions.refuse["serve-llm-0"] = "pods \"serve-llm-0\" not found"
    status, doc = await stack.post_json("/bind", binding_args("serve-llm-0", "ml", "u1", "kwok-b0-r0-n0"))
    assert status == 200
    assert set(doc) == {"Error"}
    assert "not found" in doc["Error"]
    assert stack.actions.binds == []


async def test_bind_gang_members_are_held_until_quorum(stack: Stack) -> None:
    stack.cache.upsert_podgroup(make_podgroup("train-a", 2))
    members = [make_pod(f"train-a-worker-{i}", f"uid-w{i}", group="train-a") for i in range(2)]
    for member in members:
        stack.cache.upsert_pod(member)
    targets = []
    for member in members:
        _, doc = await stack.post_json("/filter", extender_args(member, names=ALL_NAMES))
        targets.append(doc["NodeNames"][0])

    first = asyncio.ensure_future(
        stack.post_json("/bind", binding_args("train-a-worker-0", "ml", "uid-w0", targets[0]))
    )
    await asyncio.sleep(0.05)
    assert not first.done()  # held: the gang has not reached quorum yet
    assert stack.actions.binds == []
    second = await stack.post_json("/bind", binding_args("train-a-worker-1", "ml", "uid-w1", targets[1]))
    assert second == (200, {"Error": ""})
    assert await asyncio.wait_for(first, 5) == (200, {"Error": ""})
    assert sorted(stack.actions.binds) == [
        ("ml", "train-a-worker-0", "uid-w0", targets[0]),
        ("ml", "train-a-worker-1", "uid-w1", targets[1]),
    ]


# --------------------------------------------------------------------------- preempt


async def test_preempt_echoes_victims_from_meta_victims(stack: Stack) -> None:
    status, doc = await stack.post_json("/preempt", raw("preempt_args_meta.json"))
    assert status == 200
    assert doc == {"NodeNameToMetaVictims": {
        "kwok-b0-r0-n0": {"Pods": [{"UID": VICTIM_UID}], "NumPDBViolations": 0}}}


async def test_preempt_answers_uids_for_full_victims(stack: Stack) -> None:
    status, doc = await stack.post_json("/preempt", raw("preempt_args_full.json"))
    assert status == 200
    assert doc == {"NodeNameToMetaVictims": {
        "kwok-b0-r0-n0": {"Pods": [{"UID": VICTIM_UID}], "NumPDBViolations": 1}}}


# --------------------------------------------------------------------------- probes, metrics, debug


async def test_healthz(stack: Stack) -> None:
    resp = await stack.client.get("/healthz")
    assert resp.status == 200


async def test_readyz_follows_the_ready_check(stack: Stack) -> None:
    resp = await stack.client.get("/readyz")
    assert resp.status == 503
    assert "nodes" not in await resp.text()  # nodes were listed by the fixture
    assert "pods" in await resp.text()
    stack.ready["value"] = True
    resp = await stack.client.get("/readyz")
    assert resp.status == 200


def _histogram_count(text: str, verb: str, outcome: str) -> float | None:
    for family in text_string_to_metric_families(text):
        if family.name != "quorum_request_duration_seconds":
            continue
        for sample in family.samples:
            if (sample.name == "quorum_request_duration_seconds_count"
                    and sample.labels == {"verb": verb, "outcome": outcome}):
                return sample.value
    return None


async def test_metrics_record_verb_and_outcome(stack: Stack) -> None:
    await stack.post("/filter", extender_args(plain_pod(), names=ALL_NAMES))
    await stack.post("/filter", extender_args(plain_pod()))  # no candidates: reject
    await stack.post("/prioritize", extender_args(plain_pod(), names=ALL_NAMES))
    await stack.post("/bind", b"{")
    resp = await stack.client.get("/metrics")
    assert resp.status == 200
    text = await resp.text()
    assert _histogram_count(text, "filter", "pass") == 1
    assert _histogram_count(text, "filter", "reject") == 1
    assert _histogram_count(text, "prioritize", "ok") == 1
    assert _histogram_count(text, "bind", "bad_request") == 1
    assert _histogram_count(text, "preempt", "ok") is None


def _counter(text: str, name: str, labels: dict[str, str]) -> float | None:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return sample.value
    return None


async def test_metrics_say_how_the_candidate_nodes_were_sent(stack: Stack) -> None:
    """Which wire mode kube-scheduler uses (nodeCacheCapable) is visible to an operator."""
    nodes = topology_nodes()[:3]
    await stack.post("/filter", extender_args(plain_pod(), nodes=nodes))
    await stack.post("/filter", extender_args(plain_pod(), nodes=nodes))
    await stack.post("/prioritize", extender_args(plain_pod(), names=ALL_NAMES))
    text = await (await stack.client.get("/metrics")).text()
    name = "quorum_candidate_nodes_total"
    assert _counter(text, name, {"verb": "filter", "form": "objects"}) == 2
    assert _counter(text, name, {"verb": "filter", "form": "names"}) is None
    assert _counter(text, name, {"verb": "prioritize", "form": "names"}) == 1


async def test_debug_gangs_is_json(stack: Stack) -> None:
    stack.cache.upsert_podgroup(make_podgroup("train-a", 2))
    member = make_pod("train-a-worker-0", "uid-w0", group="train-a")
    stack.cache.upsert_pod(member)
    await stack.post("/filter", extender_args(member, names=ALL_NAMES))
    resp = await stack.client.get("/debug/gangs")
    assert resp.status == 200
    assert resp.content_type == "application/json"
    doc = json.loads(await resp.read())
    assert doc["cache"] == {"nodes": 8, "pods": 1, "podgroups": 1, "resourceslices": 0,
                            "resourceclaims": 0, "deviceclasses": 0, "device_kinds": 0}
    assert [g["gang"] for g in doc["gangs"]] == ["ml/train-a"]
    assert doc["gangs"][0]["phase"] == "WaitingForMembers"
    assert doc["reservedPods"] == 0
    assert doc["inflightBinds"] == {}
