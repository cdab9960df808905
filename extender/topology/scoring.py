"""Node scores for prioritize (0..10), pure functions over node domain paths.

Gang members beyond quorum (and basic-policy groups) are drawn towards where their gang already
is: same host > same rack > same block > elsewhere. Pods outside gangs are drawn towards domains
already in use, so that empty racks and blocks stay whole for the next gang.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass

MAX_SCORE = 10


def distance_scores(
    gang_paths: Sequence[Sequence[str]], domain_nodes: Mapping[str, Collection[str]], levels: int
) -> dict[str, int]:
    """Score every node near the gang by the deepest topology domain it shares with the gang.

    ``gang_paths`` are the domain keys (highest level first) of each node the gang is bound to or
    reserved on; ``domain_nodes`` maps a domain key to its nodes. Only nodes inside the gang's
    domains are visited and returned; every other node scores 0. Deeper (closer) domains
    overwrite shallower ones, so the same host scores 10 and the same top-level domain least.
    """
    scores: dict[str, int] = {}
    for depth in range(levels):
        value = round(MAX_SCORE * (depth + 1) / levels)
        for path in {paths[depth] for paths in gang_paths if paths[depth]}:
            for name in domain_nodes.get(path, ()):
                scores[name] = value
    return scores


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


@dataclass(frozen=True, slots=True)
class ScoreTable:
    """Prioritize scores for one call, in a form the wire layer can encode without a Python loop
    per node when nothing moved.

    ``known`` holds scores already computed; ``score_of`` computes any other known node's score, or
    None for a node Quorum does not know (scored 0 and never cached, so unknown names leave no
    state behind). ``epoch`` names a set of scores that stays valid between calls (encoded
    fragments may be reused while it is unchanged); None means the scores hold for this call only.
    """

    known: Mapping[str, int]
    score_of: Callable[[str], int | None]
    epoch: Hashable | None = None
