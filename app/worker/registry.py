"""Job handlers by name: what the worker can run. Domains register theirs in `jobs.py`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.resources import Resources


@dataclass(frozen=True, slots=True)
class JobContext:
    """What a handler gets besides its payload: the process's resources and which try
    this is (1 for the first) of how many, so a handler can give up on a condition that
    persists, or record a failure on its last try (after it the job is dropped)."""

    resources: Resources
    job_id: int
    attempt: int
    max_attempts: int

    @property
    def last_try(self) -> bool:
        return self.attempt >= self.max_attempts


Handler = Callable[[JobContext, Mapping[str, Any]], Awaitable[None]]


class RetryLater(Exception):
    """Raised by a handler to run the job again after `delay` (not counted as a failure)."""

    def __init__(self, delay: timedelta, reason: str) -> None:
        super().__init__(reason)
        self.delay = delay
        self.reason = reason


MAIN_LANE = "main"
"""A lane is a worker of its own, with its own slots: a job only ever waits for jobs of
its lane (see app/worker/lifecycle.py)."""


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A handler and its retry policy: an exception is retried with exponential backoff
    (`retry_delay`, doubling) until `max_attempts` tries have failed; then it is logged
    and the job is dropped (pgqueuer keeps the traceback in its log table)."""

    name: str
    handler: Handler
    max_attempts: int = 3
    retry_delay: timedelta = timedelta(seconds=2)
    lane: str = MAIN_LANE


class JobRegistry:
    def __init__(self) -> None:
        self._specs: dict[str, JobSpec] = {}

    def register(
        self,
        name: str,
        handler: Handler,
        *,
        max_attempts: int = 3,
        retry_delay: timedelta = timedelta(seconds=2),
        lane: str = MAIN_LANE,
    ) -> None:
        if name in self._specs:
            raise ValueError(f"job {name!r} is already registered")
        if max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")
        self._specs[name] = JobSpec(name, handler, max_attempts, retry_delay, lane)

    def __iter__(self) -> Iterator[JobSpec]:
        return iter(self._specs.values())

    def __contains__(self, name: object) -> bool:
        return name in self._specs

    def names(self) -> list[str]:
        return sorted(self._specs)

    def lanes(self) -> list[str]:
        return sorted({spec.lane for spec in self._specs.values()})

    def lane(self, lane: str) -> JobRegistry:
        """The jobs of one lane, as a registry of their own."""
        subset = JobRegistry()
        subset._specs = {n: s for n, s in self._specs.items() if s.lane == lane}
        return subset
