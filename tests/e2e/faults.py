"""Faults for the soak: processes killed and restarted, and watch connections cut.

- ``restart_process``: SIGKILL one of the local cluster's processes (Quorum, kube-scheduler,
  kube-apiserver) and start it again exactly as it was started (``process.LocalProcess``).
- ``CuttableProxy``: a TCP relay on loopback between Quorum and the apiserver. Quorum is pointed at
  it through a kubeconfig of its own (TLS passes through unchanged: the apiserver's certificate
  names 127.0.0.1). ``cut()`` closes every open connection at once, as a network blip or a load
  balancer reset would, so Quorum's watches break mid-stream and must resume.

Only loopback addresses are used.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import yaml

from .cluster import wait
from .process import LocalProcess, alive

PIDS = Path(__file__).resolve().parents[2] / ".cache" / "cluster" / "pids"


def restart_process(name: str, must_contain: str, ready: object = None, timeout: float = 90) -> float:
    """Kill and restart ``name`` (a pid file under .cache/cluster/pids); seconds until ``ready()``
    (a callable) holds again, or until restarted when none is given."""
    process = LocalProcess.from_pid_file(PIDS / f"{name}.pid", must_contain=must_contain)
    if isinstance(process, str):
        raise RuntimeError(process)
    started = time.monotonic()
    process.kill()
    for _ in range(3):  # a port still held by the dying process fails the new one at once: again
        pid = process.restart()
        time.sleep(1.0)
        if alive(pid):
            break
    if callable(ready) and not wait(ready, timeout=timeout, interval=0.2):
        raise RuntimeError(f"{name} not ready {timeout:g}s after its restart")
    return round(time.monotonic() - started, 2)


class CuttableProxy:
    """127.0.0.1:<port> -> ``target``; ``cut()`` drops every connection."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.server.getsockname()[1])
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._stop = threading.Event()
        self.cuts = 0
        self.accepted = 0
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def _accept(self) -> None:
        self.server.settimeout(0.5)
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._open.update((client, upstream))
                self.accepted += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            self._drop(src, dst)

    def _drop(self, *socks: socket.socket) -> None:
        with self._lock:
            for sock in socks:
                self._open.discard(sock)
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def cut(self) -> int:
        """Close every connection; how many there were."""
        with self._lock:
            socks = list(self._open)
        self._drop(*socks)
        self.cuts += 1
        return len(socks) // 2

    def close(self) -> None:
        self._stop.set()
        self.server.close()
        self.cut()

    def kubeconfig_via(self, source: Path, dest: Path) -> Path:
        """A copy of ``source`` whose clusters point at this proxy."""
        doc = yaml.safe_load(source.read_text())
        for cluster in doc.get("clusters") or []:
            cluster["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        dest.write_text(yaml.safe_dump(doc))
        return dest
