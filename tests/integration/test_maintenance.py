"""Housekeeping (app/maintenance.py) on the real database: expired memories are deleted,
every tenant's, in batches, without waiting for rows a request holds, and so leave the
term statistics; old idempotency keys are forgotten; a failed round is retried; the
service runs both in the background."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.consolidation.repository import purge_idle_write_counts
from app.idempotency.repository import purge_older_than
from app.maintenance import WRITE_COUNTS_KEPT, every, start_maintenance
from app.memories.repository import purge_expired
from app.resources import Resources
from app.search.term_stats import fold_term_stats
from app.worker.queue import purge_queue_log
from tests.conftest import TenantKey, make_client, sample


def at(**delta: float) -> str:
    return (datetime.now(UTC) + timedelta(**delta)).isoformat()


async def seed(client: httpx.AsyncClient, items: list[dict[str, Any]]) -> list[str]:
    resp = await client.post("/v1/memories/batch", json={"items": items})
    assert resp.status_code == 201, resp.text
    return [m["id"] for m in resp.json()["items"]]


async def stored(resources: Resources, ids: list[str]) -> set[str]:
    """Which of `ids` are still rows of `memories` (whatever their expiry)."""
    async with resources.sessionmaker() as session:
        rows = await session.execute(text(
            "SELECT id::text FROM memories WHERE id = ANY(CAST(:ids AS uuid[]))"
        ), {"ids": ids})
        return {r[0] for r in rows}


async def document_frequency(resources: Resources, tenant_id: uuid.UUID, lexeme: str) -> int:
    async with resources.sessionmaker() as session:
        df = await session.scalar(text(
            "SELECT coalesce(sum(df), 0) FROM term_stats WHERE tenant_id = :t AND lexeme = :l"
        ), {"t": tenant_id, "l": lexeme})
    return int(df)


async def wait_for(condition: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while not await condition():
        assert asyncio.get_running_loop().time() < deadline, what
        await asyncio.sleep(0.02)


async def test_the_purge_deletes_every_tenants_expired_memories_and_nothing_else(
    resources: Resources, client: httpx.AsyncClient, other_tenant: TenantKey,
) -> None:
    items = [
        {"content": "expired an hour ago", "expires_at": at(hours=-1)},
        {"content": "expired a second ago", "expires_at": at(seconds=-1)},
        {"content": "expires tomorrow", "expires_at": at(days=1)},
        {"content": "never expires"},
    ]
    mine = await seed(client, items)
    async with make_client(resources, other_tenant.headers) as other:
        theirs = await seed(other, items)

    removed = await purge_expired(resources.engine)
    again = await purge_expired(resources.engine)

    # Other tests' expired memories share the database, so at least these four went.
    assert removed >= 4
    assert again == 0
    assert await stored(resources, mine + theirs) == {*mine[2:], *theirs[2:]}
    for memory_id in mine[2:]:
        assert (await client.get(f"/v1/memories/{memory_id}")).status_code == 200


async def test_expired_memories_leave_the_term_statistics_once_deleted(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    await seed(client, [
        {"content": "the zyzzyva password expired", "expires_at": at(minutes=-5)},
        {"content": "the current password is fine"},
    ])
    async with resources.sessionmaker() as session, session.begin():
        await fold_term_stats(session)
    # Expiry is a time, not a write: until deleted, an expired row still counts.
    assert await document_frequency(resources, tenant.tenant_id, "zyzzyva") == 1
    assert await document_frequency(resources, tenant.tenant_id, "") == 2

    await purge_expired(resources.engine)
    async with resources.sessionmaker() as session, session.begin():
        await fold_term_stats(session)

    assert await document_frequency(resources, tenant.tenant_id, "zyzzyva") == 0
    assert await document_frequency(resources, tenant.tenant_id, "password") == 1
    assert await document_frequency(resources, tenant.tenant_id, "") == 1


async def test_the_purge_runs_batch_after_batch_until_none_is_left(
    resources: Resources, client: httpx.AsyncClient,
) -> None:
    expired = await seed(client, [
        {"content": f"expired note {i}", "expires_at": at(minutes=-i - 1)} for i in range(5)
    ])

    removed = await purge_expired(resources.engine, batch=2)

    assert removed >= 5
    assert await stored(resources, expired) == set()


async def test_a_row_a_request_holds_is_left_for_the_next_round(
    resources: Resources, client: httpx.AsyncClient,
) -> None:
    held, free = await seed(client, [
        {"content": "expired and locked", "expires_at": at(minutes=-2)},
        {"content": "expired and free", "expires_at": at(minutes=-1)},
    ])
    async with resources.sessionmaker() as session, session.begin():
        await session.execute(text("SELECT 1 FROM memories WHERE id = :id FOR UPDATE"),
                              {"id": uuid.UUID(held)})
        # The lock is held by this open transaction: the purge must not wait for it.
        await asyncio.wait_for(purge_expired(resources.engine), timeout=10)
        assert await stored(resources, [held, free]) == {held}

    await purge_expired(resources.engine)

    assert await stored(resources, [held, free]) == set()


async def test_forgotten_idempotency_keys_no_longer_replay(
    resources: Resources, client: httpx.AsyncClient,
) -> None:
    headers = {"Idempotency-Key": str(uuid.uuid4())}
    first = await client.post("/v1/memories", json={"content": "first"}, headers=headers)
    conflict = await client.post("/v1/memories", json={"content": "second"}, headers=headers)

    forgotten = await purge_older_than(resources.engine, datetime.now(UTC) + timedelta(minutes=1))
    fresh = await client.post("/v1/memories", json={"content": "second"}, headers=headers)

    assert (first.status_code, conflict.status_code) == (201, 409)
    assert forgotten >= 1
    assert fresh.status_code == 201
    assert fresh.json()["id"] != first.json()["id"]


async def test_the_key_purge_goes_in_batches_under_a_short_statement_timeout(
    resources: Resources, tenant: TenantKey,
) -> None:
    """One DELETE of a whole backlog ran past the statement timeout, failed every round,
    and the table only grew."""
    async with resources.engine.begin() as conn:
        await conn.execute(text(
            "INSERT INTO idempotency_keys (tenant_id, key, operation, request_hash, created_at)"
            " SELECT :t, 'backlog-' || g, 'createMemory', '\\x00', now() - interval '3 days'"
            " FROM generate_series(1, 5000) g"), {"t": tenant.tenant_id})
        await conn.execute(text(
            "INSERT INTO idempotency_keys (tenant_id, key, operation, request_hash, created_at)"
            " VALUES (:t, 'held', 'createMemory', '\\x00', now() - interval '3 days')"),
            {"t": tenant.tenant_id})
    async with resources.sessionmaker() as session, session.begin():
        await session.execute(text("SELECT 1 FROM idempotency_keys WHERE key = 'held' "
                                   "FOR UPDATE"))
        forgotten = await asyncio.wait_for(
            purge_older_than(resources.engine, datetime.now(UTC) - timedelta(days=1),
                             batch=700), timeout=30)
    async with resources.engine.connect() as conn:
        left = await conn.scalar(text(
            "SELECT count(*) FROM idempotency_keys WHERE tenant_id = :t"),
            {"t": tenant.tenant_id})

    assert forgotten >= 5000
    assert left == 1  # the key a request held, for the next round


async def test_a_failed_round_is_logged_and_the_next_one_runs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    async def job() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("database unreachable")
        return 3

    async def ran_twice() -> bool:
        return calls >= 2

    caplog.set_level(logging.INFO, logger="engram.maintenance")
    deleted = sample("engram_maintenance_deleted_total", what="test_rows")
    failures = sample("engram_maintenance_failures_total", what="test_rows")
    task = asyncio.create_task(every(0.01, job, what="test_rows", name="test purge",
                                     done="removed %d things"))
    try:
        await wait_for(ran_twice, "the round after the failure never ran")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    failed = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert failed
    assert failed[0].getMessage() == "test purge failed; retrying in 0 s"
    assert failed[0].exc_info is not None
    assert "removed 3 things" in [r.getMessage() for r in caplog.records]
    assert sample("engram_maintenance_failures_total", what="test_rows") - failures == 1
    assert sample("engram_maintenance_deleted_total", what="test_rows") - deleted \
        == 3 * (calls - 1)


async def test_the_service_deletes_expired_memories_in_the_background(
    resources: Resources, client: httpx.AsyncClient,
) -> None:
    (expired,) = await seed(client, [{"content": "gone soon", "expires_at": at(seconds=1)}])
    counted = sample("engram_maintenance_deleted_total", what="expired_memories")
    settings = resources.settings.model_copy(update={"expired_purge_seconds": 0.05})
    background = replace(resources, settings=settings, background=[])

    start_maintenance(background)
    try:
        async def deleted() -> bool:
            return not await stored(resources, [expired])

        await wait_for(deleted, "the expired memory was never deleted")
    finally:
        for task in background.background:
            task.cancel()
        await asyncio.gather(*background.background, return_exceptions=True)

    assert (await client.get(f"/v1/memories/{expired}")).status_code == 404
    assert sample("engram_maintenance_deleted_total", what="expired_memories") >= counted + 1


async def test_the_job_queue_log_is_purged_past_its_retention(resources: Resources) -> None:
    """pgqueuer writes a log row per job's queued, picked and done (a traceback with a
    failure) and a statistics row per second of work, and never deletes them."""
    async with resources.engine.begin() as conn:
        await conn.execute(text(
            "INSERT INTO pgqueuer.pgqueuer_log (created, job_id, status, priority, entrypoint)"
            " SELECT now() - interval '10 days', g, 'successful', 0, 'maintenance.test'"
            " FROM generate_series(1, 2500) g"))
        await conn.execute(text(
            "INSERT INTO pgqueuer.pgqueuer_log (job_id, status, priority, entrypoint)"
            " VALUES (0, 'queued', 0, 'maintenance.recent')"))
        await conn.execute(text(
            "INSERT INTO pgqueuer.pgqueuer_statistics (created, count, priority, status,"
            " entrypoint) VALUES (now() - interval '10 days', 5, 0, 'successful',"
            " 'maintenance.test')"))

    removed = await purge_queue_log(resources.engine, datetime.now(UTC) - timedelta(days=7),
                                    batch=1000)

    async with resources.engine.connect() as conn:
        left = {r.entrypoint for r in await conn.execute(text(
            "SELECT entrypoint FROM pgqueuer.pgqueuer_log WHERE entrypoint LIKE 'maintenance.%'"
            " UNION ALL SELECT entrypoint FROM pgqueuer.pgqueuer_statistics"
            " WHERE entrypoint LIKE 'maintenance.%'"))}
    assert removed >= 2501
    assert left == {"maintenance.recent"}


async def test_the_service_purges_the_queue_log_in_the_background(
    resources: Resources,
) -> None:
    settings = resources.settings.model_copy(update={"queue_log_retention_days": 7})
    async with resources.engine.begin() as conn:
        await conn.execute(text(
            "INSERT INTO pgqueuer.pgqueuer_log (created, job_id, status, priority, entrypoint)"
            " VALUES (now() - interval '8 days', 1, 'successful', 0, 'maintenance.bg')"))
    own = replace(resources, settings=settings, background=[])
    start_maintenance(own)
    try:
        for _ in range(100):
            async with resources.engine.connect() as conn:
                if not await conn.scalar(text(
                        "SELECT count(*) FROM pgqueuer.pgqueuer_log "
                        "WHERE entrypoint = 'maintenance.bg'")):
                    break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the queue log was not purged")
    finally:
        for task in own.background:
            task.cancel()
        await asyncio.gather(*own.background, return_exceptions=True)


async def test_write_counts_of_scopes_not_written_for_a_month_are_forgotten(
    resources: Resources, tenant: TenantKey,
) -> None:
    """Found by a day-2 probe: a count was kept for every scope ever written (a session id
    per conversation, a user long gone by expiry), its ids in plain text, for ever."""
    now = datetime.now(UTC)
    async with resources.engine.begin() as conn:
        for key, written_at in (('["old-user", null, "conv-1", null]', now - timedelta(days=31)),
                                ('["old-user", null, "conv-2", null]', now - timedelta(days=40)),
                                ('["new-user", null, null, null]', now - timedelta(days=29))):
            await conn.execute(text(
                "INSERT INTO scope_write_counters (tenant_id, scope_key, written, updated_at) "
                "VALUES (:t, :k, 3, :at)"), {"t": tenant.tenant_id, "k": key, "at": written_at})

    removed = await purge_idle_write_counts(resources.engine, now - WRITE_COUNTS_KEPT,
                                            batch=1)

    assert removed >= 2  # other tests' rows may be as old
    async with resources.engine.connect() as conn:
        left = (await conn.execute(text(
            "SELECT scope_key FROM scope_write_counters WHERE tenant_id = :t"),
            {"t": tenant.tenant_id})).scalars().all()
    assert left == ['["new-user", null, null, null]']
