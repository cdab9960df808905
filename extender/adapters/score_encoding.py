"""Prioritize answers: a HostPriorityList encoded from a ``ScoreTable``.

Scores must be ints in 0..10 (kube-scheduler does not clamp) and hosts must come from the
request: one entry is written per candidate, and a score outside the range is clamped and logged.
Encoded fragments are cached per node, so a call with nothing changed joins bytes instead of
encoding thousands of entries. When every candidate scores the same the answer is an empty list:
kube-scheduler adds nothing for a host the answer leaves out, and the same score added to every
node changes no ranking, so the choice is the one the full list would give, without one entry per
node encoded here and decoded there.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable, Mapping
from itertools import filterfalse, repeat
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


def _zero_scores(names: list[str]) -> bytes:
    """HostPriority entries scoring 0 for many names, encoded with two C-level passes.

    In orjson's encoding of a list of strings, ``","`` occurs only between elements: inside a
    string every quote is escaped, so a quote there is never followed by ``,"``.
    """
    inner = orjson.dumps(names)[1:-1]  # "a","b"
    return b'{"Host":' + inner.replace(b'","', b'","Score":0},{"Host":"') + b',"Score":0}'


class ScoreEncoder:
    """Encodes a ``ScoreTable`` as a HostPriorityList, reusing per-node fragments.

    One entry per candidate, so hosts are always the request's own.
    Fragments are cached only for nodes in the cluster cache (``is_node``), and the caches are
    dropped when they grow past ``limit()`` entries (node churn), so a client that sends unknown or
    ever-new names leaves nothing behind.
    """

    def __init__(self, is_node: Callable[[str], bool], limit: Callable[[], int]) -> None:
        self._is_node = is_node
        self._limit = limit
        self._by_score: list[dict[str, bytes]] = [{} for _ in range(MAX_SCORE + 1)]
        self._epoch: Hashable | None = None
        self._by_epoch: dict[str, bytes] = {}
        self._scores_epoch: Hashable | None = None
        self._epoch_scores: dict[str, Any] = {}  # node -> score under ``_scores_epoch``

    def _fragment(self, name: str, score: int) -> bytes:
        score = _in_range(score)
        cache = self._by_score[score]
        fragment = cache.get(name)
        if fragment is None:
            fragment = host_priority_fragment(name, score)
            if self._is_node(name):
                if len(cache) >= self._limit():
                    cache.clear()
                cache[name] = fragment
        return fragment

    def _scored(self, candidates: list[str], known: Mapping[str, int]) -> list[bytes | None]:
        """Cached fragments, None where there is none yet. Scores are checked once per table; a
        table with any score outside 0..10 gets no cached fragment, so each is checked alone."""
        if _SCORES.issuperset(known.values()):  # so no negative score indexes a wrong cache
            by_score = self._by_score
            try:
                return [by_score[known.get(name, 0)].get(name) for name in candidates]
            except TypeError:  # a float equal to a valid int
                pass
        return [None] * len(candidates)

    def _complete(self, candidates: list[str], found: list[bytes | None],
                  score_of: Callable[[str], int | None], cache: dict[str, bytes] | None) -> bytes:
        """The list with every miss filled in: nodes of the cluster scored (and cached), and names
        it does not know scored 0 in one pass and put last (order is free: kube-scheduler reads the
        answer into a map by host). A 30 MiB list of unknown names costs one regex pass."""
        # Fragments are never empty, so all() is a miss test; it reads truth values (C speed)
        # where ``None not in found`` compares 5,000 bytes objects with None (4x slower).
        if all(found):
            return host_priority_list(found)  # type: ignore[arg-type]  # no None in it
        missing = [name for name, fragment in zip(candidates, found, strict=True) if fragment is None]
        fragments = [fragment for fragment in found if fragment is not None]
        for name in filter(self._is_node, missing):
            score = score_of(name)
            fragment = self._fragment(name, 0 if score is None else score)
            if cache is not None:
                cache[name] = fragment
            fragments.append(fragment)
        unknown = list(filterfalse(self._is_node, missing))
        if unknown:
            fragments.append(_zero_scores(unknown))
        return host_priority_list(fragments)

    def encode(self, candidates: list[str], table: ScoreTable) -> bytes:
        if self._uniform(candidates, table):
            return b"[]"
        if table.epoch is None:
            known = table.known
            return self._complete(candidates, self._scored(candidates, known),
                                  lambda name: known.get(name, 0), None)
        if table.epoch != self._epoch or len(self._by_epoch) > self._limit():
            self._epoch, self._by_epoch = table.epoch, {}
        found: list[bytes | None] = list(map(self._by_epoch.get, candidates))
        return self._complete(candidates, found, table.score_of, self._by_epoch)

    def _uniform(self, candidates: list[str], table: ScoreTable) -> bool:
        """Every candidate gets the same valid score (as ``_complete`` would write it: names that
        are not nodes of the cluster score 0).

        A table kept across calls (``epoch``) has its scores kept too, so a call with nothing
        changed is one C-level pass over the names.
        """
        is_node = self._is_node
        if table.epoch is None:
            score_or: Callable[[str, int], int] = table.known.get
            distinct = set(map(score_or, filter(is_node, candidates), repeat(0)))
            if not all(map(is_node, candidates)):
                distinct.add(0)
            return len(distinct) == 1 and distinct <= _SCORES
        if table.epoch != self._scores_epoch or len(self._epoch_scores) > self._limit():
            self._scores_epoch, self._epoch_scores = table.epoch, {}
        scores = self._epoch_scores
        seen: set[Any] = set(map(scores.get, candidates))
        if None in seen:
            seen.discard(None)
            for name in filterfalse(scores.__contains__, candidates):
                score = table.score_of(name) if is_node(name) else None
                if score is not None:
                    scores[name] = score
                seen.add(0 if score is None else score)
        return len(seen) == 1 and seen <= _SCORES
