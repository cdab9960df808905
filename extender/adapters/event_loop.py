"""The event loop Quorum runs on: uvloop unless ``QUORUM_EVENT_LOOP=asyncio`` asks for the standard one.

Everything Quorum does runs on one loop (the verbs, the watches, the bindings), so the loop's own
cost per callback, per connection and per TLS record is paid for every pod. kube-scheduler keeps
only two idle connections to an extender, so most held bind calls arrive on new connections, and
the watches arrive as many small TLS records. uvloop does the same work for less CPU (see
docs/benchmarks.md, "The event loop"). The standard loop stays one variable away for asyncio's
debug mode, or a platform uvloop does not support.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

ENVIRONMENT_VARIABLE = "QUORUM_EVENT_LOOP"
CHOICES = ("uvloop", "asyncio")


def chosen_loop(environ: Mapping[str, str]) -> str:
    """The loop the environment asks for; ValueError names the variable and the choices."""
    kind = environ.get(ENVIRONMENT_VARIABLE, "") or CHOICES[0]
    if kind not in CHOICES:
        raise ValueError(f"{ENVIRONMENT_VARIABLE} must be one of {', '.join(CHOICES)}, got {kind!r}")
    return kind


def new_event_loop(kind: str) -> asyncio.AbstractEventLoop:
    if kind == "uvloop":
        import uvloop  # imported here: the standard loop must work where uvloop cannot be loaded

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()
