"""The jobs this service runs and the recovery it does at start: each domain adds its
handlers and its recovery here, explicitly."""

from __future__ import annotations

import logging

from app.errors import log_failed_round
from app.resources import Resources
from app.service.metrics import JOBS_QUEUED
from app.settings import Settings
from app.worker.queue import queue_counts
from app.worker.registry import MAIN_LANE, JobRegistry

log = logging.getLogger("engram.worker")


def lane_slots(settings: Settings) -> dict[str, int]:
    """How many jobs each lane's worker runs at once."""
    from app.sessions.jobs import FOLD_LANE

    return {MAIN_LANE: settings.worker_concurrency,
            FOLD_LANE: settings.worker_session_concurrency}


def default_registry() -> JobRegistry:
    from app.consolidation.jobs import register_consolidation_jobs
    from app.sessions.jobs import register_session_jobs

    registry = JobRegistry()
    register_consolidation_jobs(registry)
    register_session_jobs(registry)
    return registry


QUEUE_STATUSES = ("queued", "picked")
"""The statuses `queue_counts` reports (app/worker/queue.py)."""
_COUNTED: set[tuple[str, str]] = set()


async def recover(resources: Resources) -> None:
    """Mark work a crash cut off, or a queued run whose job is gone, queue the fold of
    sessions left with one due, and count the queue's jobs for /metrics; logged, never
    fatal (the next sweep retries)."""
    from app.consolidation.runs import fail_abandoned_runs
    from app.sessions.jobs import requeue_stalled_folds

    try:
        counts = await queue_counts(resources.engine)
    except Exception as exc:
        log_failed_round(log, exc, "counting the queue's jobs failed")
    else:
        # Every job and status reads a number, 0 when none is in the queue: cleared, an
        # empty queue exported no series at all (an observability probe); and a count
        # read before never stays.
        _COUNTED.update((job, status) for job in default_registry().names()
                        for status in QUEUE_STATUSES)
        for job, status in _COUNTED:
            JOBS_QUEUED.labels(job, status).set(0)
        for job, status, count in counts:
            JOBS_QUEUED.labels(job, status).set(count)
            _COUNTED.add((job, status))

    try:
        due = await requeue_stalled_folds(resources)
    except Exception as exc:
        log_failed_round(log, exc, "queueing stalled session folds failed")
    else:
        # Every minute while a summariser is down: not worth more than debug.
        log.debug("%d sessions with folds due; their fold jobs are queued", due)
    try:
        failed = await fail_abandoned_runs(resources.sessionmaker)
    except Exception as exc:
        log_failed_round(log, exc, "recovering abandoned consolidation runs failed")
        return
    if failed:
        log.warning("marked failed %d consolidation runs cut off by a crash or never started",
                    failed)
