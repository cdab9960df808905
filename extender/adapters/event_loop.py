"""The event loop Quorum runs on: the standard asyncio loop, or uvloop with ``QUORUM_EVENT_LOOP=uvloop``.

Everything Quorum does runs on one loop (the verbs, the watches, the bindings). uvloop does the
loop's own work for less: about a quarter less CPU per new connection (kube-scheduler keeps two
idle connections to an extender, so most held bind calls arrive on new ones) and about 20 MiB less
resident memory right after a burst of bindings (measured before the TLS read buffers below). In
the cluster benchmark, though, Quorum's CPU per pod was the same on both loops, and the gangs'
bindings tended to take longer to complete on uvloop (docs/benchmarks.md, "The event loop"). Bind
skew matters more to a gang than those MiB, so the standard loop stays the default, and uvloop is
there for whoever measures otherwise.

On the standard loop every TLS connection allocates a read buffer of ``SSLProtocol.max_size``
(256 KiB) when it opens, and reads each record into a new string of that size. A gang of 256 held
binds arrives on about 256 new connections from kube-scheduler: 64 MiB of buffers at once, and most of
it still resident a second after they close. Quorum's requests and the apiserver's answers are a
few KiB, so the standard loop's TLS connections read at most ``TLS_READ_BYTES`` at a time
(docs/benchmarks.md, "TLS read buffers"). uvloop has its own TLS layer, with no such setting.
"""

from __future__ import annotations

import asyncio
from asyncio import sslproto
from collections.abc import Mapping

ENVIRONMENT_VARIABLE = "QUORUM_EVENT_LOOP"
CHOICES = ("asyncio", "uvloop")
TLS_READ_BYTES = 64 * 1024  # four TLS records; a 50 MiB body costs about 5% more CPU than at 256 KiB


def chosen_loop(environ: Mapping[str, str]) -> str:
    """The loop the environment asks for; ValueError names the variable and the choices."""
    kind = environ.get(ENVIRONMENT_VARIABLE, "") or CHOICES[0]
    if kind not in CHOICES:
        raise ValueError(f"{ENVIRONMENT_VARIABLE} must be one of {', '.join(CHOICES)}, got {kind!r}")
    return kind


def new_event_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        import uvloop  # imported here: nothing else needs it

        return uvloop.new_event_loop()
    limit_tls_reads(TLS_READ_BYTES)
    return asyncio.new_event_loop()


def limit_tls_reads(size: int) -> None:
    """Size the read buffer of every standard-loop TLS connection opened after the call. It is a
    class attribute of ``asyncio.sslproto.SSLProtocol`` (Python 3.11 on), so the setting is
    process-wide, which suits Quorum's one loop."""
    sslproto.SSLProtocol.max_size = size
