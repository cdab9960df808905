"""The images users install, built here and run against the local cluster.

``hack/build-images.sh`` builds ``quorum:dev`` from the unchanged Dockerfile with podman and runc,
and the kube-scheduler image the chart names from the locally built binary. No registry can be
reached here, so the Dockerfile's ``FROM`` image is a **local stand-in** (Debian bookworm with
Python 3.11, made by mmdebstrap and imported under the upstream name); the checks below are of our
image as the Dockerfile defines it, not of upstream's base.

- Quorum's image runs as the unprivileged user 65532 and its entry point answers ``--help``.
- Started with a mounted configuration and kubeconfig (as the chart mounts them), it lists and
  watches the local cluster: ``/readyz`` answers 200 and its informer cache holds every node the
  apiserver has.
- The kube-scheduler image runs as 65532 too and is the version the cluster runs.
"""

from __future__ import annotations

import base64
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from .cluster import REPO_ROOT, Kube, Quorum, Settings

pytestmark = pytest.mark.e2e

QUORUM_IMAGE = "localhost/quorum:dev"
CONTAINER_PORT = 18989  # the container's own verbs port (host network); nothing else listens there


def podman(*argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """podman with the project's settings (runc, no default ulimits: hack/lib/podman.sh)."""
    script = f'source "{REPO_ROOT}/hack/lib/podman.sh"; podman_cmd "$@"'
    return subprocess.run(["bash", "-c", script, "podman", *argv], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def images(settings: Settings) -> dict[str, str]:
    """Build (or reuse) the images; the scheduler's tag is the version the cluster runs."""
    version = Kube(settings.kubeconfig).version()["gitVersion"]
    done = subprocess.run(["bash", str(REPO_ROOT / "hack" / "build-images.sh")], capture_output=True,
                          text=True, timeout=1800, env={**os.environ, "K8S_VERSION": version})
    assert done.returncode == 0, f"hack/build-images.sh failed:\n{done.stderr[-4000:]}"
    return {"quorum": QUORUM_IMAGE, "scheduler": f"registry.k8s.io/kube-scheduler:{version}",
            "version": version}


def test_quorum_image_runs_unprivileged_and_answers_help(images: dict[str, str]) -> None:
    user = podman("image", "inspect", "--format", "{{.Config.User}}", images["quorum"])
    assert user.stdout.strip() == "65532:65532", user
    uid = podman("run", "--rm", "--entrypoint", "id", images["quorum"], "-u")
    assert uid.returncode == 0 and uid.stdout.strip() == "65532", uid
    shown = podman("run", "--rm", images["quorum"], "--help")
    assert shown.returncode == 0, shown
    assert "usage: quorum-extender" in shown.stdout and "--kubeconfig" in shown.stdout


def test_scheduler_image_is_the_clusters_version(images: dict[str, str]) -> None:
    shown = podman("run", "--rm", images["scheduler"], "--version")
    assert shown.returncode == 0, shown
    assert shown.stdout.strip() == f"Kubernetes {images['version']}", shown
    uid = podman("run", "--rm", "--entrypoint", "id", images["scheduler"], "-u")
    assert uid.stdout.strip() == "65532", uid


@pytest.fixture
def mounted(tmp_path: Path, settings: Settings) -> Iterator[Path]:
    """A directory as the chart mounts it: quorum.yaml and a kubeconfig with Quorum's own token.

    The kubeconfig embeds the cluster's CA (the container cannot see the host's files), and the
    configuration is the suite's own with the container's port.
    """
    local = Path(settings.kubeconfig).parent / "quorum.kubeconfig"
    kubeconfig = yaml.safe_load(local.read_text())
    for cluster in kubeconfig["clusters"]:
        ca = Path(cluster["cluster"].pop("certificate-authority")).read_bytes()
        cluster["cluster"]["certificate-authority-data"] = base64.b64encode(ca).decode()
    config = yaml.safe_load((REPO_ROOT / "tests" / "e2e" / "quorum-e2e.yaml").read_text())
    config["listen"] = {"host": "127.0.0.1", "port": CONTAINER_PORT}
    config["kubeconfig"] = "/etc/quorum/config/kubeconfig"
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    (tmp_path / "quorum.yaml").write_text(yaml.safe_dump(config))
    for path in (tmp_path, tmp_path / "kubeconfig", tmp_path / "quorum.yaml"):
        path.chmod(0o755 if path.is_dir() else 0o644)  # the container's user is not the owner
    yield tmp_path


def test_quorum_image_starts_with_mounted_config_and_sees_the_cluster(
        images: dict[str, str], mounted: Path, kube: Kube) -> None:
    name = f"quorum-image-{uuid.uuid4().hex[:8]}"
    started = podman("run", "-d", "--name", name, "--network", "host", "--read-only",
                     "-v", f"{mounted}:/etc/quorum/config:ro", images["quorum"],
                     "--config=/etc/quorum/config/quorum.yaml")
    assert started.returncode == 0, started
    try:
        inside = Quorum(f"http://127.0.0.1:{CONTAINER_PORT}")
        deadline = time.monotonic() + 60
        while not inside.ready() and time.monotonic() < deadline:
            running = podman("inspect", "--format", "{{.State.Running}}", name).stdout.strip()
            assert running == "true", podman("logs", name).stderr[-4000:]
            time.sleep(1)
        assert inside.ready(), f"not ready in 60 s:\n{podman('logs', name).stderr[-4000:]}"
        nodes = len(kube.nodes())
        assert inside.metric("quorum_cache_objects", kind="nodes") == nodes
        assert podman("exec", name, "id", "-u").stdout.strip() == "65532"
    finally:
        podman("rm", "-f", "-t", "2", name)
