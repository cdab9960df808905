"""What the gang core asks of the cluster after the bind, as plain values.

The core decides; ``adapters.kube`` carries it out. These types are the vocabulary between them:
which object an Event is about, and which PodGroup conditions and bookkeeping annotations Quorum
owns. Keeping them here (not in the adapter) lets the core and its tests name them without I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# PodGroup bookkeeping kept on the object itself, so a restarted Quorum resumes where it was.
from ..cluster.gang_sources import ANNOTATION_BACKOFF_UNTIL as ANNOTATION_BACKOFF_UNTIL
from ..cluster.gang_sources import ANNOTATION_DEACTIVATED as ANNOTATION_DEACTIVATED
from ..cluster.gang_sources import ANNOTATION_REQUEUES as ANNOTATION_REQUEUES
from ..cluster.records import GangHome

# Event types, as events.k8s.io/v1 spells them.
NORMAL = "Normal"
WARNING = "Warning"

# PodGroup condition types: the native ones Quorum sets because the scheduler's own gang handling
# is off in Quorum's profile, and Quorum's own.
CONDITION_INITIALLY_SCHEDULED = "PodGroupInitiallyScheduled"
# Upstream's planned live condition (KEP-6413): at least minCount members scheduled right now.
CONDITION_SATISFIED = "PodGroupSatisfied"
CONDITION_PODS_READY = "quorum.dev/PodsReady"
CONDITION_RECOVERING = "quorum.dev/Recovering"
CONDITION_DEACTIVATED = "quorum.dev/Deactivated"
CONDITION_STARTED = "quorum.dev/GangStarted"
CONDITION_MESSAGE_LIMIT = 32768  # metav1.Condition validation: longer messages are cut here


@dataclass(frozen=True, slots=True)
class ObjectRef:
    """The object an Event is about (events.k8s.io/v1 ``regarding``)."""

    kind: str  # "Pod" or "PodGroup"
    api_version: str  # "v1" or "scheduling.k8s.io/v1beta1"
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class GangCondition:
    """One PodGroup status condition Quorum owns (server-side applied with field manager quorum)."""

    type: str
    status: bool
    reason: str  # CamelCase, as Kubernetes conditions require
    message: str


class NoActions:
    """Side effects that do nothing: for benchmarks and fuzzing, which measure or probe the
    request path and must not be slowed or broken by what goes to the cluster. Fakes in tests
    subclass it and record what they need."""

    async def bind_pod(self, namespace: str, name: str, uid: str, node: str) -> None:
        return None

    async def requeue_pods(self, pods: list[Any], reason: str, wanted: Callable[[Any], bool]) -> None:
        return None

    async def evict_pod(self, namespace: str, name: str, uid: str, reason: str,
                        grace_seconds: int | None = None, dry_run: bool = False) -> None:
        return None

    def record_event(self, regarding: ObjectRef, type_: str, reason: str, action: str, note: str) -> None:
        return None

    async def set_gang_conditions(self, home: GangHome, conditions: list[GangCondition]) -> None:
        return None

    async def annotate_gang(self, home: GangHome, annotations: dict[str, str | None]) -> bool:
        return True

    async def annotate_pod(self, namespace: str, name: str, annotations: dict[str, str | None]) -> bool:
        return True

    async def write_started_configmap(self, namespace: str, name: str, owner: GangHome | None,
                                      data: dict[str, str]) -> bool:
        return True

    async def delete_started_configmap(self, namespace: str, name: str) -> bool:
        return True

    async def create_scale_up(self, namespace: str, name: str, gang: str, node_selector: dict[str, str],
                              requests: dict[str, int], count: int, class_name: str,
                              together: str = "") -> bool:
        return True

    async def delete_scale_up(self, namespace: str, name: str) -> bool:
        return True
