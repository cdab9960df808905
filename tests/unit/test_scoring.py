"""Pure scoring functions: distance from a gang, occupancy of domains."""

from __future__ import annotations

from extender.cluster.records import domain_paths
from extender.topology.scoring import distance_scores, occupancy_score

NODES = {
    "n1": ("b0", "b0-r0", "n1"),
    "n2": ("b0", "b0-r0", "n2"),
    "n3": ("b0", "b0-r1", "n3"),
    "n4": ("b1", "b1-r0", "n4"),
}
PATHS = {name: domain_paths(domains) for name, domains in NODES.items()}
DOMAIN_NODES: dict[str, set[str]] = {}
for _name, _paths in PATHS.items():
    for _path in _paths:
        DOMAIN_NODES.setdefault(_path, set()).add(_name)


def test_distance_scores_rank_host_then_rack_then_block_then_elsewhere() -> None:
    scores = distance_scores([PATHS["n1"]], DOMAIN_NODES, levels=3)
    assert scores == {"n1": 10, "n2": 7, "n3": 3}  # n4 (other block) is absent: it scores 0


def test_distance_scores_take_the_closest_of_several_gang_nodes() -> None:
    scores = distance_scores([PATHS["n1"], PATHS["n4"]], DOMAIN_NODES, levels=3)
    assert scores["n4"] == 10 and scores["n2"] == 7


def test_unlabelled_levels_are_not_shared_domains() -> None:
    bare = domain_paths(("", "", "n9"))
    assert bare[:2] == ("", "")
    assert distance_scores([bare], DOMAIN_NODES, levels=3) == {}


def test_occupancy_prefers_used_domains() -> None:
    used = {PATHS["n1"][0]: 2, PATHS["n1"][1]: 2, PATHS["n1"][2]: 2}
    assert occupancy_score(PATHS["n1"], used) == 10
    assert occupancy_score(PATHS["n2"], used) == 7  # same rack, empty host
    assert occupancy_score(PATHS["n3"], used) == 3  # same block only
    assert occupancy_score(PATHS["n4"], used) == 0  # an untouched block stays whole
