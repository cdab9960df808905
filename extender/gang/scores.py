"""Prioritize scores: members drawn towards their gang, other pods towards domains in use."""

from __future__ import annotations

from ..topology.scoring import ScoreTable, distance_scores, occupancy_score
from .core import Core
from .registry import GangRegistry


class Scorer:
    def __init__(self, core: Core, registry: GangRegistry) -> None:
        self.core = core
        self.registry = registry
        self._occupancy_epoch = -1
        self._occupancy_scores: dict[str, int] = {}

    def scores(self, gang: str | None) -> ScoreTable:
        """Distance from the gang's nodes for its members; otherwise occupancy, cached per epoch
        (scores of pods outside gangs change only when a domain turns empty or non-empty)."""
        cache = self.core.cache
        if gang is not None:
            paths = self._gang_paths(gang)
            if paths:
                scores = distance_scores(paths, cache.domain_nodes, len(self.core.config.levels))
                return ScoreTable(scores, lambda name: scores.get(name, 0))
        if self._occupancy_epoch != cache.occupancy_epoch:
            self._occupancy_scores = {}
            self._occupancy_epoch = cache.occupancy_epoch
        return ScoreTable(self._occupancy_scores, self._occupancy_score_of,
                          ("occupancy", self._occupancy_epoch))

    def _occupancy_score_of(self, name: str) -> int | None:
        cache = self.core.cache
        node = cache.nodes.get(name)
        if node is None:
            return None
        score = self._occupancy_scores[name] = occupancy_score(node.paths, cache.domain_pods)
        return score

    def _gang_paths(self, gang: str) -> list[tuple[str, ...]]:
        nodes = self.core.cache.nodes
        names = set(self.registry.running_nodes(gang))
        names.update(self.core.ledger.reservation_of(gang).values())
        return [nodes[n].paths for n in names if n in nodes]
