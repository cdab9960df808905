"""Preemption as kube-scheduler proposes it (``/preempt``), kept to what helps a whole gang.

kube-scheduler's preemption is per pod: for a gang member it would evict whatever frees room for
that one member, even when the gang as a whole can never fit (a required rack too small for it),
and it would evict a running gang member by member. So for a member of a gang that is not running,
its proposals are accepted only where Quorum's own whole-gang preemption (``displacement.py``)
evicts those very pods; kube-scheduler's call is also what starts that preemption, since a gang no
node can take is never filtered by Quorum. With preemption off, such members evict nothing.

For every preemptor, victims that would break a gang running at exactly its quorum are vetoed,
unless its PodGroup says ``disruptionMode: Single`` (its owner accepts losing members one by one).
A member of a gang whose PodGroup says ``preemptionPolicy: Never`` evicts nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from ..cluster.records import PodRecord, PreemptionPolicy
from .core import Core, runs
from .displacement import pod_by_pod
from .queue import GangQueue
from .registry import GangRegistry

log = logging.getLogger(__name__)

Victims = dict[str, dict[str, Any]]  # node -> {"Pods": [{"UID": ...}], "NumPDBViolations": n}

# How long a gang member let through to kube-scheduler's eviction still counts as leaving, when the
# watch has not shown it gone: kube-scheduler evicts as soon as it has the answer.
OFFERED_SECONDS = 30.0


class OfferedVictims:
    """Gang members an answer let kube-scheduler evict, until the watch shows them gone.

    Each answer may give away a running gang's one member over its quorum; while the watch lags
    the eviction, the gang still looks one over, and the next answer would give away another. So
    members let through count as leaving for ``OFFERED_SECONDS`` (kube-scheduler evicts the victims
    of one of the nodes kept: those of the others stay, and are only withheld a while)."""

    def __init__(self) -> None:
        self._offered: dict[str, tuple[str, float]] = {}  # uid -> (gang, until)

    def leaving(self, core: Core, gang: str, besides: set[str]) -> int:
        """Members of ``gang`` let through before, still running as ``running_count`` counts them:
        bound in the cache, or bound by Quorum with the watch not showing it yet (forgetting those
        let the next answer give away a second member of a gang one over its quorum)."""
        now = core.clock()
        pods = core.cache.pods
        self._offered = {uid: (g, until) for uid, (g, until) in self._offered.items()
                         if until > now and uid in pods and (runs(pods[uid]) or core.ledger.is_inflight(uid))}
        return sum(1 for uid, (g, _) in self._offered.items() if g == gang and uid not in besides)

    def note(self, core: Core, kept: Victims) -> None:
        until = core.clock() + OFFERED_SECONDS
        for entry in kept.values():
            for victim in entry.get("Pods", []):
                record = core.cache.pods.get(victim.get("UID", ""))
                if record is not None and record.gang_key is not None:
                    self._offered[record.uid] = (record.gang_key, until)


def veto_gang_breaking(core: Core, registry: GangRegistry, victims: Victims,
                       offered: OfferedVictims) -> Victims:
    """Pass the scheduler's victims through, minus nodes whose evictions would take a running gang
    below its quorum (kube-scheduler evicts the victims of the one node it picks), counting the
    members earlier answers let go as gone already."""
    out: Victims = {}
    for node, entry in victims.items():
        uids = [p.get("UID", "") for p in entry.get("Pods", [])]
        if not uids or _breaks_gang(core, registry, uids, offered):
            continue
        out[node] = entry
    offered.note(core, out)
    return out


def gang_aware(core: Core, registry: GangRegistry, queue: GangQueue, pod: PodRecord, victims: Victims,
               ask_again: Callable[[str], None], offered: OfferedVictims) -> Victims:
    """The victims worth evicting for ``pod``: for a member of a gang that is not running, only
    those Quorum's own whole-gang preemption is evicting for its gang (none when it is off).

    A refusal that only Quorum's watch can lift (the gang not known or not complete yet) is
    followed by no cluster event kube-scheduler would retry on, so ``ask_again`` marks the gang
    for the re-check its next change triggers."""
    kept = veto_gang_breaking(core, registry, victims, offered)
    gang = pod.gang_key
    if gang is None:
        return kept
    spec = core.cache.gang_spec(gang)
    if spec is None:
        # A gang Quorum does not know yet (its pods or PodGroup not delivered by the watch): it
        # cannot be judged, so nothing is evicted for it; kube-scheduler tries again later.
        ask_again(gang)
        return _refused(core, gang, "its gang is not known yet")
    if spec.preemption_policy is PreemptionPolicy.NEVER:
        return _refused(core, gang, "its PodGroup says preemptionPolicy: Never")
    if not spec.is_gang or spec.problem or spec.min_count < 1 or \
            registry.running_count(gang) >= spec.min_count:
        return kept  # not a gang, or an extra member of a running gang: it preempts like any pod
    if not core.config.preemption.enabled:
        return _refused(core, gang, "whole-gang preemption is off")
    if not _complete(core, pod, gang, spec.min_count):
        ask_again(gang)
        return _refused(core, gang, "the gang is not complete")
    return _in_plan(core, registry, queue, gang, victims, ask_again)


def _complete(core: Core, pod: PodRecord, gang: str, min_count: int) -> bool:
    """Whether minCount members exist (pending or running; the preemptor counts itself when the
    watch has not delivered it)."""
    members = core.cache.members(gang)
    alive = sum(1 for m in members if m.pending or runs(m)) + (0 if pod.uid in core.cache.pods else 1)
    return alive >= min_count


def _in_plan(core: Core, registry: GangRegistry, queue: GangQueue, gang: str, victims: Victims,
             ask_again: Callable[[str], None]) -> Victims:
    """The proposed victims Quorum's own displacement for the gang is evicting. With none, the
    plan may have been made from a lagging watch (members or victims not delivered yet): the
    gang's next change plans again."""
    state = registry.state(gang)
    registry.sync(state)
    wanted = queue.displace(gang)
    out: Victims = {}
    for node, entry in victims.items():  # a gang in Quorum's plan goes whole: no veto applies
        pods = [p for p in entry.get("Pods", []) if p.get("UID", "") in wanted]
        if pods:
            out[node] = {**entry, "Pods": pods}
    if not out:
        ask_again(gang)
        return _refused(core, gang, "no victim on these nodes is in Quorum's whole-gang plan")
    return out


def _refused(core: Core, gang: str, why: str) -> Victims:
    core.metrics.preemptions_refused.inc()
    log.info("preemption refused", extra={"gang": gang, "reason": why})
    return {}


def _breaks_gang(core: Core, registry: GangRegistry, uids: list[str], offered: OfferedVictims) -> bool:
    """Whether evicting these pods together leaves some gang running below its quorum."""
    taken: dict[str, int] = {}
    for uid in uids:
        record = core.cache.pods.get(uid)
        # Running as running_count counts it: bound in the cache, or bound by Quorum and not yet
        # shown by the watch (kube-scheduler, whose cache has it bound, proposes it as a victim).
        if record is not None and record.gang_key is not None and \
                (runs(record) or core.ledger.is_inflight(uid)):
            taken[record.gang_key] = taken.get(record.gang_key, 0) + 1
    for gang, count in taken.items():
        spec = core.cache.gang_spec(gang)
        if spec is None or not spec.is_gang or pod_by_pod(core, spec):
            continue
        if registry.running_count(gang) - count - offered.leaving(core, gang, set(uids)) < spec.min_count:
            return True
    return False
