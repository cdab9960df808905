"""The ServiceAccount token, read again as the kubelet rotates it.

A projected ServiceAccount token expires (an hour by default) and the kubelet writes a fresh one
into the same file well before that. A client that read the file once at start would be refused
once the first token expired; client-go re-reads the file every minute, and so does Quorum.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)

IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
REREAD_SECONDS = 60.0


def read_token(path: str) -> str | None:
    """The token in ``path`` (stripped), or None when it cannot be read or is empty."""
    try:
        token = Path(path).read_text().strip()
    except OSError as exc:
        log.warning("cannot read the ServiceAccount token", extra={"path": path, "error": str(exc)})
        return None
    return token or None


class TokenFile:
    """Re-reads ``path`` every ``interval`` seconds and hands a changed token to ``apply``."""

    def __init__(self, path: str, current: str | None, apply: Callable[[str], None],
                 interval: float = REREAD_SECONDS) -> None:
        self.path = path
        self.current = current
        self.apply = apply
        self.interval = interval
        self.rotations = 0

    def check(self, token: str | None) -> bool:
        """Apply ``token`` if it is new; whether it was."""
        if token is None or token == self.current:
            return False
        self.current = token
        self.rotations += 1
        self.apply(token)
        log.info("ServiceAccount token re-read", extra={"path": self.path, "rotations": self.rotations})
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            self.check(await asyncio.to_thread(read_token, self.path))  # file reads stay off the loop
