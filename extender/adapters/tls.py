"""HTTPS for the verbs: server certificate, optional client verification (mTLS), live reload.

kube-scheduler's extender client speaks HTTPS with ``enableHTTPS`` and presents the client
certificate of its ``tlsConfig``. With ``clientCAFile`` set, a client must present a certificate
signed by that CA or the handshake fails; ``clientNames`` narrows the verbs further to the
certificates naming one of them (subject CN or a DNS SAN), so another workload holding a
certificate from the same CA still cannot bind pods.

Certificates rotate (cert-manager renews them in place). ``Reloader`` checks the files' mtimes and
sizes every ``reloadSeconds`` and builds a fresh context; the listening socket keeps one context
whose SNI callback hands every new handshake the current one, so a rotation changes the
certificate, key and CA for the next connection without a restart. A rotation that cannot be
loaded (a half-written file) keeps the previous context and is retried at the next check.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Iterable, Mapping
from typing import Any

from ..config import TlsSettings

log = logging.getLogger(__name__)


def build_context(settings: TlsSettings) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(settings.cert_file, settings.key_file)
    if settings.client_ca_file:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cafile=settings.client_ca_file)
    return context


def _stamp(paths: Iterable[str]) -> tuple[tuple[float, int], ...]:
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append((0.0, -1))
        else:
            out.append((st.st_mtime, st.st_size))
    return tuple(out)


class Reloader:
    """The context the listener serves, swapped for a new one whenever the files change."""

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self.files = [p for p in (settings.cert_file, settings.key_file, settings.client_ca_file) if p]
        self.current = build_context(settings)
        self._stamp = _stamp(self.files)
        self.reloads = 0
        # The socket's own context: it only passes each handshake on to the current one.
        self.listener = build_context(settings)
        self.listener.sni_callback = self._choose

    def _choose(self, sock: ssl.SSLObject, server_name: str | None, _: ssl.SSLContext) -> None:
        sock.context = self.current

    def check(self) -> bool:
        """Load the files again if they changed; True when a new context is in use."""
        stamp = _stamp(self.files)
        if stamp == self._stamp:
            return False
        try:
            context = build_context(self.settings)
        except (OSError, ssl.SSLError, ValueError) as exc:
            log.warning("TLS files changed but cannot be loaded; keeping the previous ones",
                        extra={"error": str(exc)})
            return False
        self.current, self._stamp = context, stamp
        self.reloads += 1
        log.info("TLS certificates reloaded", extra={"files": self.files})
        return True

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.reload_seconds)
            await asyncio.to_thread(self.check)  # file reads stay off the event loop


def peer_names(peercert: Mapping[str, Any] | None) -> set[str]:
    """The names a verified client certificate carries: subject CN and DNS SANs."""
    if not peercert:
        return set()
    names = {str(value) for kind, value in peercert.get("subjectAltName", ()) if kind == "DNS"}
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                names.add(str(value))
    return names
