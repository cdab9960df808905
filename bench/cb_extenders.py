"""The extender behind the fourth kube-scheduler (profile null-extender): the Go extender that
decides nothing (configuration Vz, plain pods), or the Python one that only holds a gang's binds
until its minCount (configuration Qz, gangs). One at a time: they share its address."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import yaml
from cb_kube import CLUSTER_DIR
from cb_procs import NULL_EXTENDER, NULL_EXTENDER_ADDRESS, ROOT, _stop


class NullExtender:
    """bench/nullextender, built with the Go toolchain on first use, binding as the cluster admin."""

    def start(self) -> None:
        _stop(NULL_EXTENDER)
        binary = ROOT / ".cache" / "bin" / "null-extender"
        subprocess.run(["go", "build", "-o", str(binary), "."], cwd=ROOT / "bench" / "nullextender",
                       check=True)
        kubeconfig = yaml.safe_load((CLUSTER_DIR / "kubeconfig").read_text())
        apiserver = kubeconfig["clusters"][0]["cluster"]["server"]
        pki = CLUSTER_DIR / "pki"
        _start_extender([str(binary), "--listen", NULL_EXTENDER_ADDRESS, "--apiserver", apiserver,
                         "--cert", str(pki / "admin.crt"), "--key", str(pki / "admin.key")])

    def stop(self) -> None:
        _stop(NULL_EXTENDER)


class HoldExtender:
    """bench/holdextender.py in the null extender's place (configuration Qz), with Quorum's
    credentials (its RBAC and its API priority) and Quorum's event loop setting."""

    def start(self) -> None:
        _stop(NULL_EXTENDER)
        _start_extender([sys.executable, str(ROOT / "bench" / "holdextender.py"), "--listen",
                         NULL_EXTENDER_ADDRESS, "--kubeconfig", str(CLUSTER_DIR / "quorum.kubeconfig")])

    def stop(self) -> None:
        _stop(NULL_EXTENDER)


def _start_extender(argv: list[str]) -> None:
    """Start the fourth kube-scheduler's extender and wait until it answers /healthz."""
    with open(CLUSTER_DIR / "logs" / f"{NULL_EXTENDER}.log", "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (CLUSTER_DIR / "pids" / f"{NULL_EXTENDER}.pid").write_text(str(proc.pid))
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f"http://{NULL_EXTENDER_ADDRESS}/healthz", timeout=2):
                return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{NULL_EXTENDER} did not start; see {log.name}") from None
            time.sleep(0.3)
