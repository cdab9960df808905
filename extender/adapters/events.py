"""Kubernetes Events (events.k8s.io/v1) that a waiting gang cannot turn into an apiserver flood.

A gang that does not fit is filtered again and again, and the core reports each time. Sending every
report would write thousands of identical Events, so, like client-go's events.k8s.io recorder, the
first occurrence creates an Event and repeats only count up in memory; the count reaches the
apiserver as the Event's ``series`` at most once per ``SERIES_INTERVAL_SECONDS``. A token bucket
caps the writes overall (new Events beyond it are dropped and counted), and the memory of what was
sent is a bounded LRU whose entries expire, so nothing here grows with the cluster's age.

``record`` never blocks and never raises: it only queues. A flusher task on the running event loop
does the writes through the ``Send`` callable it was given (``KubeClient.write``), so this module
does no I/O of its own and can be tested with a fake.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import time
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from ..gang.effects import ObjectRef

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "quorum.dev/extender"
SERIES_INTERVAL_SECONDS = 30.0  # at most one series PATCH per Event this often
ENTRY_TTL_SECONDS = 600.0  # an Event not seen again for this long is forgotten (a repeat creates anew)
MAX_KEYS = 4096  # distinct Events remembered at once (least recently seen dropped first)
RATE_PER_SECOND = 20.0  # writes (creates and series patches) per second, sustained
BURST = 100
CREATE_TRIES = 3  # a create that did not reach the apiserver is tried again, this often in all
NOTE_LIMIT_BYTES = 1024  # events.k8s.io/v1 validation: note is at most 1 kB
FIELD_LIMIT = 128  # action, reason, reportingInstance
_TICK_SECONDS = 1.0  # how often the flusher looks for series counts that are due
_CLOSE_FLUSH_SECONDS = 2.0

# method, path, body, content type -> (HTTP status, body); transport errors raise.
Send = Callable[[str, str, bytes, str], Awaitable[tuple[int, bytes]]]

# (regarding kind/namespace/name, regarding uid, type, reason, action, note)
_Key = tuple[str, str, str, str, str, str]


def micro_time(seconds: float) -> str:
    """RFC 3339 in UTC with microseconds: the MicroTime that eventTime and series times need."""
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def truncate_utf8(text: str, limit: int) -> str:
    """At most ``limit`` UTF-8 bytes (the apiserver counts bytes), never splitting a character."""
    raw = text.encode()
    return text if len(raw) <= limit else raw[:limit].decode(errors="ignore")


class TokenBucket:
    """``rate`` tokens per second up to ``burst``; ``take`` says whether one was available."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float]) -> None:
        self.rate, self.burst, self._clock = rate, float(burst), clock
        self._tokens = float(burst)
        self._at = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + max(0.0, now - self._at) * self.rate)
        self._at = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True


@dataclass(slots=True, eq=False)
class _Series:
    """One distinct Event: what was created, and how many times it has been seen since."""

    key: _Key
    namespace: str
    name: str
    body: dict[str, Any]
    last_seen: float  # recorder clock
    last_seen_wall: float  # wall clock, for series.lastObservedTime
    count: int = 1  # occurrences seen
    sent_count: int = 1  # occurrences the apiserver knows of
    created: bool = False
    last_sent: float = 0.0  # recorder clock of the last write
    tries: int = 0  # creates attempted


class EventRecorder:
    """Aggregating, rate-limited Event writer; see the module docstring for the rules."""

    def __init__(self, send: Send, *, clock: Callable[[], float] = time.monotonic,
                 wall: Callable[[], float] = time.time, instance: str | None = None,
                 rate: float = RATE_PER_SECOND, burst: int = BURST, max_keys: int = MAX_KEYS,
                 ttl: float = ENTRY_TTL_SECONDS, interval: float = SERIES_INTERVAL_SECONDS,
                 on_result: Callable[[str], None] | None = None) -> None:
        self._send, self._clock, self._wall = send, clock, wall
        self.instance = truncate_utf8(instance or socket.gethostname() or "quorum", FIELD_LIMIT)
        self._bucket = TokenBucket(rate, burst, clock)
        self._max_keys, self._ttl, self._interval = max_keys, ttl, interval
        self._on_result = on_result
        self._series: OrderedDict[_Key, _Series] = OrderedDict()  # least recently seen first
        self._pending: deque[_Series] = deque()  # first occurrences not created yet
        # Series seen again since their last write: the flusher looks at these only, not at every
        # remembered Event (up to ``max_keys``) once a second.
        self._owing: dict[_Key, _Series] = {}
        self._task: asyncio.Task[None] | None = None
        self._wakeup: asyncio.Event | None = None
        self._flushing: asyncio.Lock | None = None  # one flush at a time: the flusher's or a caller's
        # Counters for metrics and tests: each outcome once per occurrence or write.
        self.created = 0  # Events created
        self.patched = 0  # series updates written
        self.aggregated = 0  # repeats folded into an existing Event
        self.dropped = 0  # new Events over the rate limit or the queue bound, never sent
        self.failed = 0  # writes the apiserver refused or that did not reach it

    @property
    def remembered(self) -> int:
        """Distinct Events held in memory (bounded by ``max_keys``)."""
        return len(self._series)

    # ------------------------------------------------------------------ the caller's side
    def record(self, regarding: ObjectRef, type_: str, reason: str, action: str, note: str) -> None:
        """Queue one occurrence; synchronous, never blocks, never raises."""
        try:
            self._record(regarding, type_, reason, action, note)
        except Exception:  # a report must never break the decision that made it
            log.debug("event not recorded", extra={"regarding": regarding.key, "reason": reason},
                      exc_info=True)

    def _record(self, regarding: ObjectRef, type_: str, reason: str, action: str, note: str) -> None:
        now = self._clock()
        self._expire(now)
        # The note is part of the key: a changed situation deserves its own Event, since an Event's
        # note is never rewritten, only its count.
        key: _Key = (regarding.key, regarding.uid, type_, reason, action, note)
        series = self._series.get(key)
        if series is not None:
            series.count += 1
            series.last_seen, series.last_seen_wall = now, self._wall()
            self._series.move_to_end(key)
            self._owing[key] = series
            self._count("aggregated")
            self._ensure_flusher()  # queued before a loop ran: its count still has to go out
            return
        if len(self._pending) >= self._max_keys or not self._bucket.take():
            self._count("dropped")
            return
        series = self._new_series(key, regarding, type_, reason, action, note, now)
        self._series[key] = series
        if len(self._series) > self._max_keys:
            self._series.popitem(last=False)
        self._pending.append(series)
        self._ensure_flusher()
        if self._wakeup is not None:
            self._wakeup.set()

    def _new_series(self, key: _Key, regarding: ObjectRef, type_: str, reason: str, action: str,
                    note: str, now: float) -> _Series:
        wall = self._wall()
        # An explicit name (not generateName) so the series PATCH needs nothing from the response;
        # the base is trimmed to keep a valid DNS subdomain of at most 253 characters.
        name = f"{regarding.name[:236].rstrip('-.')}.{secrets.token_hex(8)}"
        body: dict[str, Any] = {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": regarding.namespace},
            "eventTime": micro_time(wall),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance,
            "action": truncate_utf8(action, FIELD_LIMIT),
            "reason": truncate_utf8(reason, FIELD_LIMIT),
            "note": truncate_utf8(note, NOTE_LIMIT_BYTES),
            "type": type_,
            "regarding": {"kind": regarding.kind, "apiVersion": regarding.api_version,
                          "namespace": regarding.namespace, "name": regarding.name},
        }
        if regarding.uid:
            body["regarding"]["uid"] = regarding.uid
        return _Series(key, regarding.namespace, name, body, now, wall)

    def _expire(self, now: float) -> None:
        """Forget Events not seen for ``ttl``; the map is ordered by last sighting, oldest first."""
        while self._series:
            oldest = next(iter(self._series.values()))
            if now - oldest.last_seen <= self._ttl:
                return
            self._series.popitem(last=False)

    def _count(self, result: str) -> None:
        setattr(self, result, getattr(self, result) + 1)
        if self._on_result is not None:
            self._on_result(result)

    # ------------------------------------------------------------------ the flusher
    def _ensure_flusher(self) -> None:
        """Start the flusher on the running loop; with no running loop, events just stay queued."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._task is not None and not self._task.done() and self._task.get_loop() is loop:
            return
        self._wakeup = asyncio.Event()
        self._task = loop.create_task(self._run(), name="quorum-events")

    async def _run(self) -> None:
        assert self._wakeup is not None
        wakeup = self._wakeup
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wakeup.wait(), _TICK_SECONDS)
            wakeup.clear()
            try:
                await self.flush()
            except Exception:  # the flusher outlives any one bad write
                log.debug("event flush failed", exc_info=True)

    async def flush(self) -> None:
        """Create queued Events, then write the series counts that are due.

        Serialized, so a caller's ``await flush()`` returns only after every write the flusher had
        under way is done (and no series count is written twice).
        """
        if self._flushing is None:
            self._flushing = asyncio.Lock()
        async with self._flushing:
            while self._pending:
                await self._create(self._pending.popleft())
            for series in self._due(self._clock()):
                if not self._bucket.take():  # over the limit: the count waits, it is not lost
                    return
                await self._patch(series)

    def _due(self, now: float) -> list[_Series]:
        """Owing series whose count may be written now; the settled and the forgotten leave."""
        due = []
        for key, series in list(self._owing.items()):
            if self._series.get(key) is not series or series.count <= series.sent_count:
                del self._owing[key]
            elif series.created and now - series.last_sent >= self._interval:
                due.append(series)
        return due

    async def _create(self, series: _Series) -> None:
        path = f"/apis/events.k8s.io/v1/namespaces/{series.namespace}/events"
        series.tries += 1
        status = await self._write(series, "POST", path, orjson.dumps(series.body), "application/json")
        if status in (200, 201) or (status == 409 and series.tries > 1):  # 409: the first try got there
            series.created, series.last_sent = True, self._clock()
            self._count("created")
        elif status == 0 and series.tries < CREATE_TRIES:
            # It did not reach the apiserver (a kept-alive connection the server had just closed):
            # the Event has an explicit name, so trying again cannot write it twice.
            self._pending.append(series)
        else:
            self._forget(series)  # the next occurrence tries a new Event
            self._count("failed")

    async def _patch(self, series: _Series) -> None:
        count = series.count
        patch = {"series": {"count": count, "lastObservedTime": micro_time(series.last_seen_wall)}}
        path = f"/apis/events.k8s.io/v1/namespaces/{series.namespace}/events/{series.name}"
        status = await self._write(series, "PATCH", path, orjson.dumps(patch),
                                   "application/merge-patch+json")
        series.last_sent = self._clock()  # also after a failure: retried next interval, not at once
        if status == 200:
            series.sent_count = count
            self._count("patched")
            return
        if status == 404:  # expired in the apiserver (event TTL): the next occurrence creates anew
            self._forget(series)
        self._count("failed")

    async def _write(self, series: _Series, method: str, path: str, body: bytes, content_type: str) -> int:
        """One request; 0 when it did not reach the apiserver. Logged at debug, never raised."""
        try:
            status, text = await self._send(method, path, body, content_type)
        except Exception as exc:
            log.debug("event write failed", extra={"event": series.name, "error": str(exc)})
            return 0
        if status not in (200, 201):
            log.debug("event write refused", extra={"event": series.name, "status": status,
                                                    "body": text[:200].decode(errors="replace")})
        return status

    def _forget(self, series: _Series) -> None:
        if self._series.get(series.key) is series:
            del self._series[series.key]

    async def close(self) -> None:
        """Stop the flusher, then give queued Events one short, best-effort chance to be written."""
        task, self._task = self._task, None
        if task is not None and task.get_loop() is asyncio.get_running_loop():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._pending:
            try:
                await asyncio.wait_for(self.flush(), _CLOSE_FLUSH_SECONDS)
            except Exception:
                log.debug("events not flushed at close", exc_info=True)
