"""Test certificates made with the openssl command (a CA, and leaves it signs, server or client),
and free loopback ports to serve them on.

Shared by the unit TLS tests and the end-to-end mTLS scenario. Keys are EC P-256 (fast to make).
"""

from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


def _run(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=30)


def make_ca(directory: Path, name: str) -> Pair:
    pair = Pair(directory / f"{name}.crt", directory / f"{name}.key")
    _run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(pair.key), "-out", str(pair.cert), "-days", "2", "-subj", f"/CN={name}")
    return pair


def make_leaf(directory: Path, ca: Pair, name: str, *, dns: tuple[str, ...] = (), ips: tuple[str, ...] = (),
              client: bool = False, serial: int = 1) -> Pair:
    """A certificate for ``name`` (subject CN) signed by ``ca``; server or client usage."""
    pair = Pair(directory / f"{name}.crt", directory / f"{name}.key")
    csr = directory / f"{name}.csr"
    ext = directory / f"{name}.ext"
    sans = [f"DNS:{d}" for d in dns] + [f"IP:{i}" for i in ips]
    lines = ["basicConstraints=CA:FALSE", "keyUsage=digitalSignature,keyEncipherment",
             f"extendedKeyUsage={'clientAuth' if client else 'serverAuth'}"]
    if sans:
        lines.append("subjectAltName=" + ",".join(sans))
    ext.write_text("\n".join(lines) + "\n")
    _run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
         "-keyout", str(pair.key), "-out", str(csr), "-subj", f"/CN={name}")
    _run("x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key),
         "-set_serial", str(serial), "-days", "2", "-out", str(pair.cert), "-extfile", str(ext))
    return pair


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Pki:
    """What the TLS tests need: a CA, Quorum's server certificate, and three clients."""

    ca: Pair
    server: Pair  # CN quorum, SANs localhost and 127.0.0.1
    scheduler: Pair  # CN kube-scheduler, signed by the CA
    intruder: Pair  # CN intruder, signed by the same CA
    stranger: Pair  # CN kube-scheduler, signed by another CA


def make_pki(root: Path) -> Pki:
    ca, other = make_ca(root, "quorum-test-ca"), make_ca(root, "other-ca")
    server = make_leaf(root, ca, "quorum", dns=("localhost",), ips=("127.0.0.1",))
    scheduler = make_leaf(root, ca, "kube-scheduler", client=True)
    intruder = make_leaf(root, ca, "intruder", client=True)
    (root / "other").mkdir()
    stranger = make_leaf(root / "other", other, "kube-scheduler", client=True)
    return Pki(ca, server, scheduler, intruder, stranger)
