"""The gang-started signal: a startup barrier's other half, kept at the scheduler.

Distributed training times out when its first pods start long before the last ones exist (node
pools coming up one by one). JobSet's group-scheduling design answers with a barrier: an init
container in every pod waits until a ConfigMap says that all pods of the group have started.
Quorum already binds a gang whole; it also knows when every member has *started* (the kubelet took
it: ``status.startTime``), so it records that moment:

* an Event (``GangStarted``) and a PodGroup condition ``quorum.dev/GangStarted``;
* for gangs that opt in (annotation ``quorum.dev/started-configmap: <name>``, with
  ``lifecycle.startedConfigMaps`` on), the ConfigMap ``<name>`` with ``started: <time>``, owned by
  the gang's PodGroup. Its members mount it as an optional volume and wait for the file.

A gang Quorum requeues starts over: the ConfigMap is deleted, so the next attempt waits again.
"""

from __future__ import annotations

import datetime

from .core import Core
from .state import GangState


class StartedSignal:
    def __init__(self, core: Core) -> None:
        self.core = core

    def review(self, state: GangState) -> None:
        """Record the start once at least minCount members run and have started."""
        core, key = self.core, state.key
        if state.members_started:
            return
        spec = core.cache.gang_spec(key)
        min_count = core.min_count(state, spec)
        started = core.cache.membership.started_count(key)
        if not min_count or started < min_count:
            return
        state.members_started = True
        core.note(state, "GangStarted", f"gang {key}: {started} members started")
        name = spec.started_configmap if spec is not None else ""
        if not name:
            return
        namespace = key.split("/", 1)[0]
        if not core.config.lifecycle.started_config_maps:
            core.note(state, "StartedConfigMapOff",
                      f"gang {key}: ConfigMap {name} not written: lifecycle.startedConfigMaps is off in "
                      "Quorum's configuration", "Warning")
            return
        when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        core.spawn(core.actions.write_started_configmap(namespace, name, spec.home if spec else None,
                                                        {"started": when, "gang": key,
                                                         "members": str(started)}))

    def reset(self, state: GangState) -> None:
        """The gang starts over (requeued, or no longer the gang that ran): the barrier closes."""
        if not state.members_started:
            return
        state.members_started = False
        spec = self.core.cache.gang_spec(state.key)
        name = spec.started_configmap if spec is not None else ""
        if name and self.core.config.lifecycle.started_config_maps:
            self.core.spawn(self.core.actions.delete_started_configmap(state.key.split("/", 1)[0], name))
