"""JobSet gangs with no PodGroup: the JobSet says at which level its pods form gangs, and the sizes
come from its spec (replicas x pods per Job), so nobody computes a ``minCount`` by hand.

A JobSet asks with one annotation, ``quorum.dev/jobset-gang``:

* ``jobset``: one gang of every pod of the JobSet (or of the replicated jobs listed in
  ``quorum.dev/jobset-gang-replicated-jobs``; the others' pods schedule on their own);
* ``job``: one gang per Job (each replica of each listed replicated job, or of every one).

Topology and lifecycle settings are Quorum's usual annotations, on the JobSet. JobSet labels every
pod with its JobSet, replicated job, Job index and restart attempt; a restart (the failure policy
recreating the Jobs) bumps the attempt, so the new attempt's pods form fresh gangs and the old
attempt's never count toward them.

Which gang a JobSet pod is in depends on its JobSet, and the watch may deliver the pod first. Until
the JobSet is known such a pod waits in its JobSet's gang key, undeclared (Quorum answers "waiting
for its JobSet to exist"); a JobSet that asks for no gang declares that key ``basic``, so its pods are
then woken and schedule one by one. Pods that carry another gang convention keep it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..config import ANNOTATION_PREFIX
from .conventions import COMPOSITE_PREFIX, MemberTopology, topology_of_pod
from .gang_sources import ANNOTATION_PREFERRED, ANNOTATION_REQUIRED, bookkeeping, lifecycle_overrides
from .records import GangHome, GangSpec, JobSetMember

JOBSET_API = "jobset.x-k8s.io/v1alpha2"
JOBSETS = "jobsets"  # the informer kind (object_sources.py)
ANNOTATION_JOBSET_GANG = ANNOTATION_PREFIX + "jobset-gang"
ANNOTATION_JOBSET_TARGETS = ANNOTATION_PREFIX + "jobset-gang-replicated-jobs"
LEVEL_JOBSET, LEVEL_JOB = "jobset", "job"

# What JobSet writes on every pod it makes (labels, and the same as annotations).
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"
RESTART_ATTEMPT = "jobset.sigs.k8s.io/restart-attempt"


@dataclass(frozen=True, slots=True)
class JobSetPolicy:
    """The gangs one JobSet asks for: at which level (``""``: none) and of which replicated jobs
    (empty: every one)."""

    level: str = ""
    targets: frozenset[str] = frozenset()

    def targets_job(self, replicated_job: str) -> bool:
        return not self.targets or replicated_job in self.targets

    def gang_key(self, member: JobSetMember) -> str:
        """The key a member is filed under: its gang, or a basic group when it is in none."""
        targeted = self.targets_job(member.replicated_job)
        if self.level == LEVEL_JOB and targeted:
            return job_key(member.jobset_key, member.replicated_job, member.job_index, member.attempt)
        if self.level and not targeted:
            return free_key(member.jobset_key, member.replicated_job, member.attempt)
        return jobset_key(member.jobset_key, member.attempt)


def jobset_key(jobset: str, attempt: int) -> str:
    """The whole JobSet's gang (or its basic group) for one attempt: "namespace/name/attempt.N"."""
    return f"{jobset}/attempt.{attempt}"


def declaring_kind(key: str) -> str:
    """What a gang key waits for when nothing declares it yet: its JobSet, its CompositePodGroup,
    else its PodGroup."""
    if _ATTEMPT.search(key):
        return "JobSet"
    return "CompositePodGroup" if key.partition("/")[2].startswith(COMPOSITE_PREFIX) else "PodGroup"


_ATTEMPT = re.compile(r"^[^/]+/[^/]+/(?:[^/]+/)?attempt\.[0-9]+$")


def job_key(jobset: str, replicated_job: str, index: int, attempt: int) -> str:
    # Replicated job names are DNS labels (no dots), so these never meet the other keys.
    return f"{jobset}/{replicated_job}.{index}/attempt.{attempt}"


def free_key(jobset: str, replicated_job: str, attempt: int) -> str:
    """The basic group of a replicated job left out of the JobSet's gangs."""
    return f"{jobset}/{replicated_job}/attempt.{attempt}"


def jobset_member(pod: Mapping[str, Any]) -> JobSetMember | None:
    """The pod's place in its JobSet, or None for a pod JobSet did not make."""
    meta = pod.get("metadata") or {}
    labels = meta.get("labels")
    if not isinstance(labels, Mapping):
        return None
    name, replicated = labels.get(JOBSET_NAME), labels.get(REPLICATED_JOB)
    if not (isinstance(name, str) and name and isinstance(replicated, str) and replicated):
        return None
    return JobSetMember(str(meta.get("namespace") or ""), name, replicated,
                        _count(labels.get(JOB_INDEX)), _count(labels.get(RESTART_ATTEMPT)))


def _count(raw: Any) -> int:
    """A small non-negative decimal label value; 0 when absent or not one."""
    if isinstance(raw, str) and 0 < len(raw) <= 9 and raw.isascii() and raw.isdigit():
        return int(raw)
    return 0


# --- the JobSet object -------------------------------------------------------------------------
def policy_of(obj: Mapping[str, Any]) -> tuple[JobSetPolicy, str]:
    """The JobSet's gang policy and what is wrong with it ("" when nothing)."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    level = str(annotations.get(ANNOTATION_JOBSET_GANG) or "").strip().lower()
    raw_targets = str(annotations.get(ANNOTATION_JOBSET_TARGETS) or "")
    targets = frozenset(t.strip() for t in raw_targets.split(",") if t.strip())
    if not level:
        return JobSetPolicy(), ""
    if level not in (LEVEL_JOBSET, LEVEL_JOB):
        return JobSetPolicy(LEVEL_JOBSET, targets), (
            f"{ANNOTATION_JOBSET_GANG} {level[:64]!r} is neither {LEVEL_JOBSET!r} nor {LEVEL_JOB!r}")
    unknown = sorted(targets - set(pods_per_replicated_job(obj)))
    problem = f"{ANNOTATION_JOBSET_TARGETS}: no replicated job {', '.join(unknown)[:200]}" if unknown else ""
    return JobSetPolicy(level, targets), problem


def pods_per_replicated_job(obj: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """Per replicated job: (replicas, pods each of its Jobs runs at once)."""
    out: dict[str, tuple[int, int]] = {}
    for rjob in (obj.get("spec") or {}).get("replicatedJobs") or ():
        if not isinstance(rjob, Mapping) or not isinstance(rjob.get("name"), str):
            continue
        job = ((rjob.get("template") or {}).get("spec")) or {}
        parallelism = _int(job.get("parallelism"), 1)
        completions = job.get("completions")
        if isinstance(completions, int) and not isinstance(completions, bool):
            parallelism = min(parallelism, completions)
        out[rjob["name"]] = (_int(rjob.get("replicas"), 1), max(parallelism, 0))
    return out


def _int(raw: Any, default: int) -> int:
    return raw if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < 2**31 else default


def restart_attempt(obj: Mapping[str, Any]) -> int:
    restarts = (obj.get("status") or {}).get("restarts")
    return _int(restarts, 0)


def specs_from_jobset(obj: Mapping[str, Any], api_version: str) -> dict[str, GangSpec]:
    """Every key the JobSet's current attempt files pods under: its gangs, and basic groups for the
    pods in none (so that pods held while the JobSet was unknown are woken when it arrives)."""
    meta = obj.get("metadata") or {}
    ident, attempt = f"{meta.get('namespace') or ''}/{meta.get('name') or ''}", restart_attempt(obj)
    policy, problem = policy_of(obj)
    sizes = pods_per_replicated_job(obj)
    base: dict[str, Any] = {"created": str(meta.get("creationTimestamp") or ""),
                            "source": f"{api_version or JOBSET_API} JobSet"}
    whole = jobset_key(ident, attempt)
    basic = {"min_count": 1, "is_gang": False, **base}
    if not policy.level:
        return {whole: GangSpec(key=whole, **basic)}
    targeted = {rjob: size for rjob, size in sizes.items() if policy.targets_job(rjob)}
    out = {free_key(ident, rjob, attempt): GangSpec(key=free_key(ident, rjob, attempt), **basic)
           for rjob in sizes if rjob not in targeted}
    gang = {**_gang_fields(meta.get("annotations") or {}), **base, "problem": problem}
    if policy.level == LEVEL_JOB:
        out[whole] = GangSpec(key=whole, **basic)  # pods held before the JobSet was known move out
        out.update(_per_job(ident, attempt, targeted, gang))
        return out
    total = sum(replicas * pods for replicas, pods in targeted.values())
    out[whole] = _gang(whole, total, {**gang, **bookkeeping(meta.get("annotations") or {}),
                                      "home": _home(meta, api_version)})
    return out


def _per_job(ident: str, attempt: int, targeted: Mapping[str, tuple[int, int]],
             gang: dict[str, Any]) -> dict[str, GangSpec]:
    """One gang per Job of each targeted replicated job."""
    out = {}
    for rjob, (replicas, pods) in targeted.items():
        for index in range(min(replicas, _MAX_JOBS)):
            key = job_key(ident, rjob, index, attempt)
            out[key] = _gang(key, pods, gang)
    return out


def _gang_fields(annotations: Mapping[str, Any]) -> dict[str, Any]:
    """What the JobSet's annotations say of its gangs: topology and lifecycle settings."""
    return {**lifecycle_overrides(annotations),
            "required_topology": _text(annotations.get(ANNOTATION_REQUIRED)),
            "preferred_topology": _text(annotations.get(ANNOTATION_PREFERRED))}


def _home(meta: Mapping[str, Any], api_version: str) -> GangHome:
    """The JobSet itself: a whole-JobSet gang's Events and bookkeeping go on it."""
    return GangHome(api_version or JOBSET_API, "JobSet", "jobsets", str(meta.get("namespace") or ""),
                    str(meta.get("name") or ""), uid=str(meta.get("uid") or ""))


_MAX_JOBS = 10_000  # a hostile replicas count must not make a million declarations


def _gang(key: str, size: int, fields: dict[str, Any]) -> GangSpec:
    empty = "" if size >= 1 else "the JobSet's targeted replicated jobs run no pods"
    problem = fields.get("problem") or empty
    return GangSpec(key=key, min_count=max(size, 1), **{**fields, "problem": problem})


def _text(raw: Any) -> str | None:
    return raw.strip() or None if isinstance(raw, str) else None


# --- filing pods -------------------------------------------------------------------------------
class JobSetFiling:
    """Which key each JobSet pod is filed under, given what is known of its JobSet; the members
    are remembered (their place and the topology they ask for, not the whole pod) to file them again
    when it changes."""

    def __init__(self) -> None:
        self.watching = True  # JobSets are served (until the informer finds they are not)
        self._policies: dict[str, JobSetPolicy] = {}  # "namespace/name" -> policy
        self._members: dict[str, dict[str, JobSetMember]] = {}  # JobSet -> uid -> member
        self._topology: dict[str, MemberTopology] = {}  # uid -> what its annotations ask, if anything
        self._jobset_of: dict[str, str] = {}  # uid -> JobSet

    def gang_key(self, uid: str, pod: Mapping[str, Any], named: str | None) -> str | None:
        """The pod's key: ``named`` (what its own conventions say) when it has one, else its
        JobSet's, else none."""
        self.forget(uid)
        if named is not None:
            return named
        member = jobset_member(pod)
        if member is None:
            return None
        self._jobset_of[uid] = member.jobset_key
        self._members.setdefault(member.jobset_key, {})[uid] = member
        topology = topology_of_pod(pod)
        if topology is not None:
            self._topology[uid] = topology
        return self.key_of(member)

    def topology(self, uid: str) -> MemberTopology | None:
        """The topology a remembered member's annotations ask for (it goes with it to a new key)."""
        return self._topology.get(uid)

    def key_of(self, member: JobSetMember) -> str | None:
        if not self.watching:
            return None
        policy = self._policies.get(member.jobset_key)
        if policy is None:  # not delivered yet: wait under the JobSet's key, undeclared
            return jobset_key(member.jobset_key, member.attempt)
        return policy.gang_key(member)

    def forget(self, uid: str) -> None:
        jobset = self._jobset_of.pop(uid, None)
        self._topology.pop(uid, None)
        if jobset is None:
            return
        members = self._members.get(jobset)
        if members is not None:
            members.pop(uid, None)
            if not members:
                del self._members[jobset]

    def put(self, ident: str, obj: Mapping[str, Any] | None) -> Iterable[tuple[str, str | None]]:
        """A JobSet arrived, changed (``obj``) or went (None): its members and their keys now."""
        if obj is None:
            self._policies.pop(ident, None)
        else:
            self._policies[ident] = policy_of(obj)[0]
        return self._keys(self._members.get(ident, {}))

    def set_watching(self, watching: bool) -> Iterable[tuple[str, str | None]]:
        """Whether JobSets are served; every member's key when that changes."""
        if watching == self.watching:
            return ()
        self.watching = watching
        if not watching:
            self._policies.clear()
        return [pair for members in self._members.values() for pair in self._keys(members)]

    def _keys(self, members: Mapping[str, JobSetMember]) -> list[tuple[str, str | None]]:
        return [(uid, self.key_of(member)) for uid, member in members.items()]
