"""The rolling summariser's health, as a pure state machine.

healthy -> retry -> degraded -> recovering -> healthy. A failure while healthy moves to
`retry`; `degrade_after` consecutive failures to `degraded`, where the context falls
back to truncation and folds wait in the backlog; a success there starts `recovering`,
and `recover_after` consecutive successes make it `healthy` again. A failure while
recovering goes straight back to `degraded`: one success does not prove the summariser
is back.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Literal

from typing_extensions import TypeAliasType

# Named, so the OpenAPI document has one schema for it and generated clients one enum.
SessionHealthState = TypeAliasType(
    "SessionHealthState", Literal["healthy", "retry", "degraded", "recovering"])
HEALTH_STATES: tuple[SessionHealthState, ...] = ("healthy", "retry", "degraded", "recovering")


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    degrade_after: int = 3
    recover_after: int = 2
    # How soon a fold is tried again: doubling from retry_delay while in `retry`, every
    # probe_interval while degraded (the summariser is known to be down).
    retry_delay: timedelta = timedelta(seconds=2)
    probe_interval: timedelta = timedelta(seconds=30)


@dataclass(frozen=True, slots=True)
class Health:
    state: SessionHealthState = "healthy"
    failures: int = 0  # consecutive, reset by a success
    successes: int = 0  # consecutive, counted while recovering

    @property
    def summarising(self) -> bool:
        """Whether the context uses the rolling summary (not while degraded)."""
        return self.state != "degraded"


def after_success(health: Health, policy: HealthPolicy) -> Health:
    if health.state in ("degraded", "recovering"):
        successes = health.successes + 1
        if successes >= policy.recover_after:
            return Health()
        return Health("recovering", failures=0, successes=successes)
    return Health()


def after_failure(health: Health, policy: HealthPolicy) -> Health:
    failures = health.failures + 1
    if health.state in ("degraded", "recovering") or failures >= policy.degrade_after:
        return Health("degraded", failures=failures)
    return replace(health, state="retry", failures=failures, successes=0)


def next_try(health: Health, policy: HealthPolicy) -> timedelta:
    """How long to wait before the next fold after `health` was reached by a failure."""
    if health.state == "degraded":
        return policy.probe_interval
    # Doubled only while under the probe interval: 2 s x 2**46 is past timedelta's range
    # (an OverflowError from failure 47, with degrade_after allowed up to 100).
    delay = policy.retry_delay
    for _ in range(max(0, health.failures - 1)):
        if delay >= policy.probe_interval:
            break
        delay *= 2
    return delay if delay < policy.probe_interval else policy.probe_interval
