"""The sessions' background job: folding turns into the rolling summary, retried while
the summariser fails (quickly in `retry`, every probe interval while degraded), and the
sweep that queues it again for sessions left with folds due."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from app.resources import Resources
from app.sessions.config import build_summariser, fold_policy, health_policy
from app.sessions.folder import FOLD_JOB, SessionFolder, enqueue_fold
from app.sessions.repository import stalled_folds
from app.tenants.service import standing
from app.worker.registry import JobContext, JobRegistry, RetryLater

log = logging.getLogger("engram.sessions")

FOLD_MAX_TRIES = 200
"""Tries of one fold job (a degraded summariser is probed ~100 minutes at the default
interval); after that the sweep queues a new one."""
SWEEP_BATCH = 500
FOLD_LANE = "sessions"


def folder_for(resources: Resources, tenant_id: uuid.UUID, session_id: str) -> SessionFolder:
    settings = resources.settings
    return SessionFolder(resources.sessionmaker, tenant_id, session_id,
                         summariser=build_summariser(settings, resources.llm),
                         folds=fold_policy(settings), health=health_policy(settings),
                         max_chars=settings.session_summary_max_chars,
                         max_events=settings.session_max_events)


async def run_fold(context: JobContext, payload: Mapping[str, Any]) -> None:
    tenant_id = uuid.UUID(payload["tenant_id"])
    session_id = str(payload["session_id"])
    match await standing(context.resources.sessionmaker, tenant_id):
        case "suspended":
            # The fold stays due; the sweep queues it again once the tenant is resumed.
            log.info("fold of session %s skipped: its tenant is suspended", session_id)
            return
        case "gone":
            log.info("fold of session %s skipped: its tenant was deleted", session_id)
            return
    outcome = await folder_for(context.resources, tenant_id, session_id).run()
    if outcome.retry_after is not None:
        raise RetryLater(outcome.retry_after, "the summariser failed")
    if outcome.more:
        # Queueing a new job would be skipped: this one still holds the dedupe key.
        raise RetryLater(timedelta(0), "more folds are due")


async def requeue_stalled_folds(resources: Resources) -> int:
    """Queue the fold job of sessions with a fold due and no job (a job that gave up, or
    an append that came while its job was finishing, or a suspended tenant's, once it is
    resumed); already queued ones are skipped."""
    async with resources.sessionmaker.begin() as db:
        stalled = await stalled_folds(db, SWEEP_BATCH)
        for tenant_id, session_id in stalled:
            await enqueue_fold(db, tenant_id, session_id)
    return len(stalled)


def register_session_jobs(registry: JobRegistry) -> None:
    # A lane of its own: folds take seconds, and must not wait behind consolidation runs
    # that take minutes (a fold left waiting past the backlog's bound drops turns).
    registry.register(FOLD_JOB, run_fold, max_attempts=FOLD_MAX_TRIES, lane=FOLD_LANE)
