"""A memory's history is bounded and erasable: the newest ENGRAM_HISTORY_MAX_VERSIONS
states (the trigger of migrations 0020 and 0027, reading the connection's setting), the
retention purge by age, and DELETE /v1/memories/{id}/history. Version numbers count every
change, whatever was kept or erased."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import text

from app.maintenance import start_maintenance
from app.memories.repository import purge_versions_replaced_before
from app.resources import Resources
from tests.conftest import TenantKey, make_client, sample
from tests.integration.memories.test_history import create, history, patch, stored_versions


async def versions(resources: Resources, memory_id: str) -> list[int]:
    async with resources.engine.connect() as conn:
        rows = await conn.execute(text(
            "SELECT version FROM memory_versions WHERE memory_id = :m ORDER BY version"),
            {"m": memory_id})
        return [r[0] for r in rows]


async def test_a_memory_keeps_its_newest_states_only(
    resources: Resources, client: httpx.AsyncClient,
) -> None:
    """The service's default, 100, over HTTP: a memory changed 103 times keeps versions
    4..103, and the history reads them newest first down to the oldest kept."""
    assert resources.settings.history_max_versions == 100
    memory = await create(client, importance=0.0)
    for n in range(1, 104):
        await patch(client, memory["id"], importance=n / 1000)

    assert await versions(resources, memory["id"]) == list(range(4, 104))
    page = await history(client, memory["id"], limit=500)
    assert [v["version"] for v in page["items"]] == list(range(103, 3, -1))
    # Each kept state is the one its version replaced: version v held importance (v-1)/1000.
    assert page["items"][-1]["importance"] == 0.003
    assert page["items"][0]["importance"] == 0.102


async def test_the_bound_is_the_connections_setting(
    resources: Resources, client: httpx.AsyncClient,
) -> None:
    """The trigger reads engram.history_max_versions: the service's connections start
    with it; 2 keeps two states, 0 none, and a connection without it keeps every state."""
    memory = await create(client)
    memory_id = uuid.UUID(memory["id"])

    async def change_times(setting: str, times: int) -> None:
        async with resources.engine.begin() as conn:
            await conn.execute(text("SELECT set_config('engram.history_max_versions', :v, true)"),
                               {"v": setting})
            for _ in range(times):
                await conn.execute(text(
                    "UPDATE memories SET importance = random(), updated_at = clock_timestamp() "
                    "WHERE id = :id"), {"id": memory_id})

    async with resources.engine.connect() as conn:
        assert await conn.scalar(text("SHOW engram.history_max_versions")) == "100"

    await change_times("", 5)  # as psql would: no setting
    assert await versions(resources, memory["id"]) == [1, 2, 3, 4, 5]
    await change_times("2", 1)
    assert await versions(resources, memory["id"]) == [5, 6]
    await change_times("0", 3)  # states 7, 8 and 9 replaced, none kept
    assert await versions(resources, memory["id"]) == [5, 6]
    await change_times("2", 2)
    assert await versions(resources, memory["id"]) == [10, 11]


async def test_erasing_a_memorys_past_keeps_the_memory(
    resources: Resources, client: httpx.AsyncClient, other_tenant: TenantKey,
) -> None:
    memory = await create(client, content="The vault code is 4411.")
    await patch(client, memory["id"], content="The vault code was changed.")
    await patch(client, memory["id"], importance=0.9)
    kept = await create(client, content="Another memory with a past.")
    await patch(client, kept["id"], content="It changed too.")

    async with make_client(resources, other_tenant.headers) as other:
        foreign = await other.delete(f"/v1/memories/{memory['id']}/history")
    assert foreign.status_code == 404
    assert await stored_versions(resources, memory["id"]) == 2

    before_erase = (await history(client, memory["id"], limit=1))["next_cursor"]
    resp = await client.delete(f"/v1/memories/{memory['id']}/history")

    assert resp.status_code == 200, resp.text
    assert resp.json() == {"deleted": 2}
    assert (await history(client, memory["id"]))["items"] == []
    current = (await client.get(f"/v1/memories/{memory['id']}")).json()
    assert (current["content"], current["importance"]) == ("The vault code was changed.", 0.9)
    assert await stored_versions(resources, kept["id"]) == 1
    # Nothing left to erase is not an error. A later change starts the history again, and
    # its numbers go on from the erased ones: version 1 is still the state first stored,
    # though no longer kept, and a cursor issued before the erase reads none of the new.
    again = await client.delete(f"/v1/memories/{memory['id']}/history")
    assert again.json() == {"deleted": 0}
    await patch(client, memory["id"], content="The vault code is secret.")
    items = (await history(client, memory["id"]))["items"]
    assert [(v["version"], v["content"]) for v in items] == [
        (3, "The vault code was changed.")]
    stale = await history(client, memory["id"], cursor=before_erase)
    assert stale == {"items": [], "next_cursor": None}


async def test_erasing_refuses_what_it_cannot_name(client: httpx.AsyncClient) -> None:
    unknown = await client.delete("/v1/memories/0190b2a4-1c2d-7000-8000-000000000001/history")
    assert unknown.status_code == 404
    assert unknown.headers["content-type"].startswith("application/problem+json")
    expired = await create(client, expires_at="2020-01-01T00:00:00Z")
    assert (await client.delete(f"/v1/memories/{expired['id']}/history")).status_code == 404
    memory = await create(client)
    await patch(client, memory["id"], content="changed")
    for path, params, field in (
        (f"/v1/memories/{memory['id']}/history", {"all": "true"}, "query.all"),
        ("/v1/memories/not-an-id/history", {}, "path.memory_id"),
    ):
        resp = await client.delete(path, params=params)
        assert resp.status_code == 422, resp.text
        assert [e["field"] for e in resp.json()["errors"]] == [field]
    assert len((await history(client, memory["id"]))["items"]) == 1


async def age(resources: Resources, memory_id: str, version: int, days: float) -> None:
    async with resources.engine.begin() as conn:
        await conn.execute(text(
            "UPDATE memory_versions SET replaced_at = now() - make_interval(secs => :s) "
            "WHERE memory_id = :m AND version = :v"),
            {"s": days * 86400, "m": memory_id, "v": version})


async def test_the_retention_purge_deletes_states_replaced_long_ago_in_every_tenant(
    resources: Resources, client: httpx.AsyncClient, other_tenant: TenantKey,
) -> None:
    ours = await create(client)
    async with make_client(resources, other_tenant.headers) as other:
        theirs = await create(other)
        await patch(other, theirs["id"], content="theirs, changed")
    for n in range(3):
        await patch(client, ours["id"], content=f"ours, change {n}")
    for version, days in ((1, 40), (2, 31)):
        await age(resources, ours["id"], version, days)
    await age(resources, theirs["id"], 1, 45)

    cutoff = datetime.now(UTC) - timedelta(days=30)
    removed = await purge_versions_replaced_before(resources.engine, cutoff, batch=1)

    # Every other test's states are recent (a throwaway database per run).
    assert removed == 3
    assert await versions(resources, ours["id"]) == [3]
    assert await versions(resources, theirs["id"]) == []
    assert await purge_versions_replaced_before(resources.engine, cutoff) == 0


async def test_the_service_purges_old_states_in_the_background_when_told_to(
    resources: Resources, client: httpx.AsyncClient,
) -> None:
    memory = await create(client)
    await patch(client, memory["id"], content="changed once")
    await patch(client, memory["id"], content="changed twice")
    await age(resources, memory["id"], 1, 3)
    counted = sample("engram_maintenance_deleted_total", what="memory_versions")

    off = replace(resources, background=[])
    start_maintenance(off)
    on = replace(resources, background=[], settings=resources.settings.model_copy(
        update={"history_retention_days": 2}))
    start_maintenance(on)
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while await versions(resources, memory["id"]) != [2]:
            assert asyncio.get_running_loop().time() < deadline, "never purged"
            await asyncio.sleep(0.02)
    finally:
        tasks: list[Any] = [*off.background, *on.background]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    assert len(on.background) == len(off.background) + 1
    assert sample("engram_maintenance_deleted_total", what="memory_versions") >= counted + 1
