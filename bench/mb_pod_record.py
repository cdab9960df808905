#!/usr/bin/env python3
"""Cost of turning one pod object into a PodRecord (every pod event the informer delivers).

    PYTHONPATH=<checkout> python bench/mb_pod_record.py

Prints microseconds per call (best of 5 repeats of 20,000 calls) for a pending gang member that
kube-scheduler marked unschedulable. Compare revisions by running it from two checkouts in turn,
interleaved (docs/benchmarks.md).
"""

from __future__ import annotations

import timeit

from extender.cluster.records import pod_record

POD = {
    "metadata": {"uid": "u1", "namespace": "ml", "name": "train-0", "labels": {"app": "train"},
                 "annotations": {"quorum.dev/gang": "train", "quorum.dev/min-count": "8"}},
    "spec": {"nodeName": "", "schedulerName": "quorum", "containers": [
        {"name": "c", "resources": {"requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}}}]},
    "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]},
}
CALLS = 20_000

if __name__ == "__main__":
    best = min(timeit.repeat(lambda: pod_record(POD, "ml/train"), number=CALLS, repeat=5))
    print(f"{best / CALLS * 1e6:.2f} µs per pod_record")
