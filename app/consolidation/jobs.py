"""Consolidation's background jobs: queued runs (`async: true`) and automatic
synthesize-only runs (every N memories written in a scope).

A job's failure is logged and retried by the worker within limits; it never reaches the
request that caused it. A scope held by another run makes the job wait (retry later),
unlike a synchronous POST, which answers 409 at once.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import ValidationError

from app.consolidation.auto import AUTO_JOB, AutoConsolidation, payload_scope
from app.consolidation.runs import RUN_JOB, ConsolidationRunner, RunGone, ScopeBusy
from app.consolidation.schemas import ConsolidationRequest
from app.consolidation.service import compose
from app.consolidation.stored import NewerRun, request_to_run
from app.errors import ValidationFailed, error_line
from app.models import SCOPE_COLUMNS
from app.tenants.service import standing
from app.worker.registry import JobContext, JobRegistry, RetryLater

log = logging.getLogger("engram.consolidation")

BUSY_RETRIES = 30
"""How often a job retries a busy scope (about 10 minutes in all) before giving up."""


def _busy_delay(attempt: int) -> timedelta:
    return timedelta(seconds=min(30, 2 * attempt))


async def run_queued(context: JobContext, payload: Mapping[str, Any]) -> None:
    runner = ConsolidationRunner(context.resources, uuid.UUID(payload["tenant_id"]))
    run_id = uuid.UUID(payload["run_id"])
    try:
        await _run_queued(context, runner, run_id)
    except RunGone:
        log.info("queued consolidation run %s: its tenant was deleted", run_id)
    except RetryLater:
        raise  # not a failure: the job runs again
    except Exception as exc:
        # A started run records its own failure, so this one has not started: after the
        # last try the job is dropped, so say why now. If the database is what fails, this
        # cannot be written either, and the sweep marks the run once it can.
        if context.last_try:
            await runner.give_up(run_id, "the run never started; its last try failed: "
                                         f"{error_line(exc)}"[:1000])
        raise


async def _run_queued(context: JobContext, runner: ConsolidationRunner,
                      run_id: uuid.UUID) -> None:
    run = await runner.load(run_id)
    if run.status != "running":
        return  # done already: a second delivery
    if run.started_at is not None:
        # Started by an earlier delivery: neither today's settings nor a busy scope (its
        # own, while that delivery runs it) may fail it.
        await runner.settle_started(run)
        return
    if await standing(context.resources.sessionmaker, runner.tenant_id) == "suspended":
        await runner.give_up(run_id, "its tenant was suspended before the run started; "
                                     "post it again once the tenant is resumed")
        return
    try:
        composition = compose(request_to_run(run.request), context.resources)
    except NewerRun as newer:
        # Queued by a newer replica during a rolling deploy: one of those runs it.
        reason = f"queued by a newer version of the service; this one does not know {newer}"
        if context.attempt >= BUSY_RETRIES:
            await runner.give_up(run_id, f"{reason}, and no replica that does took it")
            return
        raise RetryLater(_busy_delay(context.attempt), reason) from newer
    except ValidationError as exc:  # stored by an older version, and no migration read it
        await runner.give_up(run_id, "its stored request no longer reads: " + "; ".join(
            f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())[:900])
        return
    except ValidationFailed as exc:  # the settings changed since it was queued
        await runner.give_up(run_id, exc.detail)
        return
    try:
        await runner.run_queued(run_id, composition)
    except ScopeBusy as busy:
        if context.attempt >= BUSY_RETRIES:
            await runner.give_up(run_id, f"gave up waiting for the scope: {busy.detail}")
            return
        raise RetryLater(_busy_delay(context.attempt), busy.detail) from busy


async def run_auto(context: JobContext, payload: Mapping[str, Any]) -> None:
    tenant_id = uuid.UUID(payload["tenant_id"])
    request = ConsolidationRequest.model_validate({
        "user_id": payload.get("user_id"), "agent_id": payload.get("agent_id"),
        "session_id": payload.get("session_id"), "namespace": payload.get("namespace"),
        "strategy": "simple", "mode": "synthesize_only",
    })
    match await standing(context.resources.sessionmaker, tenant_id):
        case "suspended":
            # Skipped, not postponed: the scope's count queues the next run N writes on.
            log.info("automatic consolidation of a scope (%s) of tenant %s skipped: the "
                     "tenant is suspended", _scope_columns(request), tenant_id)
            return
        case "gone":
            # Queued while the tenant was being deleted; its run would fail on its
            # foreign key at every try (hours of tracebacks, with the tenant's ids).
            log.info("automatic consolidation skipped: its tenant was deleted")
            return
    runner = ConsolidationRunner(context.resources, tenant_id)
    try:
        run = await runner.run_now(request, compose(request, context.resources),
                                   trigger="auto")
    except asyncio.CancelledError:
        await _requeue(context, tenant_id, payload)
        raise
    except RunGone as gone:
        log.info("automatic consolidation: %s", gone.detail)
        return
    except ScopeBusy as busy:
        if context.attempt >= BUSY_RETRIES:
            log.warning("automatic consolidation skipped: %s", busy.detail)
            return
        raise RetryLater(_busy_delay(context.attempt), busy.detail) from busy
    log.info("automatic consolidation %s of a scope (%s): %s, %d summaries", run.id,
             _scope_columns(request), run.status, run.created)


def _scope_columns(request: ConsolidationRequest) -> str:
    """Which columns name the scope, not their values: the values are a user's or a
    conversation's ids, which outlive the user's erasure in the logs (the run's id leads
    an operator to its scope through the API)."""
    return ", ".join(c for c in SCOPE_COLUMNS if getattr(request, c) is not None) or "tenant"


REQUEUE_SECONDS = 1.5
"""How long a cut automatic run may take to queue itself again: within the worker's bound
for a cancelled job to unwind (app/worker/runner.py, CANCELLED_SECONDS)."""


async def _requeue(context: JobContext, tenant_id: uuid.UUID,
                   payload: Mapping[str, Any]) -> None:
    """The worker stopping cut this run (what it wrote stays; the crash sweep marks the
    run): its scope is queued again, for any replica's worker to fold the rest."""
    resources = context.resources
    try:
        async with asyncio.timeout(REQUEUE_SECONDS), resources.sessionmaker() as session, \
                session.begin():
            auto = AutoConsolidation(session, tenant_id, resources.settings.auto_consolidate_every)
            await auto.requeue(payload_scope(payload))
    except Exception as exc:
        log.warning("automatic consolidation cut by the worker stopping could not be queued "
                    "again; its scope's next run comes with its next writes: %r", exc)
    else:
        log.info("automatic consolidation cut by the worker stopping is queued again")


def register_consolidation_jobs(registry: JobRegistry) -> None:
    registry.register(RUN_JOB, run_queued, max_attempts=BUSY_RETRIES + 3)
    registry.register(AUTO_JOB, run_auto, max_attempts=BUSY_RETRIES + 3)
