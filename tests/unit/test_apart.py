"""Members that must not share a domain: placement keeps them apart, or says why it cannot."""

from __future__ import annotations

from collections import Counter

from extender.topology.apart import HOSTNAME_LABEL, Apart, MembersApart, keep_apart, resolve_apart
from extender.topology.placement import CandidateNode, Member, NoFit, Placement, place_gang
from extender.topology.slices import place_sliced

LEVELS = ("block", "rack", "host")
LABELS = ("topology.example.com/block", "topology.example.com/rack", HOSTNAME_LABEL)
RACK = 1
GPU = "nvidia.com/gpu"
PER_NODE = Apart(None)


def node(block: int, rack: int, n: int, gpu: int = 8) -> CandidateNode:
    name = f"b{block}-r{rack}-n{n}"
    return CandidateNode(name, (f"b{block}", f"b{block}-r{rack}", name), {"cpu": 64_000, GPU: gpu}, 110)


def cluster(blocks: int = 2, racks: int = 2, nodes: int = 4) -> list[CandidateNode]:
    return [node(b, r, n) for b in range(blocks) for r in range(racks) for n in range(nodes)]


def gang(count: int, gpu: int = 1) -> list[Member]:
    return [Member(f"m{i}", {"cpu": 1000, GPU: gpu}) for i in range(count)]


def placed(result: Placement | NoFit) -> Placement:
    assert isinstance(result, Placement), result
    return result


def test_a_gang_that_packs_onto_one_node_is_spread_one_member_per_node() -> None:
    nodes = cluster()
    assert len(set(placed(place_gang(nodes, gang(8), LEVELS, None, None)).assignment.values())) == 1
    spread = placed(place_gang(nodes, gang(8), LEVELS, None, None, PER_NODE))
    assert len(set(spread.assignment.values())) == 8


def test_kept_apart_the_gang_still_takes_the_fewest_racks() -> None:
    spread = placed(place_gang(cluster(), gang(4), LEVELS, None, RACK, PER_NODE))
    assert len({name.rsplit("-", 1)[0] for name in spread.assignment.values()}) == 1
    assert len(set(spread.assignment.values())) == 4


def test_a_required_rack_with_too_few_nodes_says_members_were_kept_apart() -> None:
    result = place_gang(cluster(), gang(5), LEVELS, RACK, None, PER_NODE)
    assert isinstance(result, NoFit)
    assert result.reason == ("needs 5 \N{MULTIPLICATION SIGN} {cpu: 1, nvidia.com/gpu: 1}; best rack fits 4 "
                             "(at most one member per node: required anti-affinity between members)")


def test_more_members_than_nodes_does_not_fit_and_says_why() -> None:
    result = place_gang(cluster(1, 1, 3), gang(4), LEVELS, None, None, PER_NODE)
    assert isinstance(result, NoFit)
    assert "candidate nodes fit 3" in result.reason and "at most one member per node" in result.reason


def test_nodes_where_members_run_take_no_other_member() -> None:
    nodes = cluster(1, 1, 4)
    running = Apart(None, taken=frozenset({("b0-r0-n0",), ("b0-r0-n1",)}))
    result = placed(place_gang(nodes, gang(2), LEVELS, None, None, running))
    assert set(result.assignment.values()) == {"b0-r0-n2", "b0-r0-n3"}
    assert isinstance(place_gang(nodes, gang(3), LEVELS, None, None, running), NoFit)


def test_one_member_per_rack_picks_one_node_in_each_rack() -> None:
    per_rack = Apart(RACK, label=LABELS[RACK])
    result = placed(place_gang(cluster(), gang(4), LEVELS, None, None, per_rack))
    racks = Counter(name.rsplit("-", 1)[0] for name in result.assignment.values())
    assert sorted(racks.values()) == [1, 1, 1, 1]
    no_fit = place_gang(cluster(), gang(5), LEVELS, None, None, per_rack)
    assert isinstance(no_fit, NoFit)
    assert no_fit.reason.endswith(f"(at most one member per {LABELS[RACK]} domain: required "
                                  "anti-affinity between members)")


def test_a_rack_representative_is_a_node_the_member_fits_on() -> None:
    full = [node(0, 0, 0, gpu=0), node(0, 0, 1), node(0, 1, 0, gpu=0)]
    per_rack = Apart(RACK, label=LABELS[RACK])
    kept = keep_apart(full, gang(1), per_rack)
    assert [c.name for c in kept if c.domains[RACK] == "b0-r0"] == ["b0-r0-n1"]
    assert all(c.pods_free == 1 for c in kept)
    assert placed(place_gang(full, gang(1), LEVELS, None, None, per_rack)).assignment == {"m0": "b0-r0-n1"}


def test_a_refused_rule_is_the_answer_whatever_the_capacity() -> None:
    refused = Apart(None, refused="members' required anti-affinity with matchLabelKeys: not modelled")
    assert place_gang(cluster(), gang(2), LEVELS, None, None, refused) == NoFit(refused.refused)
    sliced = place_sliced(cluster(), gang(4), LEVELS, None, None, RACK, 2, PER_NODE)
    assert isinstance(sliced, NoFit) and "in slices: not modelled" in sliced.reason


class _Pod:
    def __init__(self, apart: MembersApart | None) -> None:
        self.apart = apart


class _Node:
    def __init__(self, domains: tuple[str, ...]) -> None:
        self.domains = domains


def test_resolving_the_rule_from_members_and_where_they_run() -> None:
    nodes = {c.name: _Node(c.domains) for c in cluster()}
    assert resolve_apart([_Pod(None), _Pod(None)], LABELS, [], nodes) is None
    host = resolve_apart([_Pod(MembersApart((HOSTNAME_LABEL,))), _Pod(None)], LABELS, ["b0-r0-n0"], nodes)
    assert host == Apart(2, frozenset({("b0", "b0-r0", "b0-r0-n0")}), HOSTNAME_LABEL)
    both = resolve_apart([_Pod(MembersApart((HOSTNAME_LABEL, LABELS[RACK])))], LABELS, ["b1-r1-n3", "gone"],
                         nodes)
    assert both == Apart(RACK, frozenset({("b1", "b1-r1")}), LABELS[RACK])  # one per rack wins


def test_the_host_label_needs_not_be_a_configured_level() -> None:
    rule = resolve_apart([_Pod(MembersApart((HOSTNAME_LABEL,)))], LABELS[:2], ["b0-r0-n0"],
                         {"b0-r0-n0": _Node(("b0", "b0-r0"))})
    assert rule == Apart(None, frozenset({("b0-r0-n0",)}), HOSTNAME_LABEL)


def test_unknown_keys_and_member_problems_refuse_the_gang() -> None:
    unknown = resolve_apart([_Pod(MembersApart(("example.com/pdu",)))], LABELS, [], {})
    assert unknown is not None and "topologyKey 'example.com/pdu'" in unknown.refused
    problem = resolve_apart([_Pod(MembersApart((), "required anti-affinity with a namespaceSelector"))],
                            LABELS, [], {})
    assert problem is not None
    assert problem.refused == ("members' required anti-affinity with a namespaceSelector: not modelled "
                               "by gang placement")


def test_a_heterogeneous_gang_is_kept_apart_too() -> None:
    members = [Member("big", {"cpu": 1000, GPU: 4}), *gang(3)]
    result = placed(place_gang(cluster(1, 1, 4), members, LEVELS, None, None, PER_NODE))
    assert len(set(result.assignment.values())) == 4
    assert isinstance(place_gang(cluster(1, 1, 3), members, LEVELS, None, None, PER_NODE), NoFit)
