"""extender.adapters.server over real HTTP (aiohttp test server): verbs, probes, metrics and bad input."""

from __future__ import annotations

import asyncio
import copy
import json
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest
from aiohttp import ClientResponse
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from extender.adapters.server import build_app
from extender.cluster.cache import ClusterCache
from extender.config import Config
from extender.gang.coordinator import Coordinator
from extender.metrics import Metrics

from .fixtures import (
    GANG_POD_UID,
    LEVEL_LABELS,
    VICTIM_UID,
    FakeActions,
    binding_args,
    extender_args,
    load,
    make_pod,
    make_podgroup,
    node_names,
    raw,
    topology_nodes,
)

FILTER_RESULT_KEYS = {"Nodes", "NodeNames", "FailedNodes", "FailedAndUnresolvableNodes", "Error"}
SMALL_LIMIT = 2048


@dataclass
class Stack:
    client: TestClient[Any, Any]
    cache: ClusterCache
    coordinator: Coordinator
    metrics: Metrics
    actions: FakeActions
    ready: dict[str, bool]

    async def post(self, path: str, data: bytes) -> ClientResponse:
        return await self.client.post(path, data=data, headers={"Content-Type": "application/json"})

    async def post_json(self, path: str, data: bytes) -> tuple[int, Any]:
        resp = await self.post(path, data)
        return resp.status, json.loads(await resp.read())


StackFactory = Callable[..., Awaitable[Stack]]


@pytest.fixture
async def make_stack() -> AsyncIterator[StackFactory]:
    clients: list[TestClient[Any, Any]] = []

    async def factory(max_request_bytes: int = 1 << 20, nodes: list[dict[str, Any]] | None = None) -> Stack:
        cache = ClusterCache(LEVEL_LABELS)
        cache.replace_nodes(topology_nodes() if nodes is None else nodes)
        metrics = Metrics()
        actions = FakeActions()
        coordinator = Coordinator(Config(), cache, actions, metrics)
        ready = {"value": False}
        app = build_app(coordinator, cache, metrics, lambda: ready["value"], max_request_bytes)
        client = TestClient(TestServer(app))
        await client.start_server()
        clients.append(client)
        return Stack(client, cache, coordinator, metrics, actions, ready)

    yield factory
    for client in clients:
        await client.close()


@pytest.fixture
async def stack(make_stack: StackFactory) -> Stack:
    return await make_stack()


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
        assert [entry["Host"] for entry in doc] == ALL_NAMES
        for entry in doc:
            assert set(entry) == {"Host", "Score"}
            assert type(entry["Score"]) is int and 0 <= entry["Score"] <= 10
        scores = {entry["Host"]: entry["Score"] for entry in doc}
        assert scores["kwok-b0-r0-n0"] == 10
        assert scores["kwok-b0-r0-n0"] > scores["kwok-b0-r1-n0"] > scores["kwok-b1-r0-n0"]


async def test_prioritize_subset_of_input(stack: Stack) -> None:
    offered = ["kwok-b1-r0-n1", "kwok-b0-r1-n0"]
    status, doc = await stack.post_json("/prioritize", extender_args(plain_pod(), names=offered))
    assert status == 200
    assert [entry["Host"] for entry in doc] == offered


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


async def test_debug_gangs_is_json(stack: Stack) -> None:
    stack.cache.upsert_podgroup(make_podgroup("train-a", 2))
    member = make_pod("train-a-worker-0", "uid-w0", group="train-a")
    stack.cache.upsert_pod(member)
    await stack.post("/filter", extender_args(member, names=ALL_NAMES))
    resp = await stack.client.get("/debug/gangs")
    assert resp.status == 200
    assert resp.content_type == "application/json"
    doc = json.loads(await resp.read())
    assert doc["cache"] == {"nodes": 8, "pods": 1, "podgroups": 1}
    assert [g["gang"] for g in doc["gangs"]] == ["ml/train-a"]
    assert doc["gangs"][0]["phase"] == "WaitingForMembers"
    assert doc["reservedPods"] == 0
    assert doc["inflightBinds"] == {}


# --------------------------------------------------------------------------- bad input


def _doc_with(path: list[Any], value: Any, base: dict[str, Any]) -> bytes:
    doc = copy.deepcopy(base)
    target: Any = doc
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return json.dumps(doc).encode()


_FILTER_BASE = json.loads(extender_args(make_pod("serve-llm-0", "uid-serve"), names=["kwok-b0-r0-n0"]))
_PREEMPT_BASE = load("preempt_args_meta.json")
_PREEMPT_FULL_BASE = load("preempt_args_full.json")

BAD_REQUESTS: dict[str, tuple[str, bytes]] = {
    "filter invalid json": ("/filter", b'{"Pod": {"metadata": '),
    "filter empty body": ("/filter", b""),
    "filter array body": ("/filter", b"[]"),
    "filter missing pod": ("/filter", b'{"Nodes": null, "NodeNames": ["n1"]}'),
    "filter pod without name": ("/filter", _doc_with(["Pod", "metadata", "name"], None, _FILTER_BASE)),
    "filter node names not strings": ("/filter", _doc_with(["NodeNames"], [1, 2], _FILTER_BASE)),
    "filter nodes not a list object": (
        "/filter", _doc_with(["Nodes"], "all", _FILTER_BASE | {"NodeNames": None})),
    "prioritize invalid json": ("/prioritize", b"nope"),
    "prioritize empty body": ("/prioritize", b""),
    "prioritize node names a string": ("/prioritize", _doc_with(["NodeNames"], "n1", _FILTER_BASE)),
    "bind invalid json": ("/bind", b"{{"),
    "bind empty body": ("/bind", b""),
    "bind missing node": ("/bind", b'{"PodName": "p", "PodNamespace": "ml", "PodUID": "u"}'),
    "bind wrong types": ("/bind", b'{"PodName": 1, "PodNamespace": [], "PodUID": null, "Node": {}}'),
    "preempt invalid json": ("/preempt", b"\x00\x01"),
    "preempt empty body": ("/preempt", b""),
    "preempt victims a list": ("/preempt", _doc_with(["NodeNameToMetaVictims"], [], _PREEMPT_BASE)),
    # Shapes that pass the top-level checks but are wrong deeper down: still 400, never 500.
    "filter node metadata a string": (
        "/filter", _doc_with(["Nodes"], {"metadata": {}, "items": [{"metadata": "n1"}]},
                             _FILTER_BASE | {"NodeNames": None})),
    "filter pod annotations a string": (
        "/filter", _doc_with(["Pod", "metadata", "annotations"], "quorum.dev/gang=g", _FILTER_BASE)),
    "filter schedulingGroup a string": (
        "/filter", _doc_with(["Pod", "spec", "schedulingGroup"], "train-a", _FILTER_BASE)),
    "prioritize pod annotations a list": (
        "/prioritize", _doc_with(["Pod", "metadata", "annotations"], ["x"], _FILTER_BASE)),
    "preempt pdb violations a word": (
        "/preempt", _doc_with(["NodeNameToMetaVictims", "kwok-b0-r0-n0", "NumPDBViolations"], "one",
                              _PREEMPT_BASE)),
    "preempt full victim metadata a string": (
        "/preempt", _doc_with(["NodeNameToVictims", "kwok-b0-r0-n0", "Pods", 0, "metadata"], "victim",
                              _PREEMPT_FULL_BASE)),
}


@pytest.mark.parametrize(("path", "payload"), BAD_REQUESTS.values(), ids=BAD_REQUESTS.keys())
async def test_bad_input_is_400_with_json_error_and_server_stays_up(
    stack: Stack, path: str, payload: bytes
) -> None:
    resp = await stack.post(path, payload)
    text = await resp.text()
    assert resp.status == 400, text
    assert resp.content_type == "application/json"
    doc = json.loads(text)
    assert set(doc) == {"error"} and isinstance(doc["error"], str) and doc["error"]
    await assert_serves_good_request(stack)


async def test_gang_pod_with_malformed_priority_is_400(stack: Stack) -> None:
    # A pod carrying its gang in annotations is read from the request itself when the cache has not
    # seen it yet; a non-integer spec.priority there is bad input like any other.
    pod = make_pod("train-b-0", "uid-b0", gang_annotation="train-b", min_count=2)
    pod["spec"]["priority"] = "high"
    resp = await stack.post("/filter", extender_args(pod, names=ALL_NAMES))
    assert resp.status == 400, await resp.text()
    await assert_serves_good_request(stack)


async def test_malformed_quantity_in_request_pod_is_400(stack: Stack) -> None:
    # With capacity reserved for a gang, a plain pod's requests are read from the request.
    stack.cache.upsert_podgroup(make_podgroup("train-a", 2))
    for i in range(2):
        member = make_pod(f"train-a-worker-{i}", f"uid-w{i}", group="train-a")
        stack.cache.upsert_pod(member)
    await stack.post("/filter", extender_args(make_pod("train-a-worker-0", "uid-w0", group="train-a"),
                                              names=ALL_NAMES))
    assert stack.coordinator.reserved_uid, "precondition: the gang holds a reservation"
    pod = plain_pod()
    pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    resp = await stack.post("/filter", extender_args(pod, names=ALL_NAMES))
    assert resp.status == 400, await resp.text()
    await assert_serves_good_request(stack)


async def test_body_over_the_limit_is_400_and_server_stays_up(make_stack: StackFactory) -> None:
    stack = await make_stack(max_request_bytes=SMALL_LIMIT)
    big = extender_args(plain_pod(), names=[f"node-{i:05d}" for i in range(400)])
    assert len(big) > SMALL_LIMIT
    for path in ("/filter", "/prioritize", "/bind", "/preempt"):
        resp = await stack.post(path, big)
        text = await resp.text()
        assert resp.status == 400, text
        assert "error" in json.loads(text)
    # A request under the limit still works.
    small = extender_args(plain_pod(), names=["kwok-b0-r0-n0"])
    assert len(small) < SMALL_LIMIT
    resp = await stack.post("/filter", small)
    assert resp.status == 200
    assert json.loads(await resp.read())["NodeNames"] == ["kwok-b0-r0-n0"]


# --------------------------------------------------------------------------- fuzz

_SCALARS: list[Any] = [None, 0, -1, 3.5, True, False, "", "x", "500m", "NaN", [], {}, [None], {"a": 1},
                       ["kwok-b0-r0-n0"], 2**40]


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out.extend(_paths(value, (*prefix, i)))
    return out


def _mutate(rng: random.Random, base: Any) -> bytes:
    choice = rng.random()
    if choice < 0.08:
        text = json.dumps(base).encode()
        return text[: rng.randrange(len(text))]  # truncated JSON
    if choice < 0.12:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
    doc = copy.deepcopy(base)
    for _ in range(rng.randint(1, 3)):
        paths = _paths(doc)
        if not paths:
            break
        path = rng.choice(paths)
        parent: Any = doc
        for step in path[:-1]:
            parent = parent[step]
        if isinstance(parent, dict) and rng.random() < 0.25:
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(rng.choice(_SCALARS))
    if rng.random() < 0.05:
        doc = [doc]
    return json.dumps(doc).encode()


def _fuzz_bases() -> dict[str, list[Any]]:
    member = make_pod("train-a-worker-0", "uid-w0", group="train-a")
    annotated = make_pod("train-b-0", "uid-b0", gang_annotation="train-b", min_count=2)
    plain = plain_pod()
    nodes = topology_nodes()[:2]
    return {
        "/filter": [json.loads(extender_args(p, names=ALL_NAMES[:3])) for p in (member, annotated, plain)]
        + [json.loads(extender_args(plain, nodes=nodes))],
        "/prioritize": [json.loads(extender_args(p, names=ALL_NAMES[:3])) for p in (member, plain)]
        + [json.loads(extender_args(member, nodes=nodes))],
        # A uid nothing is reserved for, so no bind call is ever held waiting for a gang.
        "/bind": [json.loads(binding_args("serve-llm-0", "ml", "uid-unreserved", "kwok-b0-r0-n0"))],
        "/preempt": [load("preempt_args_meta.json"), load("preempt_args_full.json")],
    }


@pytest.mark.parametrize("verb", ["/filter", "/prioritize", "/bind", "/preempt"])
async def test_fuzzed_bodies_never_cause_a_500(stack: Stack, verb: str) -> None:
    # A gang with a reservation makes filter read plain pods' requests from the request body.
    stack.cache.upsert_podgroup(make_podgroup("train-a", 2))
    for i in range(2):
        stack.cache.upsert_pod(make_pod(f"train-a-worker-{i}", f"uid-w{i}", group="train-a"))
    stack.cache.upsert_pod(make_pod("train-c-0", "uid-c0", gang_annotation="train-c", min_count=1,
                                    node="kwok-b1-r1-n1", phase="Running"))
    rng = random.Random(f"quorum-fuzz{verb}")
    bases = _fuzz_bases()[verb]
    failures: list[str] = []
    statuses: set[int] = set()
    for _ in range(300):
        payload = _mutate(rng, rng.choice(bases))
        resp = await stack.post(verb, payload)
        text = await resp.text()
        statuses.add(resp.status)
        if resp.status not in (200, 400):
            failures.append(f"{resp.status} for {payload[:300]!r}")
        elif resp.status == 400:
            assert "error" in json.loads(text)
    assert {200, 400} <= statuses, statuses  # the corpus exercised both paths
    assert not failures, f"{len(failures)} of 300 bodies answered outside 200/400, e.g.:\n" + "\n".join(
        failures[:5])
    await assert_serves_good_request(stack)
