"""Configuration: one YAML file, then environment variables, then command-line flags.

Validation happens once at start; any bad value stops the process with a message that names the
field (``gang.bindTimeoutSeconds: must be > 0``) instead of failing later on the request path.
"""

from __future__ import annotations

from .loading import apply_overrides, env_overrides, from_mapping, load_file, validate
from .settings import (
    ANNOTATION_PREFIX,
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

__all__ = [
    "ANNOTATION_PREFIX",
    "DEFAULT_LEVELS",
    "Autoscaling",
    "Config",
    "ConfigError",
    "GangTimings",
    "Lifecycle",
    "Preemption",
    "Starvation",
    "TlsSettings",
    "TokenRequest",
    "TopologyLevel",
    "apply_overrides",
    "env_overrides",
    "from_mapping",
    "load_file",
    "validate",
]
