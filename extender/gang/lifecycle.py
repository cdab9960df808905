"""After the bind: readiness timeout, recovery, requeue with backoff, deactivation.

A gang that reached quorum is *started*. From then on Quorum still watches it:

- **Readiness**: from the quorum bind, ``minCount`` members must become Ready within the readiness
  timeout (``lifecycle.podsReadyTimeoutSeconds`` or the gang's annotation), else it is requeued.
- **Recovery**: a started gang that falls below ``minCount`` running members (a pod failed, was
  deleted or evicted, its node was deleted), or below ``minCount`` Ready ones after it had been
  Ready, is Recovering. Replacement pods are placed near the survivors by the ordinary filter path
  (the survivors pin the domain); members stranded on a deleted node are evicted so their owner
  recreates them. ``lifecycle.recoveryTimeoutSeconds`` bounds the wait, then the gang is requeued.
- **Requeue**: every running member is evicted through the Eviction API (the owning controller
  recreates them) and the gang backs off ``base * 2^(n-1)`` plus jitter, capped; past
  ``backoffLimitCount`` requeues it is deactivated instead, until its declaration changes or the
  deactivation annotation is removed. Count, backoff end and deactivation are written on the
  PodGroup, so a restarted Quorum resumes them.

Nothing here changes a phase directly: it changes facts (started, Ready, backoff, deactivated) and
lets ``GangRegistry.sync`` derive the phase.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable

from ..cluster.records import GangHome, GangSpec, PodRecord
from .core import Core, EvictionFailed, runs
from .effects import ANNOTATION_BACKOFF_UNTIL, ANNOTATION_DEACTIVATED, ANNOTATION_REQUEUES, WARNING
from .evictions import EvictionAsk, WholeGangEvictions, refusal_delay
from .registry import GangRegistry, tally
from .retry import Retry
from .started import StartedSignal
from .state import AfterBind, GangState, Phase, mark_started
from .timers import Deadline, doubling

log = logging.getLogger(__name__)



class Lifecycle:
    def __init__(self, core: Core, registry: GangRegistry, retry: Retry, started_signal: StartedSignal,
                 rand: Callable[[], float] = random.random) -> None:
        self.core = core
        self.registry = registry
        self.retry = retry
        self._rand = rand
        self.started_signal = started_signal
        self._after_bind = registry.table(AfterBind)
        self._evictions = WholeGangEvictions(core, registry, self._victims, self._requeue_asked)

    # ------------------------------------------------------------------ settings
    def ready_timeout(self, spec: GangSpec | None) -> float:
        if spec is not None and spec.pods_ready_timeout is not None:
            return spec.pods_ready_timeout
        return self.core.config.lifecycle.pods_ready_timeout_seconds

    def recovery_timeout(self, spec: GangSpec | None) -> float:
        if spec is not None and spec.recovery_timeout is not None:
            return spec.recovery_timeout
        return self.core.config.lifecycle.recovery_timeout_seconds

    def replace_outside(self, spec: GangSpec | None) -> bool:
        if spec is not None and spec.replace_outside_domain is not None:
            return spec.replace_outside_domain
        return self.core.config.lifecycle.replace_outside_domain

    def backoff_delay(self, requeues: int) -> float:
        """``base * 2^(n-1)``, capped, plus up to ``jitter`` of it at random (n = this requeue)."""
        cfg = self.core.config.lifecycle
        delay = doubling(cfg.backoff_base_seconds, requeues - 1, cfg.backoff_max_seconds)
        return delay + delay * cfg.backoff_jitter * self._rand()

    # ------------------------------------------------------------------ phase changes
    def on_phase(self, state: GangState, source: Phase, target: Phase, reason: str) -> None:
        """Arm and disarm the readiness and recovery deadlines as the gang moves."""
        timers, notes = self.registry.timers, self._after_bind.of(state)
        if target == Phase.BOUND:
            timers.cancel(state.key, Deadline.RECOVERY)
            notes.recovering_since = 0.0
            self.review(state.key, sync=False)
            if not state.pods_ready and not timers.armed(state.key, Deadline.READY):
                self._arm_ready(state)
        elif target == Phase.RECOVERING:
            if not notes.recovering_since:
                notes.recovering_since = self.core.clock()
                log.info("gang recovering", extra={"gang": state.key, "reason": reason})
            timeout = self.recovery_timeout(self.core.cache.gang_spec(state.key))
            if timeout and not timers.armed(state.key, Deadline.RECOVERY) and \
                    not self._left_to_kueue(state, "recovery"):
                timers.arm(state.key, Deadline.RECOVERY, timeout, self._recovery_expired)
        elif target in (Phase.BACKOFF, Phase.DEACTIVATED, Phase.PENDING, Phase.WAITING_FOR_MEMBERS):
            if not state.started:
                timers.cancel(state.key, Deadline.READY, Deadline.RECOVERY)
                notes.recovering_since = 0.0

    def review(self, key: str, sync: bool = True) -> None:
        """Re-read a gang's members: a started gang may be Ready at quorum, finishing, or losing
        members; then (with ``sync``) its phase follows."""
        state = self.registry.gangs.get(key)
        if state is None:
            return
        if state.started:
            self._note_health(state)
        if sync:
            self.registry.sync(state)

    def _note_health(self, state: GangState) -> None:
        core, key = self.core, state.key
        state.finished.update(core.cache.membership.members_in("succeeded", key))
        if state.completing:
            self.registry.timers.cancel(key, Deadline.READY, Deadline.RECOVERY)
        spec = core.cache.gang_spec(key)
        min_count = core.min_count(state, spec)
        if not state.pods_ready and min_count and self.registry.ready_count(key) >= min_count:
            state.pods_ready = True
            self.registry.timers.cancel(key, Deadline.READY)
            log.info("gang pods ready", extra={"gang": key})
            core.note(state, "PodsReady", f"gang {key}: {min_count} members Ready")
        self.started_signal.review(state)

    # ------------------------------------------------------------------ deadlines
    def _arm_ready(self, state: GangState) -> None:
        timeout = self.ready_timeout(self.core.cache.gang_spec(state.key))
        if timeout > 0 and self._left_to_kueue(state, "readiness"):
            return
        if timeout > 0:
            self.registry.timers.arm(state.key, Deadline.READY, timeout, self._ready_expired)

    def _left_to_kueue(self, state: GangState, what: str) -> bool:
        """Whether Kueue admitted the gang's workload: then its ``waitForPodsReady`` owns the
        readiness and recovery requeues (docs/kueue.md), and Quorum's own deadlines stand back, so
        that the two never both evict the same gang. Said once per bind, as an Event."""
        if not any(m.kueue_admitted for m in self.core.cache.members(state.key)):
            return False
        self.core.note(state, "LeftToKueue", f"gang {state.key}: Kueue admitted its workload; its {what} "
                                             "requeue is Kueue's (waitForPodsReady), not Quorum's")
        return True

    def _ready_expired(self, key: str) -> None:
        core = self.core
        state = self.registry.gangs.get(key)
        if state is None or not state.started or state.pods_ready or state.completing:
            return
        spec = core.cache.gang_spec(key)
        timeout = self.ready_timeout(spec)
        ready, needed = self.registry.ready_count(key), core.min_count(state, spec)
        self.requeue(state, f"gang {key}: {tally(ready, needed, 'Ready')} within {timeout:g}s of the "
                            f"quorum bind (readiness timeout)", "readiness-timeout",
                     due=lambda s: s.started and not s.pods_ready and not s.completing)

    def _recovery_expired(self, key: str) -> None:
        core = self.core
        state = self.registry.gangs.get(key)
        if state is None or state.phase not in (Phase.RECOVERING, Phase.BINDING) or not state.started:
            return
        spec = core.cache.gang_spec(key)
        timeout = self.recovery_timeout(spec)
        counted = tally(self.registry.running_count(key), core.min_count(state, spec), "running")
        self.requeue(state, f"gang {key}: not recovered within {timeout:g}s ({counted})", "recovery-timeout",
                     due=lambda s: s.started and s.phase in (Phase.RECOVERING, Phase.BINDING))

    # ------------------------------------------------------------------ requeue
    def requeue(self, state: GangState, reason: str, why: str, backoff: bool = True,
                event: str = "Replacing", due: Callable[[GangState], bool] | None = None,
                on_refused: Callable[[str, str], None] | None = None) -> None:
        """Evict every running member and back the gang off, or deactivate it past the limit.

        Without ``backoff`` (re-placing a gang whose domain cannot take its replacements, or a gang
        preempted whole) the gang is placed again at once, the requeue count does not grow, and the
        Event says ``event``.

        The members' evictions are asked first (a dry run): when any is refused nothing is
        evicted and the gang stays as it is. Then ``on_refused(gang, why)`` is told, if given (a
        preemption looks for other victims); else the whole check is tried again with a backoff
        for as long as ``due`` says the requeue is still wanted (by default: while it runs).
        """
        if not self._victims(state):
            self._requeue_now(state, reason, why, backoff, event)
        else:
            self._evictions.ask(state, EvictionAsk(reason, why, backoff, event, due, on_refused))

    def checking(self, key: str) -> bool:
        """Whether the evictions of a gang's members are being asked (nothing evicted yet)."""
        return self._evictions.asking(key)

    def _victims(self, state: GangState) -> list[PodRecord]:
        """Running members, and those whose bind succeeded before the watch showed it (also those
        whose pods it has not shown at all)."""
        core = self.core
        victims = [m for m in core.cache.members(state.key) if runs(m) or core.ledger.is_inflight(m.uid)]
        return victims + core.ledger.unseen_members(state.key)

    def _requeue_asked(self, state: GangState, ask: EvictionAsk) -> None:
        self._requeue_now(state, ask.reason, ask.why, ask.backoff, ask.event)

    def _requeue_now(self, state: GangState, reason: str, why: str, backoff: bool, event: str) -> None:
        core = self.core
        self.evict(self._victims(state), reason)  # marked at once: from here they no longer count as running
        self.registry.release(state, reason, "requeue")
        self.registry.timers.cancel(state.key, Deadline.READY, Deadline.RECOVERY)
        mark_started(state, False)
        state.pods_ready = False
        self.started_signal.reset(state)
        self._after_bind.of(state).recovering_since = 0.0
        limit = core.config.lifecycle.backoff_limit_count
        core.metrics.requeues.labels(why).inc()
        if not backoff:
            core.note(state, event, reason, WARNING)
            self.registry.sync(state, reason)
        elif limit is not None and state.requeues >= limit:
            state.deactivated = f"{reason}; deactivated after {state.requeues} requeue(s)"
            self.persist(state, {ANNOTATION_DEACTIVATED: state.deactivated})
            log.warning("gang deactivated", extra={"gang": state.key, "reason": state.deactivated})
            self.registry.sync(state, f"gang {state.key}: {state.deactivated}")
        else:
            state.requeues += 1
            delay = self.backoff_delay(state.requeues)
            self.persist(state, {ANNOTATION_REQUEUES: str(state.requeues),
                                 ANNOTATION_BACKOFF_UNTIL: f"{core.wall() + delay:.3f}"})
            log.warning("gang requeued", extra={"gang": state.key, "reason": reason,
                                                "requeues": state.requeues, "seconds": delay})
            core.note(state, "Requeued", f"{reason}; requeue {state.requeues}, backing off {delay:.0f}s",
                      WARNING)
            self.retry.hold(state, delay, f"{reason}; requeued ({state.requeues}), backing off {delay:.0f}s")

    def evict(self, victims: list[PodRecord], reason: str, force: bool = False) -> None:
        for pod in victims:
            state = self.registry.gangs.get(pod.gang_key or "")
            if state is not None:
                state.evicting.add(pod.uid)
        if victims:
            self.core.spawn(self._evict_all(victims, reason, force))

    def forget_evicted(self, pod: PodRecord) -> None:
        """The watch shows an evicted member gone or on its way out: it no longer needs a mark."""
        state = self.registry.gangs.get(pod.gang_key or "")
        if state is not None:
            state.evicting.discard(pod.uid)

    async def _evict_all(self, victims: list[PodRecord], reason: str, force: bool) -> None:
        await asyncio.gather(*(self._evict_one(pod, reason, force) for pod in victims))

    async def _evict_one(self, pod: PodRecord, reason: str, force: bool) -> None:
        """Evict until the pod is gone: a refusal after the dry run passed (a budget that changed
        in between) is reported once and tried again, so no member is left running forgotten."""
        core, attempt = self.core, 0
        while self._still_there(pod):
            try:
                await core.actions.evict_pod(pod.namespace, pod.name, pod.uid, reason,
                                             grace_seconds=0 if force else None)
            except Exception as exc:  # refused, or the apiserver unreachable: try again
                attempt += 1
                self._eviction_refused(pod, reason, exc, attempt)
                await asyncio.sleep(refusal_delay(attempt))
                continue
            core.metrics.evictions.labels("evicted").inc()
            core.note_pod(pod, "Evicted", reason, WARNING)
            return
        self.forget_evicted(pod)

    def _still_there(self, pod: PodRecord) -> bool:
        """The pod, not one recreated under its name, is still there and not on its way out."""
        current = self.core.cache.pods.get(pod.uid)
        if current is None:  # bound before the watch showed it, or never shown at all
            unseen = self.core.ledger.unseen_members(pod.gang_key) if pod.gang_key else []
            return pod.uid in self.core.ledger.inflight() or any(m.uid == pod.uid for m in unseen)
        return not current.deleting and not current.terminal

    def _eviction_refused(self, pod: PodRecord, reason: str, exc: Exception, attempt: int) -> None:
        core = self.core
        refused = isinstance(exc, EvictionFailed)
        log.info("eviction refused" if refused else "eviction failed",
                 extra={"pod": pod.key, "attempt": attempt, "error": str(exc)})
        if attempt == 1:  # reported once; the Event aggregates, the metric counts pods
            core.metrics.evictions.labels("refused" if refused else "error").inc()
            core.note_pod(pod, "EvictionRefused", f"{reason}; eviction refused, trying again until the "
                                                  f"pod is gone: {exc}", WARNING)

    def forget_stamped(self, pod: PodRecord) -> None:
        state = self.registry.gangs.get(pod.gang_key or "")
        if state is not None:
            self._after_bind.of(state).stamped.discard(pod.uid)

    def node_deleted(self, node: str) -> None:
        """Members bound to a node that is gone will never run again: remove them now (as pod GC
        would, about a minute later) so that their owners create replacements."""
        core = self.core
        stranded = [m for key in list(self.registry.gangs) for m in core.cache.members(key)
                    if m.node_name == node and runs(m)]
        if stranded:
            self.evict(stranded, f"node {node} was deleted", force=True)
        for key in sorted({m.gang_key for m in stranded if m.gang_key}):
            self.review(key)  # they no longer count as running: the gang is recovering

    # ------------------------------------------------------------------ bookkeeping
    def persist(self, state: GangState, annotations: dict[str, str | None]) -> None:
        """Write requeue bookkeeping on the gang's PodGroup, or on the members of a gang declared
        by annotations (and on each member created later: ``stamp``)."""
        spec = self.core.cache.gang_spec(state.key)
        if spec is None:
            return
        notes = self._after_bind.of(state)
        if spec.home is None:
            notes.stamp = {k: v for k, v in {**notes.stamp, **annotations}.items() if v is not None}
            notes.stamped.clear()
            for member in self.core.cache.members(state.key):
                self.stamp(member, annotations)
            return
        expected = (state.requeues, state.deactivated)
        notes.expected_bookkeeping = expected
        self.core.spawn(self._write(state, spec.home, annotations, expected))

    def stamp(self, pod: PodRecord, change: dict[str, str | None] | None = None) -> None:
        """Give a member of an annotation gang the bookkeeping its gang carries (once per pod), or
        ``change`` it on the members that have it."""
        state = self.registry.gangs.get(pod.gang_key or "")
        if state is None or pod.uid in state.evicting or pod.deleting or pod.terminal:
            return
        notes = self._after_bind.of(state)
        if pod.uid in notes.stamped:
            return
        annotations = dict(notes.stamp) if change is None else change
        if annotations:
            notes.stamped.add(pod.uid)
            self.core.spawn(self.core.actions.annotate_pod(pod.namespace, pod.name, annotations))

    async def _write(self, state: GangState, home: GangHome, annotations: dict[str, str | None],
                     expected: tuple[int, str]) -> None:
        written = await self.core.actions.annotate_gang(home, annotations)
        notes = self._after_bind.of(state)
        if not written and notes.expected_bookkeeping == expected:
            notes.expected_bookkeeping = None  # it will never come back: trust the watch again

    def adopt(self, state: GangState, spec: GangSpec) -> None:
        """Take over the bookkeeping an earlier instance (or this one) wrote on the PodGroup."""
        core, notes = self.core, self._after_bind.of(state)
        if notes.expected_bookkeeping is not None:
            if notes.expected_bookkeeping != (spec.requeues, spec.deactivated):
                return  # the watch has not delivered Quorum's own last write yet
            notes.expected_bookkeeping = None
        if spec.requeues > state.requeues:
            state.requeues = spec.requeues
            left = spec.backoff_until - core.wall()
            if left > 0 and state.backoff_until <= core.clock():
                self.retry.hold(state, left, f"gang {state.key}: requeued ({spec.requeues}), backing off "
                                             f"{left:.0f}s (resumed)")
        if spec.deactivated:
            notes.deactivation_seen = True
            if not state.deactivated:
                state.deactivated = spec.deactivated
                self.registry.sync(state, f"gang {state.key}: {spec.deactivated}")
        elif state.deactivated and notes.deactivation_seen:
            self._reactivate(state, "its deactivation annotation was removed")

    def declaration_changed(self, state: GangState, spec: GangSpec) -> None:
        """A changed declaration is a new start: quorum must be reached again; deactivation ends."""
        if not spec.is_gang or self.registry.running_count(state.key) < spec.min_count:
            self.forget_start(state)
        if state.deactivated:
            self._reactivate(state, "its declaration changed")
            return
        self.adopt(state, spec)

    def forget_start(self, state: GangState) -> None:
        """The gang is no longer the one that ran (its PodGroup went, or it is not a gang now)."""
        mark_started(state, False)
        state.pods_ready = False
        state.finished.clear()
        self.started_signal.reset(state)
        self._after_bind.of(state).recovering_since = 0.0
        self.registry.timers.cancel(state.key, Deadline.READY, Deadline.RECOVERY)

    def _reactivate(self, state: GangState, why: str) -> None:
        state.deactivated = ""
        self._after_bind.of(state).deactivation_seen = False
        state.requeues = 0
        self.persist(state, {ANNOTATION_DEACTIVATED: None, ANNOTATION_REQUEUES: None,
                             ANNOTATION_BACKOFF_UNTIL: None})
        self.registry.sync(state, f"gang {state.key}: reactivated ({why})")
        self.retry.nudge_gang(state.key, "reactivated")
