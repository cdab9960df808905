"""The event loop Quorum runs on: the standard asyncio loop, or uvloop with ``QUORUM_EVENT_LOOP=uvloop``.

Everything Quorum does runs on one loop (the verbs, the watches, the bindings). uvloop does the
loop's own work for less: about a quarter less CPU per new connection (kube-scheduler keeps two
idle connections to an extender, so most held bind calls arrive on new ones) and about 20 MiB less
resident memory right after a burst of bindings. In the cluster benchmark, though, Quorum's CPU per
pod was the same on both loops, and the gangs' bindings tended to take longer to complete on uvloop
(docs/benchmarks.md, "The event loop"). Bind skew matters more to a gang than those MiB, so the
standard loop stays the default, and uvloop is there for whoever measures otherwise.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

ENVIRONMENT_VARIABLE = "QUORUM_EVENT_LOOP"
CHOICES = ("asyncio", "uvloop")


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
    return asyncio.new_event_loop()
