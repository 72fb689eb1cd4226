"""The queue's names and transactional enqueue.

`enqueue` writes the job through the caller's own SQLAlchemy session (its raw asyncpg
connection), so the job commits or vanishes with the rows that caused it. `job_pending`
lets a domain's SQL ask whether the job for one of its rows can still run; `queue_counts`
says how many jobs wait or run.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
from pgqueuer.adapters.persistence.qb import (
    QueryBuilderEnvironment,
    QueryQueueBuilder,
    QuerySchedulerBuilder,
)
from pgqueuer.domain.settings import DBSettings, Durability
from pgqueuer.ports.driver import Driver
from pgqueuer.queries import Queries
from sqlalchemy import column, delete, select, table, text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession

from app.db import delete_in_batches
from app.service import request_id

QUEUE_SCHEMA = "pgqueuer"
"""Migration 0002 installs pgqueuer's tables in this schema, apart from ours."""

QUEUED_BY = "queued_by"
"""The payload key holding the id of the request that queued a job, when one did."""

# Every name is given, so no PGQUEUER_* variable in the environment can move the queue
# away from what the migration created.
QUEUE_SETTINGS = DBSettings(
    prefix="",
    db_schema=QUEUE_SCHEMA,
    channel="ch_pgqueuer",
    function="fn_pgqueuer_changed",
    statistics_table="pgqueuer_statistics",
    queue_status_type="pgqueuer_status",
    queue_table="pgqueuer",
    queue_table_log="pgqueuer_log",
    trigger="tg_pgqueuer_changed",
    schedules_table="pgqueuer_schedules",
    durability=Durability.durable,
)


def queue_queries(driver: Driver) -> Queries:
    return Queries(
        driver,
        qbe=QueryBuilderEnvironment(QUEUE_SETTINGS),
        qbq=QueryQueueBuilder(QUEUE_SETTINGS),
        qbs=QuerySchedulerBuilder(QUEUE_SETTINGS),
    )


async def raw_connection(session: AsyncSession) -> Any:
    """The asyncpg connection under `session`, inside the session's open transaction.

    SQLAlchemy begins the database transaction lazily, on the first statement; a query
    sent to the raw connection before that would run outside it and commit alone.
    """
    connection = await session.connection()
    raw: Any = (await connection.get_raw_connection()).driver_connection
    if not raw.is_in_transaction():
        await session.execute(text("SELECT 1"))
    return raw


async def enqueue(
    session: AsyncSession,
    job: str,
    payload: Mapping[str, Any],
    *,
    dedupe_key: str | None = None,
    delay: timedelta | None = None,
) -> int | None:
    """Queue `job` in the session's transaction; its id, or None when `dedupe_key` is
    already queued or running (then nothing is added)."""
    queries = queue_queries(AsyncpgDriver(await raw_connection(session)))
    values = dict(payload)
    if (origin := request_id.current()) is not None:
        # The job's log lines and upstream calls carry it (app/worker/runner.py).
        values[QUEUED_BY] = origin
    body = json.dumps(values, separators=(",", ":")).encode()
    ids = await queries.enqueue(
        job, body, execute_after=delay, dedupe_key=dedupe_key, on_conflict="skip"
    )
    return int(ids[0]) if ids[0] is not None else None


async def job_running(session: AsyncSession, dedupe_key: str) -> bool:
    """Whether the job queued under `dedupe_key` has been picked (is running)."""
    found = await session.execute(text(
        f"SELECT 1 FROM {QUEUE_SCHEMA}.{QUEUE_SETTINGS.queue_table} "
        "WHERE dedupe_key = :key AND status = 'picked'"), {"key": dedupe_key})
    return found.first() is not None


def job_pending(payload_value_sql: str) -> str:
    """A SQL predicate: a job of entry point `:job_entrypoint` whose payload holds
    `:job_payload_key` = `payload_value_sql` is still in the queue (waiting, running,
    or waiting to retry). pgqueuer deletes a job's row once the job has ended, succeeded
    or failed for good, so a row whose job is not pending will never be picked up."""
    return f"""EXISTS (
        SELECT 1 FROM {QUEUE_SCHEMA}.{QUEUE_SETTINGS.queue_table} AS job
         WHERE job.entrypoint = :job_entrypoint
           AND convert_from(job.payload, 'UTF8')::jsonb ->> :job_payload_key
               = {payload_value_sql})"""


async def queue_counts(engine: AsyncEngine) -> list[tuple[str, str, int]]:
    """(job, status, count) of the jobs in the queue: `queued` (waiting, or waiting to
    retry) and `picked` (running)."""
    async with engine.connect() as conn:
        rows = await conn.execute(text(
            f"SELECT entrypoint, status::text, count(*) "
            f"FROM {QUEUE_SCHEMA}.{QUEUE_SETTINGS.queue_table} GROUP BY 1, 2"))
        return [(r[0], r[1], int(r[2])) for r in rows]


async def drop_tenant_jobs(engine: AsyncEngine, tenant_id: uuid.UUID) -> int:
    """Delete a tenant's jobs still waiting (every job's payload names its tenant); how
    many. Running ones are left to end: their rows are gone, so they find nothing."""
    async with engine.begin() as conn:
        return await drop_tenant_jobs_on(conn, tenant_id)


async def drop_tenant_jobs_on(conn: AsyncConnection, tenant_id: uuid.UUID) -> int:
    """`drop_tenant_jobs` in the caller's transaction."""
    result = await conn.execute(text(
        f"DELETE FROM {QUEUE_SCHEMA}.{QUEUE_SETTINGS.queue_table} "
        "WHERE status = 'queued' "
        "AND convert_from(payload, 'UTF8')::jsonb ->> 'tenant_id' = :t"),
        {"t": str(tenant_id)})
    return int(result.rowcount or 0)


_QUEUE_LOG = table("pgqueuer_log", column("id"), column("created"), schema=QUEUE_SCHEMA)
_QUEUE_STATISTICS = table("pgqueuer_statistics", column("id"), column("created"),
                          schema=QUEUE_SCHEMA)


async def purge_queue_log(engine: AsyncEngine, cutoff: datetime, batch: int = 1000) -> int:
    """Delete the queue's log and statistics rows written before `cutoff` (a maintenance
    job); how many. pgqueuer keeps them for ever. `batch` rows a transaction, oldest first
    (both tables are indexed or ordered by their id with time)."""
    removed = 0
    for log_table in (_QUEUE_LOG, _QUEUE_STATISTICS):
        old = (select(log_table.c.id).where(log_table.c.created < cutoff)
               .order_by(log_table.c.id).limit(batch))
        removed += await delete_in_batches(
            engine, delete(log_table).where(log_table.c.id.in_(old.scalar_subquery())), batch)
    return removed
