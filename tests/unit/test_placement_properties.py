"""Placement checked against a brute-force search over random clusters and gangs."""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence

import pytest

from extender.topology.placement import (
    CandidateNode,
    Member,
    Placement,
    place_gang,
)

from .test_placement import BLOCK, GPU, HOST, LEVELS, RACK, check_valid, cluster, gang, placed

# --------------------------------------------------------------------------------------------------
# Randomised cross-check against brute force


def brute_force_fits(
    candidates: Sequence[CandidateNode], members: Sequence[Member], required_level: int | None
) -> bool:
    """Exhaustive search over assignments of members to nodes (tiny inputs only)."""
    if required_level is None:
        pools = [list(candidates)]
    else:
        domains: dict[tuple[str, ...], list[CandidateNode]] = {}
        for c in candidates:
            if c.domains[required_level]:
                domains.setdefault(c.domains[: required_level + 1], []).append(c)
        pools = list(domains.values())
    return any(min_nodes_in(pool, members) <= len(members) for pool in pools)


def min_nodes_in(pool: Sequence[CandidateNode], members: Sequence[Member]) -> int:
    """Fewest distinct nodes over every valid assignment; ``len(members) + 1`` when none exists."""
    frees = [Counter(dict(c.free)) for c in pool]
    slots = [c.pods_free for c in pool]
    counts = [0] * len(pool)
    best = len(members) + 1

    def visit(i: int, used: int) -> None:
        nonlocal best
        if used >= best:
            return
        if i == len(members):
            best = used
            return
        req = members[i].requests
        for j in range(len(pool)):
            if slots[j] >= 1 and all(frees[j][r] >= q for r, q in req.items() if q > 0):
                slots[j] -= 1
                frees[j].subtract(req)
                counts[j] += 1
                visit(i + 1, used + (counts[j] == 1))
                counts[j] -= 1
                frees[j].update(req)
                slots[j] += 1

    visit(0, 0)
    return best


def random_cluster(rng: random.Random) -> list[CandidateNode]:
    out = []
    for b in range(rng.randint(1, 2)):
        for r in range(rng.randint(1, 2)):
            for h in range(rng.randint(1, 3)):
                name = f"b{b}-r{r}-n{h}"
                block = "" if rng.random() < 0.1 else f"b{b}"
                rack = "" if rng.random() < 0.15 else f"b{b}-r{r}"
                free: Mapping[str, int] = {
                    "cpu": rng.choice([0, 1000, 2000, 4000]),
                    GPU: rng.choice([0, 1, 2, 4]),
                }
                out.append(CandidateNode(name, (block, rack, name), free, rng.randint(0, 3)))
    return out


def random_members(rng: random.Random, homogeneous: bool) -> list[Member]:
    def req() -> dict[str, int]:
        return {"cpu": rng.choice([0, 500, 1000, 2000]), GPU: rng.choice([0, 0, 1, 2])}

    count = rng.randint(1, 5)
    if homogeneous:
        shape = req()
        return [Member(f"m{i}", dict(shape)) for i in range(count)]
    return [Member(f"m{i}", req()) for i in range(count)]


@pytest.mark.parametrize("seed", range(6))
def test_random_clusters_against_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    agreed = 0
    for _ in range(120):
        candidates = random_cluster(rng)
        members = random_members(rng, rng.random() < 0.7)
        shapes = {tuple(sorted((k, v) for k, v in m.requests.items() if v)) for m in members}
        homogeneous = len(shapes) == 1
        required = rng.choice([None, BLOCK, RACK, HOST])
        preferred = rng.choice([None, BLOCK, RACK, HOST])
        result = place_gang(candidates, members, LEVELS, required, preferred)
        assert place_gang(candidates, members, LEVELS, required, preferred) == result
        exists = brute_force_fits(candidates, members, required)
        if isinstance(result, Placement):
            check_valid(result, candidates, members, required)
            assert exists
        elif homogeneous:
            # exact for homogeneous gangs: NoFit only when nothing fits
            assert not exists, (candidates, members, required, result)
        else:
            assert result.reason.startswith(f"needs {len(members)} pods (total ")
        if isinstance(result, Placement) and homogeneous and required == RACK:
            pool = [c for c in candidates if c.domains[:2] == result.domain]
            assert len(set(result.assignment.values())) == min_nodes_in(pool, members)
        agreed += 1
    assert agreed == 120


# --------------------------------------------------------------------------------------------------
# Timing (printed with -s, not asserted: machines differ)


def test_timing_at_5000_nodes(capsys: pytest.CaptureFixture[str]) -> None:
    candidates = cluster(10, 25, 20)
    assert len(candidates) == 5000
    members = gang(64)
    lines = []
    for label, required, preferred in (("required rack", RACK, None), ("preferred rack", None, RACK)):
        runs = []
        for _ in range(5):
            started = time.perf_counter()
            result = place_gang(candidates, members, LEVELS, required, preferred)
            runs.append(time.perf_counter() - started)
        check_valid(placed(result), candidates, members, required)
        lines.append(f"place_gang 5000 nodes, 64 x 1 GPU, {label}: best {min(runs) * 1e3:.1f} ms")
    with capsys.disabled():
        print("\n" + "\n".join(lines))
