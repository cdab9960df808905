"""Topology-aware scale-up: a gang that must fit in one domain tells cluster-autoscaler which.

The autoscaler's simulation runs only the in-tree plugins and never asks Quorum. Left alone it can
split a required-rack gang over two racks (balancing, a group's max): the gang then waits on nodes
that the autoscaler believes it uses, for ever. So when such a gang fits in no existing domain,
Quorum chooses one with the same reading of capacity as placement (where the fewest members are
missing; a domain the autoscaler said it cannot grow is not asked again for a while) and makes an
atomic ProvisioningRequest for the members missing there: a PodTemplate with a member's requests
and a nodeSelector on that domain's label, as many as do not fit in the domain's free capacity now.
The autoscaler adds those nodes or says it cannot; the gang binds whole once they exist. (For pods
that do not consume the request, asking for the whole gang would not do: the autoscaler's own
simulation counts them on the domain's free nodes, and looks for room for them on its own too.)

Pods that carry ``autoscaling.x-k8s.io/consume-provisioning-request`` are left out of the
autoscaler's own scale-up: their room comes only through the request of that name, which Quorum
makes (for such a gang, also without a required domain: then anywhere in the cluster), for the
whole gang (see ``on_nofit``). Without the
annotation the autoscaler may still add nodes for the pods themselves, and keeps them while it
believes they fit there: a gang that cannot fit at the node groups' max would hold them for good.

One request per gang at a time, under one name; writes of one gang are made in the order asked (a
new domain's request replaces a refused one of the same name). It goes when the gang binds, backs
off, is deactivated or deleted, or the autoscaler refused it (then the next domain is asked).
Requests left by an earlier Quorum (labelled as its own) that no waiting gang owns are deleted once
the caches are synced.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Awaitable, Callable, Collection, Iterable
from dataclasses import dataclass

from ..cluster.records import GangSpec, PodRecord
from ..topology.model import fits, format_resources
from .core import Core
from .registry import GangRegistry
from .serial import InOrder
from .state import GangState, Phase, set_reason

log = logging.getLogger(__name__)

_DONE = (Phase.BOUND, Phase.BACKOFF, Phase.DEACTIVATED, Phase.MISCONFIGURED)
# A domain the autoscaler refused is asked again after this long: node groups, quotas and other
# demand change, and the autoscaler itself retries a refused request on a similar backoff.
REFUSAL_MEMORY_SECONDS = 300.0
_ANYWHERE = ""  # the domain of a gang without a required one: the whole cluster


@dataclass(frozen=True, slots=True)
class ScaleUp:
    """The request a gang made: its "namespace/name", the domain asked for, how many members."""

    key: str
    level: str
    domain: str
    count: int


class Provisioner:
    def __init__(self, core: Core, registry: GangRegistry, recheck: Callable[[], None],
                 report: Callable[[GangState], None] | None = None) -> None:
        self.core = core
        self.registry = registry
        self._recheck = recheck
        self._report = report
        self.requests: dict[str, ScaleUp] = {}  # gang key -> its open request
        # gang key -> domain -> (the autoscaler's answer, when)
        self.refused: dict[str, dict[str, tuple[str, float]]] = {}
        self._writes = InOrder()  # a gang's request writes, one at a time
        self._timers: dict[str, asyncio.TimerHandle] = {}  # gang key -> when refusals expire

    @property
    def enabled(self) -> bool:
        return self.core.config.autoscaling.provisioning_requests

    # ------------------------------------------------------------------ a gang that does not fit
    def on_nofit(self, state: GangState, spec: GangSpec, pending: list[PodRecord], need: int) -> str:
        """Ask for the gang's capacity in one domain if it has a required one (or anywhere, if its
        pods consume the request); what to add to its reason ("" when nothing was asked)."""
        level = self.core.config.level_index(spec.required_topology) if spec.required_topology else None
        consumed = next((m.consumes for m in pending if m.consumes), "")
        if not self.enabled or need < 1 or not pending or (level is None and not consumed):
            return ""
        key = state.key
        namespace = key.split("/", 1)[0]
        name = consumed or _request_name(key)
        answer = self._foreign_request(key, namespace, name) or self._open_request_answer(key, pending[0])
        if answer:
            return answer
        chosen = self._least_missing(level, pending[0], need, self._refused_now(key))
        if chosen is None:
            return self._refused_everywhere(key, level)
        if chosen[1] < 1:
            return ""  # it fits there by capacity: what keeps it out is not the autoscaler's to fix
        if consumed:
            # The autoscaler still packs pods that consume a request onto free nodes when it
            # simulates, wherever they are, and may count the domain's free nodes against the
            # request as well: asked for only what is missing, it may add too few, and the gang
            # would wait for good. Asked for the whole gang, it may add a few too many, which it
            # removes once the gang has bound and the request is gone.
            chosen = (chosen[0], need)
        return self._ask(state, namespace, name, level, chosen, pending[0])

    def _foreign_request(self, key: str, namespace: str, name: str) -> str:
        """The state of a request of that name Quorum did not make, which the gang's pods consume
        ("" when there is none: Quorum's own, or none at all)."""
        found = self.core.cache.scale_ups.requests.get(f"{namespace}/{name}")
        if key not in self.requests and found is not None and not found.ours:
            return f"its pods consume ProvisioningRequest {name} ({found.state or 'not answered yet'})"
        return ""

    def _open_request_answer(self, key: str, member: PodRecord) -> str:
        """What the gang's open request says ("" when it has none, or the autoscaler refused it:
        then the refusal is remembered for its domain and the request withdrawn)."""
        open_request = self.requests.get(key)
        if open_request is None:
            return ""
        status = self.core.cache.scale_ups.requests.get(open_request.key)
        if status is None or status.state != "Failed":
            answer = status.state if status is not None and status.state else "not answered yet"
            return f"{_asked(open_request, member)} ({answer})"
        self.refused.setdefault(key, {})[open_request.domain] = (status.message, self.core.clock())
        self.withdraw(key)
        return ""

    def _refused_everywhere(self, key: str, level: int | None) -> str:
        """Every domain left was refused lately: say so (and ask again once refusals expire)."""
        refused = self.refused.get(key)
        if not refused:
            return ""
        self._ask_again_later(key)
        what = f" in any {self.core.config.levels[level].name}" if level is not None else ""
        said = "; ".join(f"{d or 'cluster'}: {why}" for d, (why, _) in sorted(refused.items()))
        return f"the autoscaler cannot add it{what} ({said})"

    def _ask(self, state: GangState, namespace: str, name: str, level: int | None,
             chosen: tuple[str, int], member: PodRecord) -> str:
        domain, missing = chosen
        label = self.core.config.levels[level].node_label if level is not None else ""
        level_name = self.core.config.levels[level].name if level is not None else "cluster"
        request = ScaleUp(f"{namespace}/{name}", level_name, domain, missing)
        self.requests[state.key] = request
        # No node carries the level's label yet: the request names no domain, and its pods must
        # share one (pod affinity on the label, which the autoscaler's simulation honours).
        selector, together = ({label: domain}, "") if domain else ({}, label)
        self._write(state.key, lambda: self.core.actions.create_scale_up(
            namespace, name, state.key, selector, dict(member.requests), missing,
            self.core.config.autoscaling.provisioning_class, together))
        log.info("scale-up requested", extra={"gang": state.key, "domain": domain, "members": missing})
        self.core.note(state, "ScaleUpRequested", f"gang {state.key}: asked the autoscaler for room for "
                                                  f"{missing} more members{_where(request)}")
        return _asked(request, member)

    def _refused_now(self, key: str) -> set[str]:
        horizon = self.core.clock() - REFUSAL_MEMORY_SECONDS
        return {d for d, (_, when) in self.refused.get(key, {}).items() if when > horizon}

    def _least_missing(self, level: int | None, member: PodRecord, need: int,
                       refused: set[str]) -> tuple[str, int] | None:
        """The domain at ``level`` where the fewest members are missing now (then the fewest nodes,
        then by name), and how many; None when no domain is left to ask."""
        best: tuple[int, int, str] | None = None
        ledger = self.core.ledger
        for value, nodes in self._domains(level):
            if value in refused:
                continue
            fitted = 0
            for name in nodes:
                free = ledger.free(name, None)
                if free is not None:
                    fitted += _how_many(free[0], free[1], member.requests)
            rank = (max(need - fitted, 0), len(nodes), value)
            if best is None or rank < best:
                best = rank
        return None if best is None else (best[2], best[0])

    def _domains(self, level: int | None) -> Iterable[tuple[str, Collection[str]]]:
        """Each domain at ``level`` with its nodes; the whole cluster when there is no level (an
        autoscaler may add nodes there even when none exists yet)."""
        cache = self.core.cache
        if level is None:
            yield _ANYWHERE, cache.nodes
            return
        prefix = f"{level}:"
        known = False
        for path, nodes in cache.domain_nodes.items():
            if path.startswith(prefix):
                known = True
                yield path.rsplit("/", 1)[-1].removeprefix(prefix), nodes
        if not known:
            yield _ANYWHERE, ()  # none known yet: one domain, whichever the autoscaler grows

    # ------------------------------------------------------------------ without a filter call
    def consider(self, key: str) -> None:
        """A member kube-scheduler found no node for. When no node passes kube-scheduler's own
        filters (none exists yet), Quorum is never asked: a gang whose pods consume the request,
        which the autoscaler leaves to Quorum, is asked for here."""
        spec = self.core.cache.gang_spec(key)
        if not self.enabled or spec is None or not spec.is_gang:
            return
        members = self.core.cache.members(key)
        pending = [m for m in members if m.pending]
        state = self.registry.gangs.get(key)
        if not any(m.consumes for m in pending) or len(members) < spec.min_count or (
                state is not None and (state.phase in _DONE or self.core.ledger.reserved_count(key))):
            return
        state = self.registry.state(key)
        asked = self.on_nofit(state, spec, pending, spec.min_count - self.core.cache.bound_count(key))
        if asked and asked not in state.reason:
            set_reason(state, f"no node can take it now; {asked}")
            self.registry.sync(state)
            if self._report is not None:
                self._report(state)

    def _ask_again_later(self, key: str) -> None:
        if key in self._timers:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timers[key] = loop.call_later(REFUSAL_MEMORY_SECONDS + 1.0, self._refusals_expired, key)

    def _refusals_expired(self, key: str) -> None:
        self._timers.pop(key, None)
        self.consider(key)
        self._recheck()

    # ------------------------------------------------------------------ clean up
    def on_phase(self, state: GangState, source: Phase, target: Phase, reason: str) -> None:
        if target in _DONE:
            self.withdraw(state.key)
            if target == Phase.BOUND:
                self._forget(state.key)

    def members_left(self, key: str) -> None:
        """A member went: a gang with no pending member left (its Job deleted) needs no room."""
        if key in self.requests and not any(m.pending for m in self.core.cache.members(key)):
            self.gang_removed(key)

    def gang_removed(self, key: str) -> None:
        self.withdraw(key)
        self._forget(key)

    def _forget(self, key: str) -> None:
        self.refused.pop(key, None)
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer.cancel()

    def withdraw(self, key: str) -> None:
        request = self.requests.pop(key, None)
        if request is not None:
            namespace, name = request.key.split("/", 1)
            self._write(key, lambda: self.core.actions.delete_scale_up(namespace, name))

    def _write(self, key: str, make: Callable[[], Awaitable[bool]]) -> None:
        """Run a write of the gang's request after its earlier ones: a request replaced under the
        same name must be deleted before it is made again."""
        self.core.spawn(self._writes.run(key, make))

    def on_status(self, request_key: str) -> None:
        """The autoscaler answered (or a request went): the gang's answer may change."""
        self.core.cache.capacity_version += 1  # a remembered no-fit names the request's state
        for gang, request in list(self.requests.items()):
            if request.key == request_key:
                self.consider(gang)
        self._recheck()

    def sweep(self) -> None:
        """Delete Quorum's requests that no waiting gang owns (left by an earlier Quorum)."""
        if not self.enabled:
            return
        owned = {r.key for r in self.requests.values()}
        for key, status in list(self.core.cache.scale_ups.requests.items()):
            if status.ours and key not in owned:
                namespace, name = key.split("/", 1)
                self.core.spawn(self.core.actions.delete_scale_up(namespace, name))


def _where(request: ScaleUp) -> str:
    if request.domain:
        return f" in {request.level} {request.domain}"
    return " anywhere in the cluster" if request.level == "cluster" else f" in any one {request.level}"


def _asked(request: ScaleUp, member: PodRecord) -> str:
    return (f"asked the autoscaler for room for {request.count} more × {format_resources(member.requests)}"
            f"{_where(request)}")


def _how_many(free: dict[str, int], pods_free: int, requests: dict[str, int]) -> int:
    """How many pods of ``requests`` fit into one node's free capacity."""
    if not fits(free, pods_free, requests):
        return 0
    counts = [free.get(name, 0) // amount for name, amount in requests.items() if amount > 0]
    return min([pods_free, *counts])


def _request_name(gang: str) -> str:
    """quorum-<gang name>-<hash of the gang>: one name per gang, within 253 characters."""
    digest = hashlib.sha256(gang.encode()).hexdigest()[:10]
    name = gang.split("/")[-1].lower()[:200]
    return f"quorum-{name}-{digest}"
