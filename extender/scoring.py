"""Node scores for prioritize (0..10), pure functions over node domain paths.

Gang members beyond quorum (and basic-policy groups) are drawn towards where their gang already
is: same host > same rack > same block > elsewhere. Pods outside gangs are drawn towards domains
already in use, so that empty racks and blocks stay whole for the next gang.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

MAX_SCORE = 10


def distance_score(paths: Sequence[str], anchors: Collection[str]) -> int:
    """Score by the deepest topology domain a node shares with the gang's nodes.

    ``paths`` are the node's domain keys highest level first (the last is normally the host);
    ``anchors`` holds every domain key of every node the gang is bound to or reserved on.
    """
    levels = len(paths)
    if not levels or not anchors:
        return 0
    for depth in range(levels - 1, -1, -1):
        path = paths[depth]
        if path and path in anchors:
            return distance_score_for_depth(depth, levels)
    return 0


def distance_score_for_depth(depth: int, levels: int) -> int:
    """Score of a node whose deepest domain shared with the gang is at ``depth`` (0 = top level)."""
    return round(MAX_SCORE * (depth + 1) / levels)


def occupancy_score(paths: Sequence[str], domain_pods: Mapping[str, int]) -> int:
    """Higher when the node's enclosing domains already hold pods (keeps empty domains whole).

    Each level counts equally; a node whose block, rack and host all hold pods scores 10, a node
    in an entirely empty block scores 0.
    """
    levels = [path for path in paths if path]
    if not levels:
        return 0
    used = sum(1 for path in levels if domain_pods.get(path, 0) > 0)
    return round(MAX_SCORE * used / len(levels))


def anchor_paths(node_paths: Sequence[Sequence[str]]) -> set[str]:
    """All domain keys of the given nodes, for ``distance_score``."""
    return {path for paths in node_paths for path in paths if path}
