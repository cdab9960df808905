"""Prometheus metrics, all under the ``quorum_`` prefix and in base units.

Each app gets its own registry so tests (and several apps in one process) never share counters.
Gauges that mirror state (gangs per state, cache objects, reservations) are computed at scrape time
from the source of truth instead of being kept in step by hand — they cannot drift or leak.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

_LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5, 30)
_WAIT_BUCKETS = (0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1800, 3600)
_LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5)


class _StateCollector(Collector):
    def __init__(self, name: str, doc: str, label: str, read: Callable[[], Mapping[str, int]]) -> None:
        self._name, self._doc, self._label, self._read = name, doc, label, read

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(self._name, self._doc, labels=[self._label] if self._label else [])
        values = self._read()
        for key, value in sorted(values.items()):
            family.add_metric([key] if self._label else [], value)
        yield family


class _CountCollector(Collector):
    """A counter kept by its owner in a plain dict of label values -> count, read at scrape time."""

    def __init__(self, name: str, doc: str, labels: tuple[str, ...],
                 counts: Mapping[tuple[str, str], int]) -> None:
        self._name, self._doc, self._labels, self._counts = name, doc, labels, counts

    def collect(self) -> Iterable[CounterMetricFamily]:
        family = CounterMetricFamily(self._name, self._doc, labels=list(self._labels))
        for values, count in sorted(self._counts.items()):
            family.add_metric(list(values), count)
        yield family


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.request_duration = Histogram(
            "quorum_request_duration_seconds",
            "Time to answer one extender request, by verb and outcome.",
            ["verb", "outcome"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.node_forms = Counter(
            "quorum_candidate_nodes_total",
            "Filter and prioritize calls by how kube-scheduler sent the candidate nodes: names "
            "(nodeCacheCapable: true) or objects (nodeCacheCapable: false, whole Node objects).",
            ["verb", "form"],
            registry=r,
        )
        self.gang_wait = Histogram(
            "quorum_gang_wait_seconds",
            "Time from a gang being first seen to its quorum being bound.",
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.gang_binds = Histogram(
            "quorum_gang_bind_seconds",
            "From a gang's quorum to the apiserver's last answer to the bindings sent for it: "
            "the upper bound of its bind skew that Quorum sees.",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.loop_lag = Histogram(
            "quorum_event_loop_lag_seconds",
            "How late the event loop ran a timer that was due (sampled every 0.25 s): while it is "
            "late, no request is answered and no binding is sent.",
            buckets=_LAG_BUCKETS,
            registry=r,
        )
        self.binds = Counter(
            "quorum_binds_total", "Pod bindings answered, by outcome.", ["outcome"], registry=r
        )
        self.placements = Counter(
            "quorum_placements_total", "Whole-gang placement attempts, by result.", ["result"], registry=r
        )
        self.reservation_timeouts = Counter(
            "quorum_reservation_timeouts_total",
            "Reservations released because quorum was not reached within the bind timeout.",
            registry=r,
        )
        self.reservation_releases = Counter(
            "quorum_reservation_releases_total",
            "Reservations released before binding, by reason.",
            ["reason"],
            registry=r,
        )
        self.transitions = Counter(
            "quorum_gang_transitions_total",
            "Gang phase changes, by the phase left and the phase entered.",
            ["from_phase", "to_phase"],
            registry=r,
        )
        self.invariant_violations = Counter(
            "quorum_invariant_violations_total",
            "Violations found by the run-time invariant check (debug.checkInvariants); 0 when healthy.",
            registry=r,
        )
        self.preemptions_refused = Counter(
            "quorum_preemptions_refused_total",
            "Preemptions refused for a gang member because its whole gang would not fit even with "
            "the proposed victims gone (nothing is evicted for nothing).",
            registry=r,
        )
        self.claims = Counter(
            "quorum_claims_total",
            "Head-of-line claims (capacity earmarked for the first waiting gang), by event (made, "
            "released).", ["event"], registry=r)
        self.preemptions = Counter(
            "quorum_preemptions_total",
            "Victims Quorum evicted to fit a waiting gang, by kind (gang: a whole gang; pod: a plain "
            "pod).", ["kind"], registry=r)
        self.token_requests = Counter(
            "quorum_token_requests_total",
            "TokenRequests for Quorum's own ServiceAccount token (tokenRequest), by result.",
            ["result"], registry=r)
        self.backoffs = Counter("quorum_gang_backoffs_total", "Gangs put into backoff.", registry=r)
        self.nudges = Counter(
            "quorum_nudges_total",
            "Pod annotation patches that make kube-scheduler retry a member, by result (sent; "
            "skipped: the pod was bound or being bound by the time a write slot was free).",
            ["result"], registry=r)
        self.requeues = Counter(
            "quorum_gang_requeues_total",
            "Started gangs evicted whole and requeued, by cause (readiness-timeout, recovery-timeout, "
            "replace).", ["reason"], registry=r)
        self.evictions = Counter(
            "quorum_evictions_total", "Pods Quorum evicted, by result (evicted; refused, error: tried again; "
            "dry-run-refused: a gang left whole).",
            ["result"], registry=r)
        self.rechecks = Counter(
            "quorum_gang_rechecks_total",
            "Gangs asked to retry because the cluster changed right after they were rejected "
            "(kube-scheduler may have retried them before Quorum's watch saw the change).",
            registry=r,
        )
        self.objects_rejected = Counter(
            "quorum_objects_rejected_total",
            "API objects skipped because they cannot be parsed (invalid-quantity, invalid-object), "
            "or kept with a quantity clamped beyond any capacity (beyond-capacity), by kind and reason.",
            ["kind", "reason"],
            registry=r,
        )
        self.events = Counter(
            "quorum_events_total",
            "Kubernetes Events by result: created, patched (a series count written), aggregated (a "
            "repeat folded into an existing Event), dropped (over the rate limit) or failed (a write).",
            ["result"],
            registry=r,
        )
        self.watch_restarts = Counter(
            "quorum_watch_restarts_total", "Watch streams restarted, by kind and reason.", ["kind", "reason"],
            registry=r,
        )
        # (kind, type) -> watch events applied. Every event of the cluster is counted, so a plain
        # dict read at scrape time: a prometheus Counter's locked increment was 2% of the CPU Quorum
        # spent following a run of another scheduler's pods.
        self.watch_events: collections.Counter[tuple[str, str]] = collections.Counter()
        r.register(_CountCollector(
            "quorum_watch_events",
            "Watch events the informer applied, by kind and type (ADDED, MODIFIED, DELETED, BOOKMARK, "
            "other): what following the cluster costs, and what Quorum's CPU is spent on when idle.",
            ("kind", "type"), self.watch_events))

    def track_state(
        self,
        gangs: Callable[[], Mapping[str, int]],
        cache_objects: Callable[[], Mapping[str, int]],
        reservations: Callable[[], Mapping[str, int]],
        queue: Callable[[], Mapping[str, int]] | None = None,
    ) -> None:
        """Register scrape-time gauges read from the coordinator and the cache."""
        self.registry.register(
            _StateCollector("quorum_gangs", "Gangs known, by state.", "state", gangs)
        )
        self.registry.register(
            _StateCollector("quorum_cache_objects", "Objects in the informer cache, by kind.", "kind",
                            cache_objects)
        )
        self.registry.register(
            _StateCollector("quorum_reserved_pods", "Gang members holding a reservation, not yet bound.",
                            "", reservations)
        )
        if queue is not None:
            self.registry.register(_StateCollector(
                "quorum_queue", "The gang queue: waiting gangs (waiting), claims held (claims; 0 or 1) "
                "and nodes earmarked by them (claimed_nodes).", "what", queue))
