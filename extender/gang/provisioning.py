"""Topology-aware scale-up: a gang that must fit in one domain tells cluster-autoscaler which.

The autoscaler's simulation runs only the in-tree plugins and never asks Quorum. Left alone it can
split a required-rack gang over two racks (balancing, a group's max): the gang then waits on nodes
that the autoscaler believes it uses, for ever. So when such a gang fits in no existing domain,
Quorum chooses one with the same reading of capacity as placement (where the fewest members are
missing; a domain the autoscaler said it cannot grow is not asked again) and makes an atomic
ProvisioningRequest for the members missing there: a PodTemplate with a member's requests and a
nodeSelector on that domain's label, as many as do not fit in the domain's free capacity now. The
autoscaler adds those nodes or says it cannot; the gang binds whole once they exist. (Asking for the
whole gang would not do: the autoscaler's own simulation already counts the gang's pending pods on
the domain's free nodes, so it would look for room for them twice.)

One request per gang at a time. It goes when the gang binds, backs off, is deactivated or deleted,
or the autoscaler refused it (then the next domain is asked). Requests left by an earlier Quorum
(labelled as its own) that no waiting gang owns are deleted once the caches are synced.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..cluster.records import GangSpec, PodRecord
from ..topology.model import fits, format_resources
from .core import Core
from .state import GangState, Phase

log = logging.getLogger(__name__)

_DONE = (Phase.BOUND, Phase.BACKOFF, Phase.DEACTIVATED, Phase.MISCONFIGURED)


@dataclass(frozen=True, slots=True)
class ScaleUp:
    """The request a gang made: its "namespace/name", the domain asked for, how many members."""

    key: str
    level: str
    domain: str
    count: int


class Provisioner:
    def __init__(self, core: Core, recheck: Callable[[], None]) -> None:
        self.core = core
        self._recheck = recheck
        self.requests: dict[str, ScaleUp] = {}  # gang key -> its open request
        self.refused: dict[str, dict[str, str]] = {}  # gang key -> domain -> the autoscaler's answer
        core.observers.append(self.on_phase)
        core.cache.scale_ups.on_change = self.on_status

    @property
    def enabled(self) -> bool:
        return self.core.config.autoscaling.provisioning_requests

    # ------------------------------------------------------------------ a gang that does not fit
    def on_nofit(self, state: GangState, spec: GangSpec, pending: list[PodRecord], need: int) -> str:
        """Ask for the gang's capacity in one domain if it has a required one; what to add to its
        reason ("" when nothing was asked)."""
        level = self.core.config.level_index(spec.required_topology) if spec.required_topology else None
        if not self.enabled or level is None or need < 1 or not pending:
            return ""
        key = state.key
        open_request = self.requests.get(key)
        if open_request is not None:
            status = self.core.cache.scale_ups.requests.get(open_request.key)
            if status is None or status.state != "Failed":
                answer = status.state if status is not None and status.state else "not answered yet"
                return f"{_asked(open_request, pending[0])} ({answer})"
            self.refused.setdefault(key, {})[open_request.domain] = status.message
            self.withdraw(key)
        chosen = self._least_missing(level, pending[0], need, set(self.refused.get(key, {})))
        levels = self.core.config.levels
        if chosen is not None and chosen[1] < 1:
            return ""  # it fits there by capacity: what keeps it out is not the autoscaler's to fix
        if chosen is None:
            refused = self.refused.get(key)
            if not refused:
                return ""
            said = "; ".join(f"{d}: {why}" for d, why in sorted(refused.items()))
            return f"the autoscaler cannot add it in any {levels[level].name} ({said})"
        domain, missing = chosen
        namespace, name = key.split("/", 1)[0], _request_name(key, domain)
        request = ScaleUp(f"{namespace}/{name}", levels[level].name, domain, missing)
        self.requests[key] = request
        selector = {levels[level].node_label: domain}
        self.core.spawn(self.core.actions.create_scale_up(
            namespace, name, key, selector, dict(pending[0].requests), missing,
            self.core.config.autoscaling.provisioning_class))
        log.info("scale-up requested", extra={"gang": key, "domain": domain, "members": missing})
        self.core.note(state, "ScaleUpRequested", f"gang {key}: asked the autoscaler for room for "
                                                  f"{missing} more members in {request.level} {domain}")
        return _asked(request, pending[0])

    def _least_missing(self, level: int, member: PodRecord, need: int,
                       refused: set[str]) -> tuple[str, int] | None:
        """The domain at ``level`` where the fewest members are missing now (then the fewest nodes,
        then by name), and how many; None when no node carries that level's label."""
        best: tuple[int, int, str] | None = None
        cache, ledger = self.core.cache, self.core.ledger
        prefix = f"{level}:"
        for path, nodes in cache.domain_nodes.items():
            if not path.startswith(prefix):
                continue
            value = path.rsplit("/", 1)[-1].removeprefix(prefix)
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

    # ------------------------------------------------------------------ clean up
    def on_phase(self, state: GangState, source: Phase, target: Phase, reason: str) -> None:
        if target in _DONE:
            self.withdraw(state.key)
            if target == Phase.BOUND:
                self.refused.pop(state.key, None)

    def members_left(self, key: str) -> None:
        """A member went: a gang with no pending member left (its Job deleted) needs no room."""
        if key in self.requests and not any(m.pending for m in self.core.cache.members(key)):
            self.gang_removed(key)

    def gang_removed(self, key: str) -> None:
        self.withdraw(key)
        self.refused.pop(key, None)

    def withdraw(self, key: str) -> None:
        request = self.requests.pop(key, None)
        if request is not None:
            namespace, name = request.key.split("/", 1)
            self.core.spawn(self.core.actions.delete_scale_up(namespace, name))

    def on_status(self, request_key: str) -> None:
        """The autoscaler answered (or a request went): the gang's answer may change."""
        self.core.cache.capacity_version += 1  # a remembered no-fit names the request's state
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


def _asked(request: ScaleUp, member: PodRecord) -> str:
    return (f"asked the autoscaler for room for {request.count} more × {format_resources(member.requests)} "
            f"in {request.level} {request.domain}")


def _how_many(free: dict[str, int], pods_free: int, requests: dict[str, int]) -> int:
    """How many pods of ``requests`` fit into one node's free capacity."""
    if not fits(free, pods_free, requests):
        return 0
    counts = [free.get(name, 0) // amount for name, amount in requests.items() if amount > 0]
    return min([pods_free, *counts])


def _request_name(gang: str, domain: str) -> str:
    """quorum-<gang name>-<hash of gang and domain>: one name per gang and domain, within 253."""
    digest = hashlib.sha256(f"{gang}\0{domain}".encode()).hexdigest()[:10]
    name = gang.split("/")[-1].lower()[:200]
    return f"quorum-{name}-{digest}"
