"""Evicting a gang all or none: ask first, then evict, and never stop short.

A PodDisruptionBudget may refuse the eviction of any member. Evicting members one by one until
one is refused would leave the gang partly running, which is what gang scheduling exists to
prevent. So before any member of a gang is evicted, the eviction of every member is asked with a
dry run; if any is refused, none is evicted and the refusals say why (the budget named when the
apiserver names it). A real eviction refused after its dry run passed (the budget changed in
between) is tried again until the pod is gone.

Several reasons may want one gang gone at once (its readiness timeout, a preemption that chose it):
they are asked together, so none is lost while another waits on a budget.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ..cluster.records import PodRecord
from .core import ClusterActions, Core, EvictionFailed
from .effects import WARNING
from .registry import GangRegistry
from .state import GangState

log = logging.getLogger(__name__)

REFUSAL_RETRY_SECONDS = 5.0  # the first wait after a refusal; it doubles each time
REFUSAL_RETRY_MAX_SECONDS = 60.0


def refusal_delay(refusals: int) -> float:
    """How long to wait after the ``refusals``-th refusal in a row (1 for the first)."""
    delay: float = REFUSAL_RETRY_SECONDS * 2.0 ** max(refusals - 1, 0)
    return min(delay, REFUSAL_RETRY_MAX_SECONDS)


async def _ask(actions: ClusterActions, pod: PodRecord, reason: str) -> str:
    try:
        await actions.evict_pod(pod.namespace, pod.name, pod.uid, reason, dry_run=True)
    except EvictionFailed as exc:
        return str(exc)
    except Exception as exc:  # no answer is no permission: the gang stays whole
        return f"the eviction of {pod.key} could not be checked: {exc or type(exc).__name__}"
    return ""


async def refusals(actions: ClusterActions, pods: list[PodRecord], reason: str) -> dict[str, str]:
    """Ask (dry run) whether every pod may be evicted: the refused ones, pod key -> why."""
    answers = await asyncio.gather(*(_ask(actions, pod, reason) for pod in pods))
    return {pod.key: answer for pod, answer in zip(pods, answers, strict=True) if answer}


def refusal_note(refused: dict[str, str], total: int) -> str:
    """One line for an Event or a gang's reason: how many were refused, and the first refusal."""
    first = next(iter(sorted(refused.items())))[1] if refused else ""
    return f"eviction of {len(refused)} of {total} member(s) refused, so none was evicted: {first}"


def report_gang_refusal(core: Core, registry: GangRegistry, state: GangState, reason: str, note: str,
                        attempt: int) -> None:
    """Say why a gang due to be evicted still runs whole: its reason, an Event, a metric."""
    core.metrics.evictions.labels("dry-run-refused").inc()
    log.warning("gang eviction refused", extra={"gang": state.key, "reason": reason, "note": note,
                                                "attempt": attempt})
    core.note(state, "EvictionRefused", f"{reason}; {note}", WARNING)
    registry.sync(state, f"{reason}; {note}")


@dataclass(slots=True)
class EvictionAsk:
    """One reason to evict a gang whole, waiting until every member's budget allows it."""

    reason: str
    why: str
    backoff: bool
    event: str
    due: Callable[[GangState], bool] | None  # still wanted? (None: while the gang runs)
    on_refused: Callable[[str, str], None] | None  # told of a refusal, instead of trying again
    tried: bool = False


class WholeGangEvictions:
    """The gangs whose members' evictions are being asked, each with every reason that wants it
    gone. A reason that arrives while another is being asked joins it and cuts short the wait for
    the next try: a preemption that chooses a gang whose readiness requeue a budget holds off hears
    of the refusal at once, and a readiness timeout during a preemption's dry run is not dropped
    when the preemption gives the gang up."""

    def __init__(self, core: Core, registry: GangRegistry,
                 victims: Callable[[GangState], list[PodRecord]],
                 evict: Callable[[GangState, EvictionAsk], None]) -> None:
        self.core = core
        self.registry = registry
        self._victims = victims
        self._evict = evict
        self._asks: dict[str, list[EvictionAsk]] = {}
        self._wake: dict[str, asyncio.Future[None]] = {}

    def asking(self, key: str) -> bool:
        """Whether a gang's evictions are being asked (nothing of it evicted yet)."""
        return key in self._asks

    def ask(self, state: GangState, ask: EvictionAsk) -> None:
        asks = self._asks.get(state.key)
        if asks is None:
            self._asks[state.key] = [ask]
            self.core.spawn(self._check(state.key))
            return
        asks.append(ask)
        waker = self._wake.get(state.key)
        if waker is not None and not waker.done():
            waker.set_result(None)

    async def _check(self, key: str) -> None:
        attempt = 0
        try:
            while (state := self._wanted(key, after_dry_run=False)) is not None:
                victims = [v for v in self._victims(state) if v.uid not in state.evicting]
                refused = await refusals(self.core.actions, victims, self._asks[key][-1].reason)
                if (state := self._wanted(key, after_dry_run=True)) is None:
                    return
                lead = self._asks[key][-1]  # the latest reason says why the gang goes
                if not refused:
                    self._evict(state, lead)
                    return
                attempt += 1
                note = refusal_note(refused, len(victims))
                report_gang_refusal(self.core, self.registry, state, lead.reason, note, attempt)
                self._refused(key, note)
                if self._asks[key] and all(a.tried for a in self._asks[key]):
                    await self._pause(key, refusal_delay(attempt))
        finally:
            self._asks.pop(key, None)
            self._wake.pop(key, None)

    def _wanted(self, key: str, after_dry_run: bool) -> GangState | None:
        """The gang, while some reason still wants it gone: before a dry run, one not tried yet or
        still due; after one, any whose own ``due`` (when it has one) still holds."""
        state = self.registry.gangs.get(key)
        if state is None:
            return None
        asks = self._asks.get(key, [])
        if after_dry_run:
            kept = [a for a in asks if a.due is None or a.due(state)]
        else:
            kept = [a for a in asks if not a.tried or (a.due(state) if a.due else state.started)]
        self._asks[key] = kept
        return state if kept else None

    def _refused(self, key: str, note: str) -> None:
        """Tell the reasons that look elsewhere on a refusal; the others are tried again."""
        told = [a for a in self._asks[key] if a.on_refused is not None]
        self._asks[key] = [a for a in self._asks[key] if a.on_refused is None]
        for ask in self._asks[key]:
            ask.tried = True
        for ask in told:
            assert ask.on_refused is not None
            ask.on_refused(key, note)

    async def _pause(self, key: str, seconds: float) -> None:
        """Wait before the next try, or until another reason joins."""
        loop = asyncio.get_running_loop()
        waker: asyncio.Future[None] = loop.create_future()
        self._wake[key] = waker
        timer = loop.call_later(seconds, _settle, waker)
        try:
            await waker
        finally:
            timer.cancel()
            self._wake.pop(key, None)


def _settle(waker: asyncio.Future[None]) -> None:
    if not waker.done():
        waker.set_result(None)
