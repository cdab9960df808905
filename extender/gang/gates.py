"""Filter as a sequence of named gates, each deciding or passing the pod on.

For a gang member, the gates run in this order and the first that decides answers the call:

1. ``declaration``: the gang's PodGroup must exist and its declaration must be valid; a ``basic``
   group is not a gang, so its pods schedule like any other. Then ``deactivated``: a gang past its
   requeue limit is rejected until it is reactivated.
2. ``running``: a gang already at quorum takes further members as ordinary extras. Then
   ``already_bound``: a member the watch shows bound (or whose bind Quorum made) keeps its node;
   kube-scheduler asks about it when its cache lags, e.g. when it retries a bind it got no answer to.
3. ``reservation``: a reserved member is answered its reserved node (or the gang is re-planned
   when the scheduler's own filters no longer pass that node).
4. ``backoff``: a gang backing off is rejected until the backoff ends.
5. ``quorum``: fewer than minCount schedulable members: rejected on every node.
6. ``reserved_for_others``: the gang holds a reservation this member is not part of.
7. ``nofit_memo``: the same no-fit answer while nothing it depends on has moved.
8. ``placement``: place the whole gang and reserve (``Coordinator.place``).

Pods outside gangs pass through ``protect_reservations`` only. Gang rejections are
*unresolvable*: evicting single pods cannot make a gang fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..cluster.composites import parts_short
from ..cluster.jobsets import declaring_kind
from ..cluster.records import GangSpec, PodRecord
from ..topology.placement import fits
from .core import Core
from .registry import GangRegistry
from .state import GangState, end_backoff


class FilterDecision:
    """A filter answer, resolved against the request's candidates only when it is read.

    Three forms: an explicit list of passing nodes (``FilterDecision(candidates, passing=[...])``);
    every candidate except the rejected ones (``except_rejected``); every candidate rejected for one
    reason (``everywhere``). The last two name only nodes from the request *by construction*
    (``exact``), so the wire layer need not check them node by node, and a request that repeats or
    omits names cannot make the answer name a node it did not offer.
    """

    __slots__ = ("_everywhere", "_failed", "_passing", "_rejected", "_unresolvable", "candidates", "exact")

    def __init__(self, candidates: list[str], passing: list[str] | None = None) -> None:
        self.candidates = candidates
        self._passing = passing
        self._failed: dict[str, str] = {}
        self._unresolvable: dict[str, str] | None = {} if passing is not None else None
        self._rejected: dict[str, str] = {}
        self._everywhere = ""
        self.exact = passing is candidates

    @classmethod
    def except_rejected(cls, candidates: list[str], rejected: dict[str, str]) -> FilterDecision:
        """Every candidate passes except those in ``rejected`` (unresolvable, with their reason)."""
        decision = cls(candidates)
        decision._rejected = rejected
        decision.exact = True
        return decision

    @classmethod
    def everywhere(cls, candidates: list[str], reason: str) -> FilterDecision:
        """Every candidate is rejected (unresolvable) for ``reason``."""
        decision = cls(candidates, [])
        decision._everywhere = reason
        decision._unresolvable = None
        decision.exact = True
        return decision

    @property
    def reason(self) -> str:
        """The one reason of an ``everywhere`` rejection ("" otherwise)."""
        return self._everywhere

    def _resolve(self) -> None:
        if self._everywhere:
            self._unresolvable = dict.fromkeys(self.candidates, self._everywhere)
            return
        rejected = self._rejected
        present: dict[str, bool] = {}
        mark = present.setdefault  # records a rejected name the request offered (returns falsy)
        self._passing = [n for n in self.candidates if n not in rejected or mark(n, False)]
        self._unresolvable = {n: rejected[n] for n in present}

    @property
    def passing(self) -> list[str]:
        if self._passing is None:
            self._resolve()
        assert self._passing is not None
        return self._passing

    @property
    def rejects_everything(self) -> bool:
        """No node passes: kube-scheduler parks the pod until something wakes it."""
        return bool(self._everywhere) or not self.passing

    @property
    def failed(self) -> dict[str, str]:
        return self._failed

    @property
    def unresolvable(self) -> dict[str, str]:
        if self._unresolvable is None:
            self._resolve()
        assert self._unresolvable is not None
        return self._unresolvable


def reject_all(candidates: list[str], reason: str) -> FilterDecision:
    """Gang rejections are unresolvable: evicting single pods cannot make a gang fit."""
    return FilterDecision.everywhere(candidates, reason)


@dataclass(slots=True)
class GateInput:
    pod: PodRecord
    spec: GangSpec
    state: GangState
    members: list[PodRecord]
    candidates: list[str]
    known: bool  # the cache holds this pod (else kube-scheduler is ahead of our watch)


def protect_reservations(core: Core, pod: PodRecord, candidates: list[str],
                         own_gang: str | None) -> FilterDecision:
    """Pods outside a reserving gang may use any node, except capacity reserved for a gang or
    earmarked for the head of the queue (unless the pod ranks above it)."""
    claim = core.earmarks.blocking(own_gang, pod.priority) if core.earmarks is not None else None
    if not core.ledger.any_reserved and claim is None:
        return FilterDecision(candidates, candidates)
    # Decide the (few) reserved nodes; they are dropped from the candidates when the answer is read.
    rejected: dict[str, str] = {}
    if claim is not None:
        rejected = dict.fromkeys(claim.nodes, claim.reason(core.clock()))
    for name, view in core.ledger.protected().items():
        if own_gang is not None and view.holders == (own_gang,):
            continue
        if not fits(view.free, view.pods_free, pod.requests):
            rejected[name] = view.reason
    if not rejected:
        return FilterDecision(candidates, candidates)
    return FilterDecision.except_rejected(candidates, rejected)


def declaration_gate(core: Core, key: str, spec: GangSpec | None, pod: PodRecord,
                     candidates: list[str]) -> FilterDecision | None:
    if spec is None:
        return reject_all(candidates, f"gang {key}: waiting for its {declaring_kind(key)} to exist")
    if spec.problem or spec.min_count < 1:
        problem = spec.problem or f"invalid min count {spec.min_count}"
        return reject_all(candidates, f"gang {key}: {problem} ({spec.source})")
    if not spec.is_gang:
        return protect_reservations(core, pod, candidates, own_gang=key)
    return None


def deactivated_gate(core: Core, g: GateInput) -> FilterDecision | None:
    """A gang past its requeue limit is not scheduled again until reactivated."""
    if g.state.deactivated:
        return reject_all(g.candidates, f"gang {g.state.key}: {g.state.deactivated}; change its "
                                        f"declaration or remove the quorum.dev/deactivated annotation")
    return None


def running_gate(core: Core, registry: GangRegistry, g: GateInput) -> FilterDecision | None:
    if registry.running_count(g.state.key) >= g.spec.min_count and not core.ledger.reserved_node(g.pod.uid):
        # Quorum is running: extra members schedule normally, away from other reservations.
        return protect_reservations(core, g.pod, g.candidates, own_gang=g.state.key)
    return None


def already_bound_gate(core: Core, g: GateInput) -> FilterDecision | None:
    """A member that is no longer waiting for a node is never placed again: it passes only the node
    it is bound on (a bound member that is not offered its node, or one that finished or is being
    deleted, is rejected with the reason)."""
    if not g.known or (g.pod.pending and not core.ledger.is_inflight(g.pod.uid)):
        return None
    node = g.pod.node_name or core.ledger.inflight_node(g.pod.uid)
    if node and node in g.candidates:
        return FilterDecision(g.candidates, [node])
    if node:
        return reject_all(g.candidates, f"pod {g.pod.key} is already bound to node {node}")
    return reject_all(g.candidates, f"pod {g.pod.key} is not waiting for a node (finished, deleted "
                                    f"or held by a scheduling gate)")


def backoff_gate(core: Core, registry: GangRegistry, g: GateInput) -> FilterDecision | None:
    wait = g.state.backoff_until - core.clock()
    if wait > 0:
        return reject_all(g.candidates, f"gang {g.state.key}: {g.state.reason} ({wait:.0f}s left)")
    if g.state.backoff_until:
        # Over, but its timer has not fired yet (it runs on the loop's clock): end it here.
        end_backoff(g.state)
        registry.sync(g.state, f"gang {g.state.key}: backoff over")
    return None


def quorum_gate(core: Core, g: GateInput) -> FilterDecision | None:
    alive = core.cache.membership.alive_count(g.state.key) + (0 if g.known else 1)
    if alive >= g.spec.min_count and not g.spec.min_parts:
        return None
    if alive >= g.spec.min_count:  # a composite: each PodGroup needs its own members
        counted = [m for m in g.members if m.counts_for_quorum and not m.deleting]
        short = parts_short(g.spec, counted if g.known else [*counted, g.pod])
        return reject_all(g.candidates, f"gang {g.state.key}: {short}") if short else None
    missing = g.spec.min_count - alive
    gated = sum(1 for m in g.members if m.gated and not m.terminal and not m.deleting)
    held_back = f" ({gated} held by scheduling gates)" if gated else ""
    return reject_all(
        g.candidates,
        f"gang {g.state.key}: {alive}/{g.spec.min_count} pods exist{held_back}, waiting for {missing}",
    )


def reserved_for_others_gate(core: Core, g: GateInput) -> FilterDecision | None:
    if g.state.binds_in_flight:
        return reject_all(g.candidates, f"gang {g.state.key}: binding its quorum; retry when bound")
    if core.ledger.reserved_count(g.state.key):
        # This member appeared after the reservation was made, before quorum: it waits for the
        # reserved members and becomes an extra once they are bound.
        return reject_all(g.candidates, f"gang {g.state.key}: reserved for other members, "
                                        f"waiting for them to bind")
    return None
