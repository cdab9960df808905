"""Extra kube-scheduler + Quorum pairs beside the local cluster's own, for one test.

Each pair serves a kube-scheduler profile of its own (pods opt in by ``schedulerName``), so the
suite's own pair is not disturbed. The commands are the local processes' own (read from
/proc through their pid files): the same binaries, credentials and environment, with a
configuration derived from theirs. Processes are SIGKILLed when the test ends.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .cluster import REPO_ROOT, Quorum, wait
from .process import LocalProcess, config_of
from .reconfigure import merged

PIDS = REPO_ROOT / ".cache" / "cluster" / "pids"
LOGS = REPO_ROOT / ".cache" / "e2e"


def argv_value(argv: list[str], flag: str) -> str | None:
    return argv[argv.index(flag) + 1] if flag in argv[:-1] else None


@dataclass
class Launcher:
    """Starts Quorum and kube-scheduler processes like the local ones, in ``root``."""

    root: Path
    quorum: LocalProcess
    scheduler: LocalProcess
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @classmethod
    def from_local(cls, root: Path) -> Launcher | str:
        quorum = LocalProcess.from_pid_file(PIDS / "quorum.pid", must_contain="extender")
        scheduler = LocalProcess.from_pid_file(PIDS / "kube-scheduler.pid", must_contain="kube-scheduler")
        if isinstance(quorum, str):
            return quorum
        if isinstance(scheduler, str):
            return scheduler
        if not config_of(quorum) or not argv_value(scheduler.argv, "--config"):
            return "the local processes do not name their configuration files"
        return cls(root, quorum, scheduler)

    def _start(self, argv: list[str], log: str, cwd: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
        LOGS.mkdir(parents=True, exist_ok=True)
        with open(LOGS / log, "ab") as out:
            proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        self.started.append(proc)
        return proc

    def start_quorum(self, name: str, port: int, overrides: Mapping[str, Any]) -> subprocess.Popen[bytes]:
        """Quorum with the suite's configuration plus ``overrides``, verbs on ``port``. The port is a
        flag: the local Quorum's environment may set one (flags and environment win over the file)."""
        base_path = config_of(self.quorum)
        assert base_path is not None
        path = self.root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(merged(yaml.safe_load(Path(base_path).read_text()) or {}, overrides)))
        argv = [self.quorum.argv[0], "-m", "extender", "--config", str(path), "--port", str(port)]
        kubeconfig = argv_value(self.quorum.argv, "--kubeconfig")
        argv += ["--kubeconfig", kubeconfig] if kubeconfig else []
        return self._start(argv, f"{name}.log", self.quorum.cwd, self.quorum.env)

    def start_scheduler(self, name: str, port: int, profile: str, extender: Mapping[str, Any],
                        leader_election: Mapping[str, Any] | None = None) -> subprocess.Popen[bytes]:
        """kube-scheduler with the local one's configuration, serving ``profile`` through an
        extender updated with ``extender`` (urlPrefix, TLS...)."""
        source = argv_value(self.scheduler.argv, "--config")
        assert source is not None
        config = yaml.safe_load(Path(source).read_text())
        config["profiles"][0]["schedulerName"] = profile
        config["extenders"][0].update(extender)
        if leader_election is not None:
            config["leaderElection"] = dict(leader_election)
        path = self.root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        argv = list(self.scheduler.argv)
        argv[argv.index("--config") + 1] = str(path)
        argv[argv.index("--secure-port") + 1] = str(port)
        if "--cert-dir" in argv[:-1]:
            argv[argv.index("--cert-dir") + 1] = str(self.root / f"{name}-certs")
        return self._start(argv, f"{name}.log", self.scheduler.cwd, self.scheduler.env)

    def stop(self) -> None:
        for proc in self.started:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=10)


def wait_ready(quorum: Quorum, what: str, timeout: float = 60) -> None:
    if not wait(quorum.ready, timeout=timeout, interval=0.3):
        raise RuntimeError(f"{what} did not become ready; see its log in {LOGS}")


def verb_calls(quorum: Quorum, verb: str) -> float:
    """Requests of one verb a Quorum answered, whatever their outcome."""
    return sum(value for (name, labels), value in quorum.metrics().items()
               if name == "quorum_request_duration_seconds_count" and ("verb", verb) in labels)
