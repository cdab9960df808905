"""The metrics the gang core counts, as the shapes it needs and nothing more.

The core keeps to its own logic and imports no metrics library: it is given an object with these
attributes. ``extender.metrics.Metrics`` is that object in the running extender; prometheus' Counter
and Histogram fit the shapes below as they are (a ``labels`` call gives a child that counts).
"""

from __future__ import annotations

from typing import Protocol


class Counts(Protocol):
    """A counter (or one labelled child of it)."""

    def inc(self, amount: float = 1) -> None: ...


class LabelledCounts(Protocol):
    """A counter whose children are told apart by label values, given in order."""

    def labels(self, *values: str) -> Counts: ...


class Observations(Protocol):
    """A distribution of measured values (seconds)."""

    def observe(self, amount: float) -> None: ...


class GangMetrics(Protocol):
    """What the gang core counts (names and meanings: ``extender.metrics``). Read-only, so that any
    attribute whose type fits the shape will do."""

    @property
    def binds(self) -> LabelledCounts: ...  # by outcome
    @property
    def gang_wait(self) -> Observations: ...
    @property
    def gang_binds(self) -> Observations: ...  # quorum to the last binding answered
    @property
    def placements(self) -> LabelledCounts: ...  # by result
    @property
    def reservation_timeouts(self) -> Counts: ...
    @property
    def reservation_releases(self) -> LabelledCounts: ...  # by reason
    @property
    def transitions(self) -> LabelledCounts: ...  # by phase left, phase entered
    @property
    def invariant_violations(self) -> Counts: ...
    @property
    def preemptions_refused(self) -> Counts: ...
    @property
    def claims(self) -> LabelledCounts: ...  # by event
    @property
    def preemptions(self) -> LabelledCounts: ...  # by kind
    @property
    def backoffs(self) -> Counts: ...
    @property
    def requeues(self) -> LabelledCounts: ...  # by reason
    @property
    def evictions(self) -> LabelledCounts: ...  # by result
    @property
    def rechecks(self) -> Counts: ...
