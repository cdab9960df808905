"""Evicting a gang all or none: ask first, then evict, and never stop short.

A PodDisruptionBudget may refuse the eviction of any member. Evicting members one by one until
one is refused would leave the gang partly running, which is what gang scheduling exists to
prevent. So before any member of a gang is evicted, the eviction of every member is asked with a
dry run; if any is refused, none is evicted and the refusals say why (the budget named when the
apiserver names it). A real eviction refused after its dry run passed (the budget changed in
between) is tried again until the pod is gone.
"""

from __future__ import annotations

import asyncio
import logging

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
