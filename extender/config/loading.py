"""Reading the settings: the YAML file, validated field by field, then environment and flag overrides."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import yaml

from .settings import (
    DEFAULT_LEVELS,
    Autoscaling,
    Config,
    ConfigError,
    GangTimings,
    Lifecycle,
    Preemption,
    Starvation,
    TlsSettings,
    TokenRequest,
    TopologyLevel,
)

_LOG_LEVELS = ("debug", "info", "warning", "error")
_LOG_FORMATS = ("json", "text")


def _section(raw: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = raw.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: must be a mapping")
    return value


def _check_keys(raw: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(raw) - allowed)
    if unknown:
        prefix = f"{where}." if where else ""
        raise ConfigError(f"{prefix}{unknown[0]}: unknown field")


def _number(raw: Mapping[str, Any], key: str, where: str, default: float, minimum: float = 0.0) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{where}.{key}: must be a number, got {value!r}")
    if value <= minimum:
        raise ConfigError(f"{where}.{key}: must be > {minimum:g}, got {value!r}")
    return float(value)


def _count(raw: Mapping[str, Any], key: str, where: str, default: int) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{where}.{key}: must be a whole number >= 0, got {value!r}")
    return value


def _port(value: Any, where: str) -> int:
    if isinstance(value, float) or isinstance(value, bool):
        raise ConfigError(f"{where}: must be an integer port, got {value!r}")
    try:
        port = int(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: must be an integer port, got {value!r}") from None
    if not 0 < port < 65536:
        raise ConfigError(f"{where}: must be between 1 and 65535, got {value!r}")
    return port


def _levels(raw: Any) -> tuple[TopologyLevel, ...]:
    if raw is None:
        return DEFAULT_LEVELS
    if not isinstance(raw, list) or not raw:
        raise ConfigError("topology.levels: must be a non-empty list")
    levels: list[TopologyLevel] = []
    for i, item in enumerate(raw):
        where = f"topology.levels[{i}]"
        if not isinstance(item, Mapping):
            raise ConfigError(f"{where}: must be a mapping with name and nodeLabel")
        _check_keys(item, {"name", "nodeLabel"}, where)
        name, label = item.get("name"), item.get("nodeLabel")
        if not isinstance(label, str) or not label:
            raise ConfigError(f"{where}.nodeLabel: must be a non-empty string")
        if name is None:
            name = label.rsplit("/", 1)[-1]
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}.name: must be a non-empty string")
        levels.append(TopologyLevel(name, label))
    names = [lvl.name for lvl in levels]
    labels = [lvl.node_label for lvl in levels]
    if len(set(names)) != len(names):
        raise ConfigError("topology.levels: level names must be unique")
    if len(set(labels)) != len(labels):
        raise ConfigError("topology.levels: node labels must be unique")
    return tuple(levels)


def _off_or_seconds(raw: Mapping[str, Any], key: str) -> float:
    """A timeout that 0 (or absence) turns off."""
    if raw.get(key, 0) == 0 and not isinstance(raw.get(key, 0), bool):
        return 0.0
    return _number(raw, key, "lifecycle", 0.0)


def _lifecycle(raw: Mapping[str, Any]) -> Lifecycle:
    _check_keys(raw, {"podsReadyTimeoutSeconds", "recoveryTimeoutSeconds", "backoffBaseSeconds",
                      "backoffMaxSeconds", "backoffJitter", "backoffLimitCount", "replaceOutsideDomain",
                      "startedConfigMaps"},
                "lifecycle")
    default = Lifecycle()
    jitter = raw.get("backoffJitter", default.backoff_jitter)
    if isinstance(jitter, bool) or not isinstance(jitter, int | float) or not 0 <= jitter <= 1:
        raise ConfigError(f"lifecycle.backoffJitter: must be a number from 0 to 1, got {jitter!r}")
    limit = raw.get("backoffLimitCount")
    if limit is not None:
        limit = _count(raw, "backoffLimitCount", "lifecycle", 0)
    replace_outside = raw.get("replaceOutsideDomain", default.replace_outside_domain)
    if not isinstance(replace_outside, bool):
        raise ConfigError(f"lifecycle.replaceOutsideDomain: must be true or false, got {replace_outside!r}")
    result = Lifecycle(
        pods_ready_timeout_seconds=_off_or_seconds(raw, "podsReadyTimeoutSeconds"),
        recovery_timeout_seconds=_off_or_seconds(raw, "recoveryTimeoutSeconds"),
        backoff_base_seconds=_number(raw, "backoffBaseSeconds", "lifecycle", default.backoff_base_seconds),
        backoff_max_seconds=_number(raw, "backoffMaxSeconds", "lifecycle", default.backoff_max_seconds),
        backoff_jitter=float(jitter),
        backoff_limit_count=limit,
        replace_outside_domain=replace_outside,
        started_config_maps=_flag(raw, "startedConfigMaps", "lifecycle", default.started_config_maps),
    )
    if result.backoff_max_seconds < result.backoff_base_seconds:
        raise ConfigError("lifecycle.backoffMaxSeconds: must be >= lifecycle.backoffBaseSeconds")
    return result


def _flag(raw: Mapping[str, Any], key: str, where: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}.{key}: must be true or false, got {value!r}")
    return value


def _starvation(raw: Mapping[str, Any]) -> Starvation:
    _check_keys(raw, {"enabled", "claimAfterSeconds", "claimOnPriority"}, "starvation")
    default = Starvation()
    after = raw.get("claimAfterSeconds", default.claim_after_seconds)
    if isinstance(after, bool) or not isinstance(after, int | float) or not math.isfinite(after) or after < 0:
        raise ConfigError(f"starvation.claimAfterSeconds: must be a number >= 0, got {after!r}")
    return Starvation(enabled=_flag(raw, "enabled", "starvation", default.enabled),
                      claim_after_seconds=float(after),
                      claim_on_priority=_flag(raw, "claimOnPriority", "starvation",
                                              default.claim_on_priority))


def _preemption(raw: Mapping[str, Any]) -> Preemption:
    _check_keys(raw, {"enabled", "victimGraceSeconds", "honorDisruptionMode"}, "preemption")
    default = Preemption()
    return Preemption(enabled=_flag(raw, "enabled", "preemption", default.enabled),
                      victim_grace_seconds=_number(raw, "victimGraceSeconds", "preemption",
                                                   default.victim_grace_seconds),
                      honor_disruption_mode=_flag(raw, "honorDisruptionMode", "preemption",
                                                  default.honor_disruption_mode))


def _autoscaling(raw: Mapping[str, Any]) -> Autoscaling:
    _check_keys(raw, {"provisioningRequests", "provisioningClassName"}, "autoscaling")
    name = raw.get("provisioningClassName", Autoscaling().provisioning_class)
    if not isinstance(name, str) or not name:
        raise ConfigError(f"autoscaling.provisioningClassName: must be a class name, got {name!r}")
    return Autoscaling(_flag(raw, "provisioningRequests", "autoscaling", False), name)


def _token_request(raw: Any) -> TokenRequest | None:
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise ConfigError("tokenRequest: must be a mapping")
    _check_keys(raw, {"serviceAccount", "namespace", "expirationSeconds", "refreshSeconds"}, "tokenRequest")
    account, namespace = raw.get("serviceAccount"), raw.get("namespace") or ""
    if not isinstance(account, str) or not account or not isinstance(namespace, str):
        raise ConfigError("tokenRequest.serviceAccount: the ServiceAccount whose token Quorum uses")
    expiration = int(_number(raw, "expirationSeconds", "tokenRequest", 3600, minimum=600))
    refresh = raw.get("refreshSeconds") or 0  # 0: when 80% of the token's life has passed
    if isinstance(refresh, bool) or not isinstance(refresh, int | float) or not 0 <= refresh < expiration:
        raise ConfigError(f"tokenRequest.refreshSeconds: 0, or fewer seconds than expirationSeconds; "
                          f"got {refresh!r}")
    return TokenRequest(account, namespace, expiration, float(refresh))


def _tls(raw: Mapping[str, Any]) -> TlsSettings:
    _check_keys(raw, {"certFile", "keyFile", "clientCAFile", "clientNames", "reloadSeconds"}, "listen.tls")
    files = {}
    for key in ("certFile", "keyFile", "clientCAFile"):
        value = raw.get(key) or ""
        if not isinstance(value, str) or (not value and key != "clientCAFile"):
            raise ConfigError(f"listen.tls.{key}: must be a file path")
        files[key] = value
    names = raw.get("clientNames") or []
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise ConfigError("listen.tls.clientNames: must be a list of certificate names")
    if names and not files["clientCAFile"]:
        raise ConfigError("listen.tls.clientNames: needs listen.tls.clientCAFile (client certificates)")
    return TlsSettings(files["certFile"], files["keyFile"], files["clientCAFile"], tuple(names),
                       _number(raw, "reloadSeconds", "listen.tls", 10.0, minimum=0.1))


_TOP_LEVEL_KEYS = {"listen", "kubeconfig", "schedulerNames", "topology", "gang", "lifecycle", "starvation",
                   "preemption", "autoscaling", "http", "log", "debug", "tokenRequest"}


def from_mapping(raw: Mapping[str, Any]) -> Config:
    """Build a validated Config from a parsed YAML document."""
    if not isinstance(raw, Mapping):
        raise ConfigError("config file: top level must be a mapping")
    _check_keys(raw, _TOP_LEVEL_KEYS, "")
    listen = _checked_section(raw, "listen", {"host", "port", "tls", "metricsPort", "metricsHost"})
    topology = _checked_section(raw, "topology", {"levels", "kueueTopology"})
    kueue_topology = _kueue_topology(topology)
    gang = _checked_section(raw, "gang", {"bindTimeoutSeconds", "backoffBaseSeconds", "backoffMaxSeconds",
                                          "maxReplans", "bindingsAtOnce"})
    http = _checked_section(raw, "http", {"maxRequestBytes", "bodyTimeoutSeconds"})
    log = _checked_section(raw, "log", {"level", "format"})
    default = Config()  # the defaults are written once, in settings.py
    check = _flag(_checked_section(raw, "debug", {"checkInvariants"}), "checkInvariants", "debug",
                  default.check_invariants)
    host, scheduler_names = _host(listen, default.host), _scheduler_names(raw)
    kubeconfig = _kubeconfig(raw, default.kubeconfig)
    timings = _gang_timings(gang)
    config = Config(
        lifecycle=_lifecycle(_section(raw, "lifecycle")),
        starvation=_starvation(_section(raw, "starvation")),
        preemption=_preemption(_section(raw, "preemption")),
        autoscaling=_autoscaling(_section(raw, "autoscaling")),
        host=host,
        port=_port(listen.get("port", default.port), "listen.port"),
        tls=_tls(_section(listen, "tls")) if listen.get("tls") is not None else None,
        metrics_port=(_port(listen["metricsPort"], "listen.metricsPort") if listen.get("metricsPort")
                      else default.metrics_port),
        metrics_host=str(listen.get("metricsHost") or default.metrics_host),
        kubeconfig=kubeconfig,
        token_request=_token_request(raw.get("tokenRequest")),
        scheduler_names=scheduler_names,
        levels=_levels(topology.get("levels")),
        kueue_topology=kueue_topology,
        gang=timings,
        max_request_bytes=int(_number(http, "maxRequestBytes", "http", default.max_request_bytes,
                                      minimum=1023)),
        body_timeout_seconds=_number(http, "bodyTimeoutSeconds", "http", default.body_timeout_seconds),
        log_level=str(log.get("level", default.log_level)),
        log_format=str(log.get("format", default.log_format)),
        check_invariants=check,
    )
    return validate(config)


def _checked_section(raw: Mapping[str, Any], key: str, allowed: set[str]) -> Mapping[str, Any]:
    """A top-level section with no field Quorum does not know."""
    section = _section(raw, key)
    _check_keys(section, allowed, key)
    return section


def _kueue_topology(topology: Mapping[str, Any]) -> str:
    kueue_topology = topology.get("kueueTopology") or ""
    if not isinstance(kueue_topology, str) or (kueue_topology and topology.get("levels") is not None):
        raise ConfigError("topology.kueueTopology: a Topology name, and then no topology.levels")
    return kueue_topology


def _host(listen: Mapping[str, Any], default: str) -> str:
    host = listen.get("host", default)
    if not isinstance(host, str) or not host:
        raise ConfigError("listen.host: must be a non-empty string")
    return host


def _scheduler_names(raw: Mapping[str, Any]) -> tuple[str, ...]:
    scheduler_names = raw.get("schedulerNames") or []
    if not isinstance(scheduler_names, list) or not all(isinstance(n, str) and n for n in scheduler_names):
        raise ConfigError("schedulerNames: must be a list of kube-scheduler profile names")
    return tuple(scheduler_names)


def _kubeconfig(raw: Mapping[str, Any], default: str) -> str:
    kubeconfig = raw.get("kubeconfig") or default
    if not isinstance(kubeconfig, str):
        raise ConfigError("kubeconfig: must be a path string")
    return kubeconfig


def _gang_timings(gang: Mapping[str, Any]) -> GangTimings:
    default = GangTimings()  # the defaults are written once, in settings.py
    timings = GangTimings(
        bind_timeout_seconds=_number(gang, "bindTimeoutSeconds", "gang", default.bind_timeout_seconds),
        backoff_base_seconds=_number(gang, "backoffBaseSeconds", "gang", default.backoff_base_seconds),
        backoff_max_seconds=_number(gang, "backoffMaxSeconds", "gang", default.backoff_max_seconds),
        max_replans=_count(gang, "maxReplans", "gang", default.max_replans),
        bindings_at_once=_count(gang, "bindingsAtOnce", "gang", default.bindings_at_once),
    )
    if timings.backoff_max_seconds < timings.backoff_base_seconds:
        raise ConfigError("gang.backoffMaxSeconds: must be >= gang.backoffBaseSeconds")
    return timings


def validate(config: Config) -> Config:
    if config.metrics_port and config.metrics_port == config.port:
        raise ConfigError("listen.metricsPort: must differ from listen.port")
    if config.log_level not in _LOG_LEVELS:
        raise ConfigError(f"log.level: must be one of {', '.join(_LOG_LEVELS)}, got {config.log_level!r}")
    if config.log_format not in _LOG_FORMATS:
        raise ConfigError(f"log.format: must be one of {', '.join(_LOG_FORMATS)}, got {config.log_format!r}")
    return config


def load_file(path: str) -> Config:
    """Read and validate a YAML config file (called once at start, before the event loop)."""
    try:
        with open(path, encoding="utf-8") as handle:
            raw = yaml.safe_load(handle)
    except OSError as exc:
        raise ConfigError(f"config file {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path}: invalid YAML: {exc}") from exc
    return from_mapping(raw or {})


def apply_overrides(config: Config, overrides: Mapping[str, Any]) -> Config:
    """Apply env/flag overrides (keys: host, port, kubeconfig, log_level, log_format, bind_timeout)."""
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        if value is None or value == "":
            continue
        if key == "port":
            changes["port"] = _port(value, "port")
        elif key == "bind_timeout":
            try:
                seconds = float(value)
            except ValueError:
                raise ConfigError(f"bind-timeout: must be a number, got {value!r}") from None
            if not math.isfinite(seconds) or seconds <= 0:
                raise ConfigError(f"bind-timeout: must be > 0, got {value!r}")
            changes["gang"] = replace(config.gang, bind_timeout_seconds=seconds)
        elif key in ("host", "kubeconfig", "log_level", "log_format"):
            changes[key] = str(value)
        else:
            raise ConfigError(f"{key}: unknown override")
    return validate(replace(config, **changes))


def env_overrides(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    names = {
        "host": "QUORUM_HOST",
        "port": "QUORUM_PORT",
        "kubeconfig": "QUORUM_KUBECONFIG",
        "log_level": "QUORUM_LOG_LEVEL",
        "log_format": "QUORUM_LOG_FORMAT",
        "bind_timeout": "QUORUM_BIND_TIMEOUT_SECONDS",
    }
    return {key: environ[var] for key, var in names.items() if environ.get(var)}
