"""Credentials from a kubeconfig and in cluster: the Authorization header Quorum sends.

The in-cluster loader hands the ServiceAccount token over as ``bearer <token>``; a header of
``Bearer bearer <token>`` is refused by every apiserver (it was, by the installed chart's pods).
"""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest
import yaml
from kubernetes.config import incluster_config

from extender.adapters.kube import bearer, load_credentials
from extender.adapters.token import IN_CLUSTER_TOKEN

from ..certs import make_ca


@pytest.mark.parametrize(("given", "sent"), [
    ("abc", "Bearer abc"),
    ("Bearer abc", "Bearer abc"),
    ("bearer abc", "Bearer abc"),
    ("BEARER  abc ", "Bearer abc"),
])
def test_bearer_header_names_the_scheme_once(given: str, sent: str) -> None:
    assert bearer(given) == sent


def test_in_cluster_credentials_send_the_token_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    self_signed_ca: Path) -> None:
    token = tmp_path / "token"
    token.write_text("header.payload.signature")
    monkeypatch.setattr(incluster_config, "SERVICE_TOKEN_FILENAME", str(token))
    monkeypatch.setattr(incluster_config, "SERVICE_CERT_FILENAME", str(self_signed_ca))
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.244.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "16443")
    creds = load_credentials("")
    assert creds.headers["Authorization"] == "Bearer header.payload.signature"
    assert creds.host == "https://10.244.0.1:16443"
    assert creds.token_file == IN_CLUSTER_TOKEN  # re-read as the kubelet rotates it


def test_kubeconfig_token_is_sent_as_written(tmp_path: Path, self_signed_ca: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": "https://127.0.0.1:6443",
                                               "certificate-authority": str(self_signed_ca)}}],
        "users": [{"name": "u", "user": {"token": "tok"}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
    }))
    creds = load_credentials(str(kubeconfig))
    assert creds.headers["Authorization"] == "Bearer tok"
    assert isinstance(creds.ssl_context, ssl.SSLContext) and creds.token_file is None


@pytest.fixture
def self_signed_ca(tmp_path: Path) -> Path:
    return make_ca(tmp_path, "test-ca").cert
