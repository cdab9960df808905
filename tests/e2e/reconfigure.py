"""Run Quorum with another configuration for one test, then put the suite's back.

Some behaviours are defined by a setting rather than by the objects a test creates (claims on or
off, how soon a claim is made, preemption on or off). The local Quorum is restarted with the
suite's configuration plus the test's overrides (merged section by section), and restarted again
with the suite's own configuration after the test. Quorum keeps no state on disk, so a restart is
also what an operator's config change does.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from .cluster import Quorum, wait
from .process import LocalProcess, config_of, with_config


def merged(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


class Reconfigurer:
    """Restarts the local Quorum process with overrides; ``restore`` brings back the original."""

    def __init__(self, pid_file: Path, quorum: Quorum) -> None:
        self.pid_file = pid_file
        self.quorum = quorum
        self.original: LocalProcess | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="quorum-e2e-config-")

    def process(self) -> LocalProcess | str:
        return LocalProcess.from_pid_file(self.pid_file, must_contain="extender")

    def apply(self, overrides: Mapping[str, Any]) -> None:
        process = self.process()
        if isinstance(process, str):
            raise RuntimeError(process)
        if self.original is None:
            self.original = process
        base_path = config_of(self.original)
        base = yaml.safe_load(Path(base_path).read_text()) if base_path else {}
        path = Path(self._dir.name) / "quorum.yaml"
        path.write_text(yaml.safe_dump(merged(base or {}, overrides)))
        self._restart(process, with_config(process, str(path)))

    def restore(self) -> None:
        if self.original is None:
            return
        process = self.process()
        if isinstance(process, str):
            raise RuntimeError(process)
        original, self.original = self.original, None
        self._restart(process, LocalProcess(process.pid, original.argv, original.env, original.cwd,
                                            original.log_path, original.pid_file))
        self._dir.cleanup()

    def _restart(self, running: LocalProcess, command: LocalProcess) -> None:
        running.kill()
        command.restart()
        if not wait(self.quorum.ready, timeout=60, interval=0.2):
            raise RuntimeError("Quorum did not become ready after a restart with a new configuration")
