"""bench/cpu_sampler.py counts CPU time by stack, which is what the CPU profiles in
docs/benchmarks.md rest on: a process that burns CPU in one function and sleeps in another must
show the first and not the second."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

WORKLOAD = '''
import os, signal, sys, time

def burn(seconds):
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass

def doze(seconds):
    time.sleep(seconds)

if __name__ == "__main__":
    os.kill(os.getpid(), signal.SIGUSR1)  # forget anything sampled while starting
    burn(0.3)
    doze(0.5)
    os.kill(os.getpid(), signal.SIGUSR2)
    print("args", sys.argv[1:])
'''


def test_samples_follow_cpu_time_not_wall_time(tmp_path: Path) -> None:
    (tmp_path / "busy.py").write_text(WORKLOAD)
    out = tmp_path / "samples.txt"
    run = subprocess.run([sys.executable, str(ROOT / "bench" / "cpu_sampler.py"), "--out", str(out), "--",
                          "-m", "busy", "--flag", "value"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr
    assert "args ['--flag', 'value']" in run.stdout  # the module sees its own arguments
    counts: dict[str, int] = {}
    for line in out.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        leaf = stack.split(";")[-1].split(" (")[0]
        counts[leaf] = counts.get(leaf, 0) + int(n)
    assert counts.get("burn", 0) >= 20, counts  # 0.3 s of CPU at a tick of at most 10 ms
    assert counts.get("burn", 0) > 5 * counts.get("doze", 0), counts  # sleeping costs no CPU
    assert all(stack.startswith("_run_module_as_main") or "run_module" in stack
               for stack in out.read_text().splitlines()), "stacks are folded from the outermost frame"
