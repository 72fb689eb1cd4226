"""The job queue: the migrated schema is what pgqueuer expects, enqueue is transactional,
and the worker runs registered handlers with retries."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import asyncpg
from pgqueuer.adapters.drivers.asyncpg import AsyncpgDriver
from sqlalchemy import text

from app.db import asyncpg_dsn
from app.resources import Resources
from app.worker.queue import QUEUE_SCHEMA, enqueue, queue_queries
from app.worker.registry import JobContext, JobRegistry, RetryLater
from app.worker.runner import Worker


async def jobs_named(resources: Resources, name: str) -> int:
    async with resources.engine.connect() as conn:
        return int(await conn.scalar(
            text(f"SELECT count(*) FROM {QUEUE_SCHEMA}.pgqueuer WHERE entrypoint = :n"),
            {"n": name}))


async def test_the_migrated_queue_schema_is_what_the_installed_pgqueuer_expects(
    resources: Resources,
) -> None:
    connection = await asyncpg.connect(asyncpg_dsn(resources.engine))
    try:
        plan = await queue_queries(AsyncpgDriver(connection)).plan_upgrade()
    finally:
        await connection.close()
    assert list(plan.statements) == [], "pgqueuer's schema changed: write a migration"


async def test_a_job_commits_or_vanishes_with_the_transaction_that_enqueued_it(
    resources: Resources,
) -> None:
    async with resources.sessionmaker() as session:
        assert await enqueue(session, "test.rolled_back", {"n": 1}) is not None
        await session.rollback()
    async with resources.sessionmaker() as session:
        await enqueue(session, "test.committed", {"n": 2})
        await session.commit()

    assert await jobs_named(resources, "test.rolled_back") == 0
    assert await jobs_named(resources, "test.committed") == 1
    async with resources.engine.begin() as conn:
        await conn.execute(text(f"DELETE FROM {QUEUE_SCHEMA}.pgqueuer "
                                "WHERE entrypoint = 'test.committed'"))


async def test_the_worker_runs_handlers_and_retries_failures(resources: Resources) -> None:
    seen: list[tuple[str, int, Any]] = []
    done = asyncio.Event()

    async def flaky(context: JobContext, payload: Mapping[str, Any]) -> None:
        seen.append(("flaky", context.attempt, payload["n"]))
        if context.attempt == 1:
            raise RuntimeError("first try fails")
        if context.attempt == 2:
            raise RetryLater(timedelta(0), "not yet")
        done.set()

    registry = JobRegistry()
    registry.register("test.flaky", flaky, max_attempts=3, retry_delay=timedelta(0))
    worker = Worker(resources, registry, poll_interval=timedelta(seconds=1))
    await worker.start()
    try:
        async with resources.sessionmaker() as session:
            await enqueue(session, "test.flaky", {"n": 7})
            await session.commit()
        await asyncio.wait_for(done.wait(), 15)
    finally:
        await worker.stop()

    assert seen == [("flaky", 1, 7), ("flaky", 2, 7), ("flaky", 3, 7)]
    assert await jobs_named(resources, "test.flaky") == 0
