"""Run a Python module under a CPU-time sampler, for profiling Quorum on the local cluster.

py-spy samples a thread whenever it is not idle, so on a saturated 2-core machine it also charges
the time a process waits for a CPU to whatever call it was in (a socket write that woke
kube-scheduler, say). This sampler counts CPU only: the kernel's profiling timer (ITIMER_PROF)
fires after every ``--interval`` of the process's own user + system time, and each firing adds
one sample to the Python stack in progress. A firing inside a C call (JSON decoding, a TLS read) is
taken when the call returns, so its time goes to the Python line that made the call.

    QUORUM_LAUNCH="bench/cpu_sampler.py --" bash hack/cluster-up.sh ...   # Quorum under the sampler
    python bench/cluster_bench.py --workloads W1 --reps 1 --profile-quorum DIR --profile-cpu

Signals: SIGUSR1 forgets the samples so far; SIGUSR2 writes them to ``--out`` in the folded
format py-spy's ``raw`` output uses (``frame;frame;... count`` per line), which
``cb_procs.profile_summary`` reads. The timer's resolution is the kernel's tick (4 ms here), so
a sample stands for about that much CPU whatever the interval asked.
"""

from __future__ import annotations

import argparse
import os
import runpy
import signal
import sys
from collections import Counter
from types import FrameType

DEFAULT_OUT = os.path.join(".cache", "cluster", "quorum-cpu.txt")


class Sampler:
    """Folded stacks counted at each profiling-timer firing."""

    def __init__(self, out: str) -> None:
        self.out = out
        self.counts: Counter[str] = Counter()

    def sample(self, _signum: int, frame: FrameType | None) -> None:
        parts = []
        while frame is not None:
            code = frame.f_code
            parts.append(f"{code.co_qualname} ({os.path.basename(code.co_filename)}:{frame.f_lineno})")
            frame = frame.f_back
        self.counts[";".join(reversed(parts))] += 1

    def forget(self, _signum: int, _frame: FrameType | None) -> None:
        self.counts = Counter()

    def write(self, _signum: int, _frame: FrameType | None) -> None:
        items = list(self.counts.items())  # one C call: a sample cannot land in the middle of it
        tmp = f"{self.out}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.writelines(f"{stack} {n}\n" for stack, n in items)
        os.replace(tmp, self.out)


def add_command(parser: argparse.ArgumentParser) -> None:
    """The launched module and its arguments, after the launcher's own (also bench/bind_trace.py's)."""
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="-m MODULE [ARGS...], as after python (a leading -- is dropped)")


def module_command(parser: argparse.ArgumentParser, command: list[str]) -> list[str]:
    command = command[1:] if command[:1] == ["--"] else command
    if len(command) < 2 or command[0] != "-m":
        parser.error("expected -m MODULE [ARGS...]")
    return command


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help=f"where SIGUSR2 writes the samples ({DEFAULT_OUT})")
    parser.add_argument("--interval", type=float, default=0.001, help="seconds of CPU between samples")
    add_command(parser)
    args = parser.parse_args()
    command = module_command(parser, args.command)
    sampler = Sampler(os.path.abspath(args.out))
    signal.signal(signal.SIGPROF, sampler.sample)
    signal.signal(signal.SIGUSR1, sampler.forget)
    signal.signal(signal.SIGUSR2, sampler.write)
    signal.setitimer(signal.ITIMER_PROF, args.interval, args.interval)
    sys.argv = [command[1], *command[2:]]
    try:
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
    finally:  # a firing after the handler is gone (interpreter shutdown) would kill the process
        signal.setitimer(signal.ITIMER_PROF, 0, 0)
        signal.signal(signal.SIGPROF, signal.SIG_IGN)


if __name__ == "__main__":
    main()
