"""Bounded fuzz targets, one per verb, through the real app (see tests/fuzz; the long run is
``hack/fuzz.sh``), plus a memory bound and property tests of the wire parsers.

Every input must get no 5xx, log no unexpected error, be answered within the protocol and finish
within the hang bound; the core's invariants must hold throughout.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from extender.adapters import wire
from extender.topology.scoring import ScoreTable
from tests.fuzz.corpus import VERBS, bases
from tests.fuzz.harness import Harness, Totals, describe, fuzz
from tests.unit.json_values import json_values, paths

pytestmark = pytest.mark.fuzz

INPUTS_PER_VERB = 3000


def _report(totals: Totals) -> str:
    return json.dumps(describe(totals), indent=1) + "\n" + "\n".join(e[:600] for e in totals.examples)


@pytest.mark.parametrize("verb", VERBS)
async def test_fuzzed_requests_stay_within_the_protocol(verb: str) -> None:
    totals = await fuzz(f"ci-{verb}", INPUTS_PER_VERB, verbs=(verb,), warmup=INPUTS_PER_VERB // 2)
    assert totals.inputs == INPUTS_PER_VERB
    assert totals.failures == 0, _report(totals)
    assert totals.invariant_violations == 0, _report(totals)
    assert totals.trimmed == 0, "the core answered outside the protocol:\n" + _report(totals)
    # The corpus reaches past validation into the core, and validation refuses a good share.
    assert totals.statuses.get(200, 0) > INPUTS_PER_VERB // 5, totals.statuses
    assert totals.statuses.get(400, 0) > INPUTS_PER_VERB // 10, totals.statuses


async def test_ever_new_node_names_pods_and_victims_leave_nothing_behind() -> None:
    harness = Harness("ci-memory")
    await harness.start()
    try:
        mutator = harness.mutator
        base = bases()
        filter_doc, preempt_doc = base["filter"][2], base["preempt"][2]

        def requests() -> list[tuple[str, bytes]]:
            names = [mutator.fresh_name() for _ in range(30)]
            victims = {mutator.fresh_name(): {"Pods": [{"UID": mutator.fresh_name()}]} for _ in range(5)}
            bind = {"PodName": mutator.fresh_name(), "PodNamespace": "ml", "PodUID": mutator.fresh_name(),
                    "Node": mutator.fresh_name()}
            return [
                ("filter", orjson.dumps(filter_doc | {"NodeNames": names})),
                ("prioritize", orjson.dumps(filter_doc | {"NodeNames": names})),
                ("bind", orjson.dumps(bind)),
                ("preempt", orjson.dumps(preempt_doc | {"NodeNameToMetaVictims": victims})),
            ]

        async def rounds(count: int) -> None:
            for _ in range(count):
                for verb, body in requests():
                    await harness.one(verb, body)

        await rounds(200)  # warm up: caches, allocator arenas, metrics children
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        await rounds(400)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        assert harness.totals.failures == 0, _report(harness.totals)
        assert grown < 1 << 20, f"{grown / 2**20:.2f} MiB kept after 1,600 requests with ever-new names"
    finally:
        await harness.stop()


# --------------------------------------------------------------------------- wire properties

_json = json_values()
_PARSERS = {"filter": wire.parse_extender_args, "bind": wire.parse_binding_args,
            "preempt": wire.parse_preemption_args}
_BASES = {verb: [orjson.dumps(doc) for doc in docs] for verb, docs in bases().items()}


@st.composite
def _requests(draw: st.DrawFn) -> tuple[str, bytes]:
    """A real request of some verb with one to three values replaced by arbitrary JSON."""
    verb = draw(st.sampled_from(sorted(_PARSERS)))
    doc = orjson.loads(draw(st.sampled_from(_BASES[verb])))
    if verb == "filter" and draw(st.booleans()):  # node names of any text at all
        doc["NodeNames"] = draw(st.lists(st.text(max_size=12), max_size=8))
    for _ in range(draw(st.integers(1, 3))):
        where = paths(doc)
        if not where:
            break
        path = draw(st.sampled_from(where))
        parent = doc
        for step in path[:-1]:
            parent = parent[step]
        parent[path[-1]] = draw(_json)
    return verb, orjson.dumps(doc)


def _answer(verb: str, args: Any) -> None:
    """Encode answers for parsed args the way the server would: never raises, every host kept."""
    if verb == "filter":
        names = args.candidate_names
        failed, unresolvable = dict.fromkeys(names[1:2], "full"), dict.fromkeys(names[2:], "gang")
        wire.filter_result(args, names[:1], failed, unresolvable)
        known = set(names[::2])
        encoder = wire.ScoreEncoder(known.__contains__, lambda: 100)
        scores = orjson.loads(encoder.encode(names, ScoreTable({}, lambda name: 5, "epoch")))
        # Known nodes score 5, other names 0: the known ones are listed (less the lowest score).
        listed = [name for name in names if name in known] if any(n not in known for n in names) else []
        assert sorted(entry["Host"] for entry in scores) == sorted(listed)
    elif verb == "preempt":
        wire.preemption_result(args, args.victims)


@settings(max_examples=400, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(_requests())
def test_parsers_either_parse_or_raise_a_wire_error(request: tuple[str, bytes]) -> None:
    verb, body = request
    try:
        args = _PARSERS[verb](body)
    except wire.WireError:
        return
    _answer(verb, args)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.binary(max_size=300))
def test_parsers_refuse_arbitrary_bytes_with_a_wire_error(body: bytes) -> None:
    for parse in _PARSERS.values():
        try:
            parse(body)
        except wire.WireError:
            pass
