"""The settings Quorum runs with, as typed values with their defaults (``loading.py`` reads them)."""

from __future__ import annotations

from dataclasses import dataclass, field

ANNOTATION_PREFIX = "quorum.dev/"


class ConfigError(ValueError):
    """Invalid configuration; the message names the offending field."""


@dataclass(frozen=True, slots=True)
class TopologyLevel:
    name: str
    node_label: str


@dataclass(frozen=True, slots=True)
class GangTimings:
    bind_timeout_seconds: float = 60.0
    backoff_base_seconds: float = 5.0
    backoff_max_seconds: float = 300.0
    max_replans: int = 3
    # Bindings in flight at once; a gang's batch starts whole (0: no limit; a larger gang goes
    # alone). Interleaved at a busy apiserver, a gang's bindings spread over hundreds of
    # milliseconds; 24 lets a gang of 16 start beside the last 8 of the one before.
    bindings_at_once: int = 24


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """What happens after a gang's quorum is bound (the waitForPodsReady story).

    Both timeouts are off (0) by default: turning them on means Quorum may evict running pods.
    """

    pods_ready_timeout_seconds: float = 0.0  # quorum bind -> minCount members Ready; 0 = off
    recovery_timeout_seconds: float = 0.0  # below minCount after running -> requeue; 0 = off
    backoff_base_seconds: float = 60.0  # requeue backoff: base * 2^(n-1) + jitter, capped
    backoff_max_seconds: float = 3600.0
    backoff_jitter: float = 0.1  # up to this fraction of the delay is added at random
    backoff_limit_count: int | None = None  # requeues before the gang is deactivated; None = no limit
    replace_outside_domain: bool = False  # replacements that no longer fit the domain: re-place whole
    started_config_maps: bool = False  # write the gang-started ConfigMaps gangs ask for (needs RBAC)


@dataclass(frozen=True, slots=True)
class Starvation:
    """The head-of-line claim that keeps a large gang from waiting for ever (see docs/design.md).

    The highest-ordered waiting gang that does not fit earmarks the domain where the least
    capacity is missing; lower-ordered work may not take capacity there, so it fills up as running
    pods finish.
    """

    enabled: bool = True
    claim_after_seconds: float = 60.0  # head of the queue this long (and not fitting) -> claim
    claim_on_priority: bool = True  # a head gang above every other waiting gang in priority claims at once


@dataclass(frozen=True, slots=True)
class Preemption:
    """Whole-gang preemption by Quorum, on by default as priority preemption is in Kubernetes.

    A waiting gang at the head of the queue that does not fit displaces strictly lower-priority
    work: whole gangs and plain pods of any scheduler, fewest first, through the Eviction API; its
    domain is claimed meanwhile. Pods with ``preemptionPolicy: Never`` displace nothing; off, Quorum
    evicts nothing for a gang and takes kube-scheduler's per-pod proposals for gang members away.
    """

    enabled: bool = True
    # Victims still terminating after this long no longer hold up a new plan (a budget refused them).
    victim_grace_seconds: float = 120.0
    # A native PodGroup saying ``disruptionMode: single`` may lose members one by one to preemption,
    # as kube-scheduler's own group preemption does. Off: every gang is evicted whole, whatever its
    # PodGroup says (the apiserver of 1.37 fills in ``single`` when a PodGroup names no mode).
    honor_disruption_mode: bool = False


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """HTTPS on the verbs' port (``listen.tls``); ``client_ca_file`` turns on client verification."""

    cert_file: str
    key_file: str
    client_ca_file: str = ""
    client_names: tuple[str, ...] = ()  # with mTLS: only these certificate names may call the verbs
    reload_seconds: float = 10.0


DEFAULT_LEVELS = (
    TopologyLevel("block", "topology.quorum.dev/block"),
    TopologyLevel("rack", "topology.quorum.dev/rack"),
    TopologyLevel("host", "kubernetes.io/hostname"),
)


@dataclass(frozen=True, slots=True)
class Autoscaling:
    """Topology-aware scale-up (off by default: on, Quorum creates ProvisioningRequests).

    A gang with a required domain that fits in no existing one asks cluster-autoscaler for its
    capacity in one domain, the one where the least is missing, through an atomic request; so does
    any gang whose pods consume a ProvisioningRequest (the autoscaler leaves those pods to it).
    """

    provisioning_requests: bool = False
    provisioning_class: str = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """Quorum's own identity when its pod runs as another ServiceAccount (the Helm chart's pod is
    kube-scheduler's): in cluster, Quorum asks the TokenRequest API for an expiring token of
    ``service_account`` with the pod's projected token, and asks again before it expires."""

    service_account: str
    namespace: str = ""  # "" = the pod's own namespace
    expiration_seconds: int = 3600
    refresh_seconds: float = 0.0  # 0 = when 80% of the token's lifetime has passed


@dataclass(frozen=True, slots=True)
class Config:
    host: str = "127.0.0.1"
    port: int = 8888
    tls: TlsSettings | None = None
    scheduler_names: tuple[str, ...] = ()  # schedulerNames: profiles whose pods /bind accepts (empty: any)
    metrics_port: int = 0  # > 0: /metrics and /debug/* on this port (plain HTTP), not on the verbs' port
    metrics_host: str = ""  # the address for metrics_port ("" = listen.host); e.g. 0.0.0.0 for scrapes
    kubeconfig: str = ""
    token_request: TokenRequest | None = None  # tokenRequest: in cluster only
    levels: tuple[TopologyLevel, ...] = DEFAULT_LEVELS
    kueue_topology: str = ""  # a Kueue Topology whose spec.levels replace ``levels`` (read at start)
    gang: GangTimings = field(default_factory=GangTimings)
    lifecycle: Lifecycle = field(default_factory=Lifecycle)
    starvation: Starvation = field(default_factory=Starvation)
    preemption: Preemption = field(default_factory=Preemption)
    autoscaling: Autoscaling = field(default_factory=Autoscaling)
    max_request_bytes: int = 32 * 1024 * 1024
    body_timeout_seconds: float = 10.0  # a request body must arrive within this (else HTTP 408)
    log_level: str = "info"
    log_format: str = "json"
    check_invariants: bool = False  # debug.checkInvariants: verify the core after every call

    def level_index(self, name_or_label: str) -> int | None:
        """Resolve a topology reference given as a level name ("rack") or a node label key."""
        for i, level in enumerate(self.levels):
            if name_or_label in (level.name, level.node_label):
                return i
        return None
