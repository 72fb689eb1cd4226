"""Periodic housekeeping inside the service process: forgetting old idempotency keys,
deleting expired memories, and deleting sessions idle past their retention, memories'
earlier states past theirs, the job queue's log past its and the consolidation runs no
memory names past theirs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from app.consolidation.repository import purge_idle_write_counts, purge_runs_finished_before
from app.errors import log_failed_round
from app.idempotency.repository import purge_older_than
from app.memories.repository import purge_expired, purge_versions_replaced_before
from app.resources import Resources
from app.service.metrics import MAINTENANCE_DELETED, MAINTENANCE_FAILURES
from app.sessions.config import retention
from app.sessions.repository import purge_idle
from app.worker.queue import purge_queue_log

log = logging.getLogger("engram.maintenance")

INTERVAL_SECONDS = 3600.0
# A scope not written for this long has its automatic consolidation count forgotten; a
# write after it counts from 0 (its next run comes that many writes later).
WRITE_COUNTS_KEPT = timedelta(days=30)


async def every(seconds: float, job: Callable[[], Awaitable[int]], *, what: str, name: str,
                done: str) -> None:
    """Run `job` now and then every `seconds` until cancelled; `done` is logged with the
    count of a round that removed anything, which /metrics adds up under `what`."""
    # Both series at 0 from the start (app/service/metrics.py).
    MAINTENANCE_DELETED.labels(what)
    MAINTENANCE_FAILURES.labels(what)
    while True:
        try:
            removed = await job()
            if removed:
                MAINTENANCE_DELETED.labels(what).inc(removed)
                log.info(done, removed)
        except Exception as exc:
            # Housekeeping must never take the service down; the next round retries.
            MAINTENANCE_FAILURES.labels(what).inc()
            log_failed_round(log, exc, "%s failed; retrying in %.0f s", name, seconds)
        await asyncio.sleep(seconds)


def start_maintenance(resources: Resources) -> None:
    settings = resources.settings
    ttl = timedelta(hours=settings.idempotency_ttl_hours)

    async def forget_keys() -> int:
        return await purge_older_than(resources.engine, datetime.now(UTC) - ttl)

    async def delete_expired() -> int:
        return await purge_expired(resources.engine)

    async def forget_idle_write_counts() -> int:
        return await purge_idle_write_counts(resources.engine,
                                             datetime.now(UTC) - WRITE_COUNTS_KEPT)

    resources.background += [
        asyncio.create_task(every(INTERVAL_SECONDS, forget_keys, what="idempotency_keys",
                                  name="idempotency key purge",
                                  done=f"forgot %d idempotency keys older than {ttl}")),
        asyncio.create_task(every(settings.expired_purge_seconds, delete_expired,
                                  what="expired_memories", name="expired memory purge",
                                  done="deleted %d expired memories")),
        asyncio.create_task(every(INTERVAL_SECONDS, forget_idle_write_counts,
                                  what="scope_write_counters", name="write count purge",
                                  done=f"forgot the write counts of %d scopes not written "
                                       f"for {WRITE_COUNTS_KEPT.days} days")),
    ]
    if settings.history_retention_days > 0:
        kept = timedelta(days=settings.history_retention_days)

        async def delete_old_versions() -> int:
            return await purge_versions_replaced_before(resources.engine,
                                                        datetime.now(UTC) - kept)

        resources.background.append(asyncio.create_task(every(
            INTERVAL_SECONDS, delete_old_versions, what="memory_versions",
            name="memory history purge",
            done=f"deleted %d earlier states of memories replaced more than {kept} ago")))
    if settings.queue_log_retention_days > 0:
        logged = timedelta(days=settings.queue_log_retention_days)

        async def delete_old_queue_log() -> int:
            return await purge_queue_log(resources.engine, datetime.now(UTC) - logged)

        resources.background.append(asyncio.create_task(every(
            INTERVAL_SECONDS, delete_old_queue_log, what="queue_log",
            name="job queue log purge",
            done=f"deleted %d job queue log rows older than {logged}")))
    if settings.consolidation_run_retention_days > 0:
        ended = timedelta(days=settings.consolidation_run_retention_days)

        async def delete_old_runs() -> int:
            return await purge_runs_finished_before(resources.engine, datetime.now(UTC) - ended)

        resources.background.append(asyncio.create_task(every(
            INTERVAL_SECONDS, delete_old_runs, what="consolidation_runs",
            name="consolidation run purge",
            done=f"deleted %d consolidation runs that ended more than {ended} ago and that "
                 "no memory names")))
    idle = retention(settings)
    if idle is not None:
        async def delete_idle_sessions() -> int:
            return await purge_idle(resources.engine, idle)

        resources.background.append(asyncio.create_task(every(
            INTERVAL_SECONDS, delete_idle_sessions, what="idle_sessions",
            name="idle session purge", done=f"deleted %d sessions idle for more than {idle}")))
