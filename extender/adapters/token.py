"""The ServiceAccount token, read again as the kubelet rotates it, or asked for again before it expires.

A projected ServiceAccount token expires (an hour by default) and the kubelet writes a fresh one
into the same file well before that. A client that read the file once at start would be refused
once the first token expired; client-go re-reads the file every minute, and so does Quorum
(``TokenFile``). When the pod's account is another's (``tokenRequest``), Quorum asks the
TokenRequest API for its own expiring token and asks again before it expires (``TokenRequester``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import aiohttp

from ..config import TokenRequest

log = logging.getLogger(__name__)

IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"
IN_CLUSTER_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
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

    async def first(self) -> float:
        """Nothing to ask before the start (the token was read with the credentials)."""
        return self.interval

    async def run(self, first_delay: float | None = None) -> None:
        await asyncio.sleep(self.interval if first_delay is None else first_delay)
        while True:
            self.check(await asyncio.to_thread(read_token, self.path))  # file reads stay off the loop
            await asyncio.sleep(self.interval)


@dataclass(frozen=True, slots=True)
class IssuedToken:
    token: str
    lifetime: float  # seconds from issue to expiry


Issue = Callable[[str], Awaitable[IssuedToken]]  # the pod's token -> a token of Quorum's account


class TokenRequester:
    """Quorum's own token, asked of the TokenRequest API (``tokenRequest`` in the configuration).

    The pod runs as kube-scheduler's ServiceAccount (the chart's pod), so the projected token the
    kubelet keeps fresh is the scheduler's; it authenticates only the request for Quorum's token,
    and every other call carries Quorum's. Both tokens expire: nothing long-lived is mounted.
    """

    RETRY_SECONDS = 5.0

    def __init__(self, pod_token_path: str, issue: Issue, apply: Callable[[str], None],
                 refresh_seconds: float = 0.0, on_result: Callable[[str], None] | None = None) -> None:
        self.pod_token_path = pod_token_path
        self.issue = issue
        self.apply = apply
        self.refresh_seconds = refresh_seconds
        self.on_result = on_result or (lambda _result: None)
        self.issued = 0

    async def refresh(self) -> float:
        """Ask once; the seconds until the next ask (sooner after a failure)."""
        pod_token = await asyncio.to_thread(read_token, self.pod_token_path)
        try:
            if pod_token is None:
                raise OSError(f"no token in {self.pod_token_path}")
            issued = await self.issue(pod_token)
        except Exception as exc:  # any refusal: keep the current token, ask again soon
            self.on_result("failed")
            log.warning("token request failed", extra={"error": str(exc)[:300]})
            return self.RETRY_SECONDS
        self.apply(issued.token)
        self.issued += 1
        self.on_result("issued")
        log.info("token issued", extra={"lifetimeSeconds": round(issued.lifetime), "issued": self.issued})
        return self.refresh_seconds or 0.8 * issued.lifetime

    async def first(self, attempts: int = 24) -> float:
        """The first token, before anything else is asked of the apiserver; the seconds until the
        next ask."""
        for _ in range(attempts):
            delay = await self.refresh()
            if self.issued:
                return delay
            await asyncio.sleep(delay)
        raise RuntimeError(f"no token issued after {attempts} attempts (tokenRequest)")

    async def run(self, first_delay: float) -> None:
        delay = first_delay
        while True:
            await asyncio.sleep(delay)
            delay = await self.refresh()


def token_requester(session: Callable[[], aiohttp.ClientSession], host: str, settings: TokenRequest,
                    apply: Callable[[str], None], on_result: Callable[[str], None]) -> TokenRequester:
    """A requester that POSTs TokenRequests for ``settings.service_account`` through ``session``."""
    namespace = settings.namespace or (read_token(IN_CLUSTER_NAMESPACE) or "default")
    url = (f"{host}/api/v1/namespaces/{namespace}/serviceaccounts/{settings.service_account}/token")
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": settings.expiration_seconds}}

    async def issue(pod_token: str) -> IssuedToken:
        async with session().post(url, json=body, headers={"Authorization": f"Bearer {pod_token}"},
                                timeout=aiohttp.ClientTimeout(total=30)) as response:
            doc = await response.json(content_type=None)
            if response.status != 201:
                raise RuntimeError(f"HTTP {response.status}: {str(doc.get('message', doc))[:200]}")
        status = doc["status"]
        expires = datetime.fromisoformat(str(status["expirationTimestamp"]).replace("Z", "+00:00"))
        return IssuedToken(str(status["token"]), max(0.0, expires.timestamp() - time.time()))

    return TokenRequester(IN_CLUSTER_TOKEN, issue, apply, settings.refresh_seconds, on_result)
