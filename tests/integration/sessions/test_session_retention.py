"""Session retention (`ENGRAM_SESSION_RETENTION_DAYS`): the maintenance round deletes the
sessions of every tenant idle past it, with their turns and events, and nothing else (not
an active session, not the memories stored with the session's id); in batches, without
waiting for a session an append holds; in the background only when retention is set."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import text

from app.maintenance import start_maintenance
from app.resources import Resources
from app.sessions.repository import purge_idle
from tests.conftest import TenantKey, make_client, sample
from tests.integration.sessions.conftest import append, get_json, new_id
from tests.integration.test_maintenance import wait_for

RETENTION = timedelta(days=2)


async def age(resources: Resources, tenant: TenantKey, sid: str, days: float) -> None:
    """Make the session's last append or strategy change `days` old."""
    async with resources.engine.begin() as conn:
        await conn.execute(text(
            "UPDATE sessions SET updated_at = now() - make_interval(secs => :s) "
            "WHERE tenant_id = :t AND session_id = :sid"),
            {"s": days * 86400, "t": tenant.tenant_id, "sid": sid})


async def rows(resources: Resources, tenant: TenantKey, sid: str) -> tuple[int, int, int]:
    """The session's rows: (sessions, turns, events)."""
    async with resources.engine.connect() as conn:
        counts = (await conn.execute(text(
            "SELECT (SELECT count(*) FROM sessions WHERE tenant_id = :t AND session_id = :s),"
            " (SELECT count(*) FROM session_turns WHERE tenant_id = :t AND session_id = :s),"
            " (SELECT count(*) FROM session_events WHERE tenant_id = :t AND session_id = :s)"),
            {"t": tenant.tenant_id, "s": sid})).one()
    return counts[0], counts[1], counts[2]


async def idle_session(client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
                       days: float = 3) -> str:
    sid = new_id()
    await append(client, sid, "Book the Alfama hotel.", user_id="dana")
    await append(client, sid, "Done.", role="assistant")
    await age(resources, tenant, sid, days)
    return sid


async def test_idle_sessions_of_every_tenant_go_with_their_turns_and_events(
    resources: Resources, tenant: TenantKey, other_tenant: TenantKey,
    client: httpx.AsyncClient,
) -> None:
    idle = await idle_session(client, resources, tenant)
    # A refused turn leaves an event to be deleted with the session.
    await append(client, idle, "hi", user_id="eve", expect=409)
    await age(resources, tenant, idle, 3)
    almost = await idle_session(client, resources, tenant, days=1.9)
    active = new_id()
    await append(client, active, "Still talking.")
    memory = await client.post("/v1/memories", json={"content": "Dana likes Alfama",
                                                     "session_id": idle})
    assert memory.status_code == 201, memory.text
    async with make_client(resources, other_tenant.headers) as other:
        elsewhere = await idle_session(other, resources, other_tenant)
    assert await rows(resources, tenant, idle) == (1, 2, 1)

    removed = await purge_idle(resources.engine, RETENTION)

    assert removed >= 2
    assert await rows(resources, tenant, idle) == (0, 0, 0)
    assert await rows(resources, other_tenant, elsewhere) == (0, 0, 0)
    assert (await client.get(f"/v1/sessions/{idle}")).status_code == 404
    for kept in (almost, active):
        assert (await client.get(f"/v1/sessions/{kept}")).status_code == 200
    assert (await client.get(f"/v1/memories/{memory.json()['id']}")).status_code == 200
    # The id is free again: a new turn starts a new session.
    assert (await append(client, idle, "Back again."))["seq"] == 1


async def test_the_purge_runs_batch_after_batch_until_none_is_left(
    resources: Resources, tenant: TenantKey, client: httpx.AsyncClient,
) -> None:
    sids = [await idle_session(client, resources, tenant) for _ in range(5)]

    removed = await purge_idle(resources.engine, RETENTION, batch=2)

    assert removed >= 5
    assert [await rows(resources, tenant, s) for s in sids] == [(0, 0, 0)] * 5


async def test_a_session_an_append_holds_is_left_for_the_next_round(
    resources: Resources, tenant: TenantKey, client: httpx.AsyncClient,
) -> None:
    held = await idle_session(client, resources, tenant)
    free = await idle_session(client, resources, tenant)
    async with resources.engine.begin() as conn:
        # The lock an append takes on its session's row, held by this open transaction.
        await conn.execute(text(
            "SELECT 1 FROM sessions WHERE tenant_id = :t AND session_id = :s "
            "FOR NO KEY UPDATE"), {"t": tenant.tenant_id, "s": held})
        await asyncio.wait_for(purge_idle(resources.engine, RETENTION), timeout=10)
        assert await rows(resources, tenant, free) == (0, 0, 0)
        assert await rows(resources, tenant, held) == (1, 2, 0)

    await purge_idle(resources.engine, RETENTION)

    assert await rows(resources, tenant, held) == (0, 0, 0)


async def test_the_service_deletes_idle_sessions_in_the_background_only_with_retention(
    resources: Resources, tenant: TenantKey, client: httpx.AsyncClient,
) -> None:
    sid = await idle_session(client, resources, tenant)
    off = replace(resources, background=[])
    start_maintenance(off)
    for task in off.background:
        task.cancel()
    await asyncio.gather(*off.background, return_exceptions=True)
    # Keys, expired memories, write counts, the job queue's log and consolidation runs only.
    assert len(off.background) == 5
    assert await rows(resources, tenant, sid) == (1, 2, 0)

    counted = sample("engram_maintenance_deleted_total", what="idle_sessions")
    on = replace(resources, background=[], settings=resources.settings.model_copy(
        update={"session_retention_days": 1}))
    start_maintenance(on)
    try:
        async def deleted() -> bool:
            return await rows(resources, tenant, sid) == (0, 0, 0)

        await wait_for(deleted, "the idle session was never deleted")
    finally:
        for task in on.background:
            task.cancel()
        await asyncio.gather(*on.background, return_exceptions=True)
    assert len(on.background) == 6
    assert sample("engram_maintenance_deleted_total", what="idle_sessions") >= counted + 1



async def test_a_session_says_when_it_expires_only_with_retention(
    resources: Resources, tenant: TenantKey, client: httpx.AsyncClient,
) -> None:
    kept = await append(client, new_id(), "kept")
    res = replace(resources, settings=resources.settings.model_copy(
        update={"session_retention_days": 2.5}))
    sid = new_id()
    async with make_client(res, tenant.headers) as c:
        await append(c, sid, "hello", user_id="dana")
        got = await get_json(c, f"/v1/sessions/{sid}")
        listed = (await get_json(c, "/v1/sessions?user_id=dana"))["items"]
        switched = await c.put(f"/v1/sessions/{sid}", json={"strategy": "truncation"})

    def expiry(session: dict[str, Any]) -> timedelta:
        return (datetime.fromisoformat(session["expires_at"])
                - datetime.fromisoformat(session["updated_at"]))

    assert expiry(got) == timedelta(days=2.5)
    assert [s["expires_at"] for s in listed if s["session_id"] == sid] == [got["expires_at"]]
    assert switched.status_code == 200
    # The switch is activity: it moves updated_at, and the expiry with it.
    assert expiry(switched.json()) == timedelta(days=2.5)
    assert switched.json()["expires_at"] > got["expires_at"]
    assert (await get_json(client, f"/v1/sessions/{kept['session_id']}"))["expires_at"] is None
