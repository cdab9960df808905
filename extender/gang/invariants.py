"""The invariants of the gang core, checked as one function.

Tests call it after every step of generated scenarios; ``debug.checkInvariants`` in the
configuration runs it after every request and logs any violation.
"""

from __future__ import annotations

from collections.abc import Collection

from .core import Core
from .registry import GangRegistry
from .state import GangState, Phase


def check_invariants(core: Core, registry: GangRegistry, parked: Collection[str]) -> list[str]:
    """Every violation, as a sentence; an empty list means the core is consistent. ``parked``:
    the members marked as parked by kube-scheduler (``retry.Retry``)."""
    problems = core.ledger.check()
    problems += core.ledger.overcommitted()
    if core.earmarks is not None:
        problems += core.earmarks.check()
    for key, state in registry.gangs.items():
        reservation = core.ledger.reservation_of(key)
        for uid in state.held:
            if uid not in reservation:
                problems.append(f"gang {key}: held bind for {uid} without a reservation")
        spec = core.cache.gang_spec(key)
        running = registry.running_count(key)
        if state.phase == Phase.BOUND and spec is not None and running < spec.min_count:
            problems.append(f"gang {key}: reported Bound with {running}/{spec.min_count} members running")
        if state.phase == Phase.RESERVED and not reservation:
            problems.append(f"gang {key}: reported Reserved without a reservation")
        if state.binds_in_flight < 0:
            problems.append(f"gang {key}: negative bind count")
        problems += _lifecycle_problems(key, state, reservation)
    for gang in core.ledger.gangs():
        if gang not in registry.gangs:
            problems.append(f"gang {gang}: reservation held by a gang Quorum no longer tracks (a leak)")
    problems += registry.check()
    problems += core.cache.membership.check(core.cache.pods)
    problems += _pod_problems(core, registry, parked)
    return problems


def _pod_problems(core: Core, registry: GangRegistry, parked: Collection[str]) -> list[str]:
    """Each pod counted once: in flight or reserved, never against a bind the cache shows; marked
    parked only while pending."""
    problems = []
    for uid, node in core.ledger.inflight().items():
        pod = core.cache.pods.get(uid)
        if pod is not None and pod.node_name:
            problems.append(f"pod {pod.key}: counted in flight to {node} although the cache shows it bound")
        if core.ledger.reserved_node(uid) is not None:
            problems.append(f"pod {uid}: both reserved and in flight")
    for uid in parked:
        pod = core.cache.pods.get(uid)
        if pod is not None and not pod.pending:
            problems.append(f"pod {pod.key}: marked as parked by kube-scheduler although it is not pending")
    for uid in _reserved_uids(core, registry):
        pod = core.cache.pods.get(uid)
        if pod is not None and pod.node_name:
            problems.append(f"pod {pod.key}: reserved although already bound to {pod.node_name}")
    return problems


def _lifecycle_problems(key: str, state: GangState, reservation: dict[str, str]) -> list[str]:
    """After the bind: nothing held by a deactivated gang, no recovery of a gang that never ran,
    no reservation for a member being evicted."""
    problems = []
    if state.phase == Phase.DEACTIVATED and (reservation or state.held):
        problems.append(f"gang {key}: deactivated but holds a reservation or held binds")
    if state.phase == Phase.RECOVERING and not state.started:
        problems.append(f"gang {key}: recovering although it never ran at quorum")
    problems += [f"pod {uid}: reserved while Quorum evicts it"
                 for uid in state.evicting if uid in reservation]
    return problems


def _reserved_uids(core: Core, registry: GangRegistry) -> list[str]:
    out: list[str] = []
    for key in list(registry.gangs):
        out.extend(core.ledger.reservation_of(key))
    return out
