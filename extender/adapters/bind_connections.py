"""The bindings' own connections to the apiserver, in two tiers.

A gang's bindings go out at once, so a burst of gangs opens many connections (up to about a hundred
during a cluster benchmark). Kept open, each idle TLS connection holds a read buffer (asyncio's
256 KiB then, 64 KiB now: ``event_loop.TLS_READ_BYTES``): a hundred of them kept Quorum's resident
memory 30 MiB above what it needs after the burst. So a few connections stay open for long (a gang
binding after a quiet spell finds them ready, with no TLS handshake in front of its bindings) and
the rest, opened for a burst, close soon after it.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp

SessionFactory = Callable[[aiohttp.TCPConnector], aiohttp.ClientSession]


@dataclass(frozen=True, slots=True)
class BindTiers:
    """How many bindings the kept tier carries at once, and how long each tier's idle connections
    stay open; ``burst`` is how many more bindings may be in flight beyond the kept ones."""

    kept: int = 16
    kept_idle_seconds: float = 120.0
    burst: int = 84
    burst_idle_seconds: float = 10.0


class BindConnections:
    """Leases a session for one binding: the kept tier's while it has a free connection, else the
    burst tier's. The kept tier never carries more bindings than it keeps connections, so its
    connections are the ones reused first and the burst tier's go idle, then close."""

    def __init__(self, ssl_context: ssl.SSLContext | bool, make_session: SessionFactory,
                 tiers: BindTiers) -> None:
        self._ssl = ssl_context
        self._make_session = make_session
        self.tiers = tiers
        self._kept: aiohttp.ClientSession | None = None
        self._burst: aiohttp.ClientSession | None = None
        self.kept_in_flight = 0

    def _session(self, kept: bool) -> aiohttp.ClientSession:
        if kept:
            if self._kept is None:
                self._kept = self._open(self.tiers.kept, self.tiers.kept_idle_seconds)
            return self._kept
        if self._burst is None:
            self._burst = self._open(self.tiers.burst, self.tiers.burst_idle_seconds)
        return self._burst

    def _open(self, limit: int, idle_seconds: float) -> aiohttp.ClientSession:
        connector = aiohttp.TCPConnector(ssl=self._ssl, limit=limit, keepalive_timeout=idle_seconds)
        return self._make_session(connector)

    @asynccontextmanager
    async def lease(self) -> AsyncIterator[aiohttp.ClientSession]:
        """The session one binding (or its read-back) goes out on, for as long as it is in flight."""
        kept = self.kept_in_flight < self.tiers.kept
        if not kept:
            yield self._session(False)
            return
        self.kept_in_flight += 1
        try:
            yield self._session(True)
        finally:
            self.kept_in_flight -= 1

    def sessions(self) -> list[aiohttp.ClientSession]:
        """The sessions opened so far (to update their headers, or to close them)."""
        return [s for s in (self._kept, self._burst) if s is not None]

    async def close(self) -> None:
        for session in self.sessions():
            await session.close()
        self._kept = self._burst = None
