"""extender.config and cli.load_config: defaults, YAML, validation messages, env and flag overrides."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from extender import cli
from extender.config import (
    DEFAULT_LEVELS,
    Config,
    ConfigError,
    GangTimings,
    Preemption,
    Starvation,
    TopologyLevel,
    apply_overrides,
    env_overrides,
    from_mapping,
    load_file,
)

REPO_ROOT = Path(__file__).resolve().parents[2]

FULL_CONFIG = """\
listen: {host: 0.0.0.0, port: 9443}
kubeconfig: /etc/quorum/kubeconfig
topology:
  levels:                 # highest first
    - {name: zone, nodeLabel: topology.kubernetes.io/zone}
    - {name: rack, nodeLabel: topology.quorum.dev/rack}
    - {nodeLabel: kubernetes.io/hostname}
gang:
  bindTimeoutSeconds: 45
  backoffBaseSeconds: 2.5
  backoffMaxSeconds: 120
  maxReplans: 5
  bindingsAtOnce: 8
lifecycle: {podsReadyTimeoutSeconds: 600, backoffBaseSeconds: 60}
starvation: {claimAfterSeconds: 30}
preemption: {enabled: true}
autoscaling: {provisioningRequests: true, provisioningClassName: check-capacity.autoscaling.x-k8s.io}
http: {maxRequestBytes: 4194304, bodyTimeoutSeconds: 2.5}
log: {level: debug, format: text}
debug: {checkInvariants: true}
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests must not see QUORUM_* variables from the environment they run in."""
    for name in list(os.environ):
        if name.startswith("QUORUM_"):
            monkeypatch.delenv(name)


def write(tmp_path: Path, text: str, name: str = "quorum.yaml") -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return str(path)


def base() -> dict[str, Any]:
    return yaml.safe_load(FULL_CONFIG)


# --------------------------------------------------------------------------- defaults and parsing


def test_defaults() -> None:
    config = Config()
    assert (config.host, config.port, config.kubeconfig) == ("127.0.0.1", 8888, "")
    assert [(lvl.name, lvl.node_label) for lvl in config.levels] == [
        ("block", "topology.quorum.dev/block"),
        ("rack", "topology.quorum.dev/rack"),
        ("host", "kubernetes.io/hostname"),
    ]
    assert config.gang == GangTimings(60.0, 5.0, 300.0, 3, 24)
    assert config.max_request_bytes == 32 * 1024 * 1024
    assert (config.log_level, config.log_format) == ("info", "json")


def test_empty_file_gives_defaults(tmp_path: Path) -> None:
    assert load_file(write(tmp_path, "")) == Config()
    assert load_file(write(tmp_path, "# only a comment\n")) == Config()


def test_empty_sections_give_defaults() -> None:
    assert from_mapping({"listen": None, "gang": {}, "log": None, "topology": {}}) == Config()


def test_full_file(tmp_path: Path) -> None:
    config = load_file(write(tmp_path, FULL_CONFIG))
    assert config.host == "0.0.0.0"
    assert config.port == 9443
    assert config.kubeconfig == "/etc/quorum/kubeconfig"
    assert config.levels == (
        TopologyLevel("zone", "topology.kubernetes.io/zone"),
        TopologyLevel("rack", "topology.quorum.dev/rack"),
        TopologyLevel("hostname", "kubernetes.io/hostname"),  # name defaults to the label's last part
    )
    assert config.gang == GangTimings(45.0, 2.5, 120.0, 5, 8)
    assert config.max_request_bytes == 4194304
    assert (config.log_level, config.log_format) == ("debug", "text")
    assert config.autoscaling.provisioning_requests is True
    assert config.autoscaling.provisioning_class == "check-capacity.autoscaling.x-k8s.io"
    assert Config().autoscaling.provisioning_requests is False


def test_queue_and_preemption_settings() -> None:
    assert Config().starvation == Starvation(True, 60.0, True)
    assert Config().preemption == Preemption(True, 120.0)  # as Kubernetes: priority preempts
    doc = {"starvation": {"claimAfterSeconds": 0, "claimOnPriority": False},
           "preemption": {"enabled": True, "victimGraceSeconds": 30}}
    config = from_mapping(doc)
    assert config.starvation == Starvation(True, 0.0, False)
    assert config.preemption == Preemption(True, 30.0)


def test_shipped_example_config_loads() -> None:
    config = load_file(str(REPO_ROOT / "scheduler-config" / "quorum.yaml"))
    assert config.levels == DEFAULT_LEVELS
    assert config.gang.bind_timeout_seconds == 60.0
    assert config.port == 8888


def test_level_index_accepts_names_and_labels() -> None:
    config = Config()
    assert config.level_index("rack") == 1
    assert config.level_index("topology.quorum.dev/rack") == 1
    assert config.level_index("kubernetes.io/hostname") == 2
    assert config.level_index("zone") is None


# --------------------------------------------------------------------------- invalid fields


def _set(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """Set ``a.b[1].c`` in a copy of ``doc``; value ``...`` deletes the key."""
    target: Any = doc
    steps: list[Any] = []
    for part in path.split("."):
        if "[" in part:
            name, index = part[:-1].split("[")
            steps += [name, int(index)]
        else:
            steps.append(part)
    for step in steps[:-1]:
        target = target[step]
    if value is ...:
        del target[steps[-1]]
    else:
        target[steps[-1]] = value
    return doc


INVALID = [
    # (where to change, new value, text the message must contain)
    ("listen.port", 0, "listen.port"),
    ("listen.port", 65536, "listen.port"),
    ("listen.port", -80, "listen.port"),
    ("listen.port", "https", "listen.port"),
    ("listen.port", True, "listen.port"),
    ("listen.port", None, "listen.port"),
    ("listen.port", 8080.5, "listen.port"),
    ("listen.host", "", "listen.host"),
    ("listen.host", 10, "listen.host"),
    ("listen.address", "0.0.0.0", "listen.address"),
    ("listen", "0.0.0.0:8888", "listen"),
    ("kubeconfig", ["a"], "kubeconfig"),
    ("topology", ["block"], "topology"),
    ("topology.levels", [], "topology.levels"),
    ("topology.levels", "block,rack", "topology.levels"),
    ("topology.levels[1].nodeLabel", ..., "topology.levels[1].nodeLabel"),
    ("topology.levels[1].nodeLabel", "", "topology.levels[1].nodeLabel"),
    ("topology.levels[1].nodeLabel", 7, "topology.levels[1].nodeLabel"),
    ("topology.levels[0].name", "", "topology.levels[0].name"),
    ("topology.levels[0].name", 3, "topology.levels[0].name"),
    ("topology.levels[2].weight", 2, "topology.levels[2].weight"),
    ("topology.levels[1]", "rack", "topology.levels[1]"),
    ("topology.levels[1].name", "zone", "topology.levels"),  # duplicate name
    ("topology.levels[1].nodeLabel", "topology.kubernetes.io/zone", "topology.levels"),  # duplicate label
    ("topology.order", "desc", "topology.order"),
    ("gang.bindTimeoutSeconds", 0, "gang.bindTimeoutSeconds"),
    ("gang.bindTimeoutSeconds", -5, "gang.bindTimeoutSeconds"),
    ("gang.bindTimeoutSeconds", "30s", "gang.bindTimeoutSeconds"),
    ("gang.bindTimeoutSeconds", True, "gang.bindTimeoutSeconds"),
    ("gang.bindTimeoutSeconds", None, "gang.bindTimeoutSeconds"),
    ("gang.bindTimeoutSeconds", float("nan"), "gang.bindTimeoutSeconds"),
    ("gang.backoffBaseSeconds", 0, "gang.backoffBaseSeconds"),
    ("gang.backoffBaseSeconds", float("nan"), "gang.backoffBaseSeconds"),
    ("gang.backoffMaxSeconds", 1, "gang.backoffMaxSeconds"),  # below backoffBaseSeconds (2.5)
    ("gang.backoffMaxSeconds", [300], "gang.backoffMaxSeconds"),
    ("gang.maxReplans", -1, "gang.maxReplans"),
    ("gang.maxReplans", "3", "gang.maxReplans"),
    ("gang.bindingsAtOnce", -1, "gang.bindingsAtOnce"),
    ("gang.bindingsAtOnce", 1.5, "gang.bindingsAtOnce"),
    ("gang.timeout", 30, "gang.timeout"),
    ("gang", 30, "gang"),
    ("lifecycle.podsReadyTimeoutSeconds", -1, "lifecycle.podsReadyTimeoutSeconds"),
    ("lifecycle.podsReadyTimeoutSeconds", "5m", "lifecycle.podsReadyTimeoutSeconds"),
    ("lifecycle.recoveryTimeoutSeconds", True, "lifecycle.recoveryTimeoutSeconds"),
    ("lifecycle.backoffBaseSeconds", 0, "lifecycle.backoffBaseSeconds"),
    ("lifecycle.backoffMaxSeconds", 10, "lifecycle.backoffMaxSeconds"),  # below the base (60)
    ("lifecycle.backoffJitter", 2, "lifecycle.backoffJitter"),
    ("lifecycle.backoffLimitCount", -1, "lifecycle.backoffLimitCount"),
    ("lifecycle.backoffLimitCount", 1.5, "lifecycle.backoffLimitCount"),
    ("lifecycle.replaceOutsideDomain", "yes", "lifecycle.replaceOutsideDomain"),
    ("lifecycle.startedConfigMaps", "yes", "lifecycle.startedConfigMaps"),
    ("autoscaling.provisioningRequests", "yes", "autoscaling.provisioningRequests"),
    ("autoscaling.provisioningClassName", "", "autoscaling.provisioningClassName"),
    ("autoscaling.other", 1, "autoscaling.other"),
    ("lifecycle.timeout", 5, "lifecycle.timeout"),
    ("starvation.claimAfterSeconds", -1, "starvation.claimAfterSeconds"),
    ("starvation.claimAfterSeconds", "1m", "starvation.claimAfterSeconds"),
    ("starvation.enabled", "no", "starvation.enabled"),
    ("starvation.claimOnPriority", 1, "starvation.claimOnPriority"),
    ("starvation.delay", 5, "starvation.delay"),
    ("preemption.enabled", "true", "preemption.enabled"),
    ("preemption.victimGraceSeconds", 0, "preemption.victimGraceSeconds"),
    ("preemption.mode", "gang", "preemption.mode"),
    ("http.maxRequestBytes", 100, "http.maxRequestBytes"),
    ("http.maxRequestBytes", "32Mi", "http.maxRequestBytes"),
    ("http.bodyTimeoutSeconds", 0, "http.bodyTimeoutSeconds"),
    ("http.bodyTimeoutSeconds", "10s", "http.bodyTimeoutSeconds"),
    ("debug.checkInvariants", "yes", "debug.checkInvariants"),
    ("debug.verbose", True, "debug.verbose"),
    ("http.port", 80, "http.port"),
    ("log.level", "verbose", "log.level"),
    ("log.level", "INFO", "log.level"),
    ("log.level", None, "log.level"),
    ("log.format", "xml", "log.format"),
    ("log.colour", True, "log.colour"),
    ("log", "debug", "log"),
    ("listne", {"port": 1}, "listne"),
]


@pytest.mark.parametrize(("path", "value", "field"), INVALID,
                         ids=[f"{p}={v!r}" for p, v, _ in INVALID])
def test_invalid_field_is_named_in_the_error(path: str, value: Any, field: str) -> None:
    doc = _set(base(), path, value)
    with pytest.raises(ConfigError) as info:
        from_mapping(doc)
    message = str(info.value)
    assert message.startswith(f"{field}: "), message


def test_invalid_field_in_file_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "gang:\n  bindTimeoutSeconds: 0\n")
    with pytest.raises(ConfigError, match=r"^gang\.bindTimeoutSeconds: must be > 0"):
        load_file(path)


def test_top_level_must_be_a_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="top level"):
        load_file(write(tmp_path, "- listen\n- gang\n"))


def test_invalid_yaml_is_a_config_error(tmp_path: Path) -> None:
    path = write(tmp_path, "listen: {host: [\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_file(path)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no-such\.yaml"):
        load_file(str(tmp_path / "no-such.yaml"))


# --------------------------------------------------------------------------- overrides


def test_env_overrides_reads_only_set_variables() -> None:
    env = {"QUORUM_PORT": "9000", "QUORUM_HOST": "", "QUORUM_LOG_LEVEL": "debug", "HOME": "/nonexistent"}
    assert env_overrides(env) == {"port": "9000", "log_level": "debug"}


def test_apply_overrides_converts_and_validates() -> None:
    config = apply_overrides(Config(), {"host": "0.0.0.0", "port": "9100", "kubeconfig": "/k",
                                        "log_level": "warning", "log_format": "text",
                                        "bind_timeout": "12.5"})
    assert (config.host, config.port, config.kubeconfig) == ("0.0.0.0", 9100, "/k")
    assert (config.log_level, config.log_format) == ("warning", "text")
    assert config.gang.bind_timeout_seconds == 12.5


def test_a_bind_timeout_override_keeps_every_other_gang_setting() -> None:
    chosen = GangTimings(bind_timeout_seconds=40.0, backoff_base_seconds=7.0, backoff_max_seconds=90.0,
                         max_replans=9, bindings_at_once=4)
    config = apply_overrides(Config(gang=chosen), {"bind_timeout": "12.5"})
    assert config.gang == replace(chosen, bind_timeout_seconds=12.5)


def test_apply_overrides_skips_unset_values() -> None:
    config = Config(port=9443)
    assert apply_overrides(config, {"port": None, "host": "", "bind_timeout": None}) == config


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"port": "http"}, "port"),
        ({"port": "0"}, "port"),
        ({"port": "70000"}, "port"),
        ({"bind_timeout": "soon"}, "bind-timeout"),
        ({"bind_timeout": "0"}, "bind-timeout"),
        ({"bind_timeout": "-3"}, "bind-timeout"),
        ({"bind_timeout": "nan"}, "bind-timeout"),
        ({"log_level": "trace"}, "log.level"),
        ({"log_format": "yaml"}, "log.format"),
        ({"colour": "yes"}, "colour"),
    ],
    ids=lambda v: "-".join(f"{k}={x}" for k, x in v.items()) if isinstance(v, dict) else v,
)
def test_invalid_override_is_named(overrides: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        apply_overrides(Config(), overrides)
    assert str(info.value).startswith(f"{field}:"), str(info.value)


def test_precedence_flags_beat_env_beat_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, """\
        listen: {host: 10.0.0.1, port: 8000}
        gang: {bindTimeoutSeconds: 20}
        log: {level: warning, format: json}
        """)
    only_file = cli.load_config(cli.parse_args(["--config", path]))
    assert (only_file.host, only_file.port, only_file.log_level) == ("10.0.0.1", 8000, "warning")
    assert only_file.gang.bind_timeout_seconds == 20.0

    monkeypatch.setenv("QUORUM_PORT", "9000")
    monkeypatch.setenv("QUORUM_LOG_LEVEL", "error")
    monkeypatch.setenv("QUORUM_BIND_TIMEOUT_SECONDS", "40")
    monkeypatch.setenv("QUORUM_LOG_FORMAT", "text")
    with_env = cli.load_config(cli.parse_args(["--config", path]))
    assert (with_env.host, with_env.port, with_env.log_level, with_env.log_format) == (
        "10.0.0.1", 9000, "error", "text")
    assert with_env.gang.bind_timeout_seconds == 40.0

    with_flags = cli.load_config(cli.parse_args(
        ["--config", path, "--port", "9100", "--log-level", "debug", "--bind-timeout", "60",
         "--host", "0.0.0.0"]))
    assert (with_flags.host, with_flags.port, with_flags.log_level) == ("0.0.0.0", 9100, "debug")
    assert with_flags.gang.bind_timeout_seconds == 60.0
    assert with_flags.log_format == "text"  # no flag given: the environment still applies


def test_env_without_file(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUORUM_HOST", "0.0.0.0")
    monkeypatch.setenv("QUORUM_KUBECONFIG", "/etc/kube/config")
    config = cli.load_config(cli.parse_args([]))
    assert (config.host, config.port, config.kubeconfig) == ("0.0.0.0", 8888, "/etc/kube/config")


def test_invalid_env_value_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUORUM_PORT", "eighty")
    with pytest.raises(ConfigError, match="port"):
        cli.load_config(cli.parse_args([]))


# --------------------------------------------------------------------------- process exit


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("QUORUM_")}
    run_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), run_env.get("PYTHONPATH")]))
    run_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "extender", *args], cwd=REPO_ROOT, env=run_env,
        capture_output=True, text=True, timeout=60, check=False,
    )


def test_process_exits_2_naming_the_bad_field(tmp_path: Path) -> None:
    path = write(tmp_path, "gang:\n  bindTimeoutSeconds: -1\n", name="bad.yaml")
    result = _run("--config", path)
    assert result.returncode == 2, result.stderr
    assert "gang.bindTimeoutSeconds" in result.stderr


def test_process_exits_2_for_unknown_key(tmp_path: Path) -> None:
    path = write(tmp_path, "topology:\n  levels:\n    - {name: rack, label: x}\n", name="bad.yaml")
    result = _run("--config", path)
    assert result.returncode == 2, result.stderr
    assert "topology.levels[0]" in result.stderr


def test_process_exits_2_for_bad_env(tmp_path: Path) -> None:
    result = _run(env={"QUORUM_LOG_FORMAT": "xml"})
    assert result.returncode == 2, result.stderr
    assert "log.format" in result.stderr


def test_http_body_timeout_and_invariant_checks_are_read_from_the_file(tmp_path: Path) -> None:
    config = load_file(write(tmp_path, FULL_CONFIG))
    assert config.body_timeout_seconds == 2.5
    assert config.check_invariants is True
    assert (Config().body_timeout_seconds, Config().check_invariants) == (10.0, False)


def test_lifecycle_section_is_read_and_its_timeouts_are_off_by_default() -> None:
    assert from_mapping({}).lifecycle.pods_ready_timeout_seconds == 0
    assert from_mapping({}).lifecycle.backoff_limit_count is None
    config = from_mapping({"lifecycle": {"podsReadyTimeoutSeconds": 300, "recoveryTimeoutSeconds": 0,
                                         "backoffBaseSeconds": 30, "backoffMaxSeconds": 600,
                                         "backoffJitter": 0, "backoffLimitCount": 2,
                                         "replaceOutsideDomain": True, "startedConfigMaps": True}})
    life = config.lifecycle
    assert (life.pods_ready_timeout_seconds, life.recovery_timeout_seconds) == (300, 0)
    assert (life.backoff_base_seconds, life.backoff_max_seconds, life.backoff_jitter) == (30, 600, 0)
    assert (life.backoff_limit_count, life.replace_outside_domain) == (2, True)
    assert life.started_config_maps is True
    assert from_mapping({}).lifecycle.started_config_maps is False
