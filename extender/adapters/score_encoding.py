"""Prioritize answers: a HostPriorityList encoded from a ``ScoreTable``.

Scores must be ints in 0..10 (kube-scheduler does not clamp): a score outside the range is clamped
and logged. Only candidates that score above the lowest candidate are written, each with the lowest
score taken off. kube-scheduler adds nothing for a host the answer leaves out, and taking the same
amount off every candidate changes no ranking, so the node chosen has the same total as with the
full list; what changes is that neither side encodes or decodes an entry for every node (1,000 of
them per call on a cluster of 1,000), and when every candidate scores the same the answer is empty.
(kube-scheduler breaks a tie between equal totals at random among the hosts an extender listed and
by its heap's order among the others, as it does with no extender at all.)

Encoded fragments are cached per node and score, and the scores of a table kept across calls
(``epoch``) are kept with it, so a call with nothing changed is a few passes over the names.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable
from itertools import compress, repeat
from typing import Any

import orjson

from ..topology.scoring import MAX_SCORE, ScoreTable

log = logging.getLogger(__name__)

_SCORE_SUFFIX = [f',"Score":{score}}}'.encode() for score in range(MAX_SCORE + 1)]


def _in_range(score: Any) -> int:
    """A score as the protocol allows it: an int in 0..10 (kube-scheduler does not clamp)."""
    if type(score) is int and 0 <= score <= MAX_SCORE:
        return score
    log.warning("prioritize score outside 0..%d; clamped", MAX_SCORE, extra={"score": repr(score)[:40]})
    if isinstance(score, int | float) and math.isfinite(score):
        return min(MAX_SCORE, max(0, round(score)))
    return 0


def host_priority_fragment(host: str, score: int) -> bytes:
    """One pre-encoded HostPriority entry; the server joins cached fragments into the list.

    Built by concatenation: small exact-size bytes (orjson.dumps buffers are KiBs each, which adds
    up to tens of MiB when one is cached per node).
    """
    return b'{"Host":' + orjson.dumps(host) + _SCORE_SUFFIX[_in_range(score)]


def host_priority_list(fragments: list[bytes]) -> bytes:
    return b"[" + b",".join(fragments) + b"]"


_SCORES = frozenset(range(MAX_SCORE + 1))


class ScoreEncoder:
    """Encodes a ``ScoreTable`` as a HostPriorityList of the candidates above the lowest score.

    Names the cluster cache does not know (``is_node``) score 0 and are never kept. Fragments and
    kept scores are dropped when they grow past ``limit()`` entries (node churn), so a client that
    sends unknown or ever-new names leaves nothing behind.
    """

    def __init__(self, is_node: Callable[[str], bool], limit: Callable[[], int]) -> None:
        self._is_node = is_node
        self._limit = limit
        self._by_score: list[dict[str, bytes]] = [{} for _ in range(MAX_SCORE + 1)]
        self._epoch: Hashable | None = None
        self._epoch_scores: dict[str, int] = {}  # node -> score (in range) under ``_epoch``
        self._fragments_key: tuple[Hashable | None, int] | None = None
        self._fragments: dict[str, bytes] = {}  # node -> its entry under ``_fragments_key``

    def encode(self, candidates: list[str], table: ScoreTable) -> bytes:
        scores = self._scores(candidates, table)
        low = min(scores, default=0)
        if not scores or max(scores) == low:
            return b"[]"
        above = list(map(low.__lt__, scores))
        names = list(compress(candidates, above))  # selected at C speed
        kept = self._kept_fragments(table.epoch, low)
        fragments: list[bytes | None] = list(map(kept.get, names))
        # Fragments are never empty, so all() is a miss test at C speed (``None in`` compares bytes).
        if not all(fragments):
            shifted = map(low.__rsub__, compress(scores, above))
            fragments = [fragment or self._fragment(name, score, kept if table.epoch is not None else None)
                         for name, score, fragment in zip(names, shifted, fragments, strict=True)]
        return host_priority_list(fragments)  # type: ignore[arg-type]  # no None left

    def _kept_fragments(self, epoch: Hashable | None, low: int) -> dict[str, bytes]:
        """Entries already encoded for this table and lowest score (none for a table of one call)."""
        key = (epoch, low)
        if epoch is None or key != self._fragments_key or len(self._fragments) > self._limit():
            self._fragments_key, self._fragments = key, {}
        return self._fragments

    def _fragment(self, name: str, score: int, kept: dict[str, bytes] | None) -> bytes:
        cache = self._by_score[score]
        fragment = cache.get(name)
        if fragment is None:
            fragment = host_priority_fragment(name, score)
            if self._is_node(name):
                if len(cache) >= self._limit():
                    cache.clear()
                cache[name] = fragment
        if kept is not None and self._is_node(name):
            kept[name] = fragment
        return fragment

    def _scores(self, candidates: list[str], table: ScoreTable) -> list[int]:
        """Each candidate's score in 0..10, in order; 0 for a name that is no node of the cluster."""
        is_node = self._is_node
        if table.epoch is None:
            score_or: Callable[[str, int], Any] = table.known.get
            scores: list[Any] = list(map(score_or, candidates, repeat(0)))
            if not all(map(is_node, candidates)):
                scores = [score if is_node(name) else 0
                          for name, score in zip(candidates, scores, strict=True)]
            if not _SCORES.issuperset(scores) or not set(map(type, scores)) <= {int}:  # 5.0 is in _SCORES
                scores = [_in_range(score) for score in scores]
            return scores
        if table.epoch != self._epoch or len(self._epoch_scores) > self._limit():
            self._epoch, self._epoch_scores = table.epoch, {}
        kept = self._epoch_scores
        found: list[int] = list(map(kept.get, candidates, repeat(-1)))  # -1: not kept yet
        if not found or min(found) >= 0:
            return found
        return [self._score_of(name, table, kept) if score < 0 else score
                for name, score in zip(candidates, found, strict=True)]

    def _score_of(self, name: str, table: ScoreTable, kept: dict[str, int]) -> int:
        if not self._is_node(name):
            return 0
        raw = table.score_of(name)
        score = kept[name] = 0 if raw is None else _in_range(raw)
        return score
