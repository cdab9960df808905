"""Kill and restart a local process exactly as it was started (for the Quorum crash scenario).

The command line, environment and working directory are read from /proc/<pid>; stdout/stderr go to
the file the process was writing to (appended), and the pid file is updated so that
hack/cluster-down.sh stops the new process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

# Restarted processes outlive the test session on purpose; holding them here avoids Popen's
# "still running" warning when the object would otherwise be collected.
_STARTED: list[subprocess.Popen[bytes]] = []


def _running(stat_path: Path) -> bool:
    try:
        stat = stat_path.read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie has already exited


def alive(pid: int) -> bool:
    """Still running, or still exiting: after SIGKILL the thread-group leader of a multi-threaded
    process (kube-apiserver) can be a zombie while its other threads are still tearing down and
    holding its files, its listening socket included; a restart then finds the port in use."""
    proc = Path(f"/proc/{pid}")
    if _running(proc / "stat"):
        return True
    try:
        tasks = [t for t in os.listdir(proc / "task") if t != str(pid)]
    except OSError:
        return False
    return any(_running(proc / "task" / t / "stat") for t in tasks)


@dataclass(frozen=True)
class LocalProcess:
    pid: int
    argv: list[str]
    env: dict[str, str]
    cwd: str
    log_path: str | None
    pid_file: Path

    @classmethod
    def from_pid_file(cls, pid_file: Path, must_contain: str) -> LocalProcess | str:
        """The process named by ``pid_file``, or why it cannot be used."""
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError) as exc:
            return f"no usable pid file {pid_file} ({exc}); is it a local process from hack/cluster-up.sh?"
        if not alive(pid):
            return f"pid {pid} from {pid_file} is not running"
        proc = Path(f"/proc/{pid}")
        try:
            argv = [a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
            env_items = [e.decode() for e in (proc / "environ").read_bytes().split(b"\0") if e]
            cwd = os.readlink(proc / "cwd")
            out = os.readlink(proc / "fd" / "1")
        except OSError as exc:
            return f"cannot read /proc/{pid} ({exc})"
        if not any(must_contain in a for a in argv):
            return f"pid {pid} from {pid_file} is not {must_contain!r}: {argv}"
        env = dict(item.split("=", 1) for item in env_items if "=" in item)
        log_path = out if out.startswith("/") and os.path.isfile(out) else None
        return cls(pid, argv, env, cwd, log_path, pid_file)

    def kill(self, timeout: float = 10.0) -> None:
        os.kill(self.pid, signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while alive(self.pid):
            if time.monotonic() > deadline:
                raise RuntimeError(f"pid {self.pid} still alive {timeout:g}s after SIGKILL")
            time.sleep(0.05)

    def restart(self) -> int:
        """Start the same command again (own session, like cluster-up.sh); returns the new pid."""
        with open(self.log_path or os.devnull, "ab") as log:
            child = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        _STARTED.append(child)
        self.pid_file.write_text(f"{child.pid}\n")
        return child.pid


def with_config(process: LocalProcess, path: str) -> LocalProcess:
    """The same command with ``--config`` pointing at ``path`` (appended if it had none)."""
    argv = list(process.argv)
    if "--config" in argv[:-1]:
        argv[argv.index("--config") + 1] = path
    else:
        argv += ["--config", path]
    return LocalProcess(process.pid, argv, process.env, process.cwd, process.log_path, process.pid_file)


def config_of(process: LocalProcess) -> str | None:
    argv = process.argv
    return argv[argv.index("--config") + 1] if "--config" in argv[:-1] else None
