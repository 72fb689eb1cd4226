"""The cap on each user's active memories, through the app on the real database: a write
past it archives the user's expired memories, then its least important and oldest,
never what the write stored; a batch that cannot fit is refused whole; concurrent writes
never leave a user over the cap; summaries and other users are not touched."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.resources import Resources
from app.tenants.repository import LimitChange
from app.tenants.service import set_limits
from tests.conftest import TenantKey, create_tenant_key, make_client, reconfigured, sample
from tests.integration.search.test_term_stats import assert_consistent

EVICTED = "engram_memories_evicted_total"


@pytest.fixture
async def capped(resources: Resources, database_url: str) -> AsyncIterator[Resources]:
    """Three active memories per user, unless a tenant has its own cap."""
    async with reconfigured(resources, database_url, max_memories_per_user=3) as res:
        yield res


async def write(client: httpx.AsyncClient, content: str, **fields: Any) -> dict[str, Any]:
    created = await client.post("/v1/memories", json={"content": content, **fields})
    assert created.status_code == 201, created.text
    body: dict[str, Any] = created.json()
    return body


async def active(client: httpx.AsyncClient, **params: Any) -> list[str]:
    listed = await client.get("/v1/memories", params={"limit": 500, **params})
    assert listed.status_code == 200, listed.text
    return sorted(m["content"] for m in listed.json()["items"])


def at(**delta: float) -> str:
    return (datetime.now(UTC) + timedelta(**delta)).isoformat()


async def test_a_write_past_the_cap_archives_the_least_important_then_the_oldest(
    capped: Resources, tenant: TenantKey,
) -> None:
    before = sample(EVICTED)
    async with make_client(capped, tenant.headers) as client:
        await write(client, "kept: important", user_id="u", importance=0.9)
        oldest = await write(client, "first to go: unimportant and oldest", user_id="u",
                             importance=0.2, created_at=at(days=-2))
        await write(client, "unimportant but newer", user_id="u", importance=0.2,
                    created_at=at(days=-1))
        await write(client, "another user's", user_id="v", importance=0.0)
        await write(client, "nobody's", importance=0.0)
        fourth = await write(client, "the fourth", user_id="u", importance=0.5)
        after_fourth = await active(client, user_id="u")
        evicted = (await client.get(f"/v1/memories/{oldest['id']}")).json()
        # The write's own memory is never the one to go, however unimportant.
        await write(client, "least important of all, but just written", user_id="u",
                    importance=0.0)
        after_fifth = await active(client, user_id="u")
        others = await active(client, user_id="v")
        everyone = await active(client)
        found = await client.post("/v1/search", json={"query": "first to go", "user_id": "u"})
        with_archived = await active(client, user_id="u", include_archived="true")

    assert after_fourth == ["kept: important", "the fourth", "unimportant but newer"]
    assert evicted["archived_at"] is not None
    assert evicted["consolidation_id"] is None  # not a consolidation's
    assert fourth["archived_at"] is None
    assert after_fifth == ["kept: important", "least important of all, but just written",
                           "the fourth"]
    assert others == ["another user's"]
    assert "nobody's" in everyone
    assert oldest["id"] not in [r["memory"]["id"] for r in found.json()["results"]]
    assert len(with_archived) == 5  # archived, not deleted
    assert sample(EVICTED) == before + 2
    await assert_consistent(capped, tenant.tenant_id)


async def test_expired_memories_go_before_live_ones(
    capped: Resources, tenant: TenantKey,
) -> None:
    async with make_client(capped, tenant.headers) as client:
        gone = await write(client, "expired a second ago", user_id="u", importance=1.0,
                           expires_at=at(seconds=-1))
        for content in ("live one", "live two"):
            await write(client, content, user_id="u", importance=0.1)
        await write(client, "live three", user_id="u", importance=0.5)
        live = await active(client, user_id="u")
    async with capped.engine.connect() as conn:  # no read shows an expired memory
        archived = await conn.scalar(text("SELECT archived_at FROM memories WHERE id = :id"),
                                     {"id": gone["id"]})

    assert live == ["live one", "live three", "live two"]
    assert archived is not None


@pytest.mark.parametrize("batch", [False, True])
async def test_a_write_expired_on_arrival_takes_no_live_memorys_place(
    capped: Resources, tenant: TenantKey, batch: bool,
) -> None:
    """Found by an exploratory probe: the written memory was never the one to go, so a
    write already expired (no reader ever sees it) archived an important live one."""
    async with make_client(capped, tenant.headers) as client:
        for i in range(3):
            await write(client, f"important fact {i}", user_id="u", importance=0.9)
        stale = {"content": "stale note", "user_id": "u", "importance": 0.0,
                 "expires_at": "2020-01-01T00:00:00Z"}
        if batch:
            made = await client.post("/v1/memories/batch", json={"items": [stale]})
        else:
            made = await client.post("/v1/memories", json=stale)
        live = await active(client, user_id="u")

    assert made.status_code == 201, made.text
    assert live == ["important fact 0", "important fact 1", "important fact 2"]
    await assert_consistent(capped, tenant.tenant_id)


async def test_a_batch_that_cannot_fit_is_refused_whole(
    capped: Resources, tenant: TenantKey,
) -> None:
    async with make_client(capped, tenant.headers) as client:
        await write(client, "already here", user_id="u", importance=0.9)
        refused = await client.post("/v1/memories/batch", json={"items": [
            {"content": f"note {i}", "user_id": "u"} for i in range(4)]})
        unchanged = await active(client, user_id="u")
        fits = await client.post("/v1/memories/batch", json={"items": [
            *({"content": f"u note {i}", "user_id": "u"} for i in range(3)),
            *({"content": f"w note {i}", "user_id": "w"} for i in range(3))]})
        u_after = await active(client, user_id="u")
        w_after = await active(client, user_id="w")

    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"].startswith("application/problem+json")
    problem = refused.json()
    # Named as the body's other fields are (`items.3.content`), not `body.items`.
    assert problem["errors"][0]["field"] == "items"
    assert "holds 4 memories of user 'u', more than the 3 active memories a user may " \
           "have" in problem["errors"][0]["message"]
    assert unchanged == ["already here"]
    assert fits.status_code == 201, fits.text
    assert u_after == ["u note 0", "u note 1", "u note 2"]  # the batch's own stay
    assert w_after == ["w note 0", "w note 1", "w note 2"]


async def test_concurrent_writes_never_leave_a_user_over_the_cap(
    capped: Resources, tenant: TenantKey,
) -> None:
    async with make_client(capped, tenant.headers) as client:
        created = await asyncio.gather(*(
            client.post("/v1/memories", json={"content": f"written at once {i}",
                                              "user_id": "busy"})
            for i in range(12)))
        left = await active(client, user_id="busy")

    assert [r.status_code for r in created] == [201] * 12
    assert len(left) == 3
    await assert_consistent(capped, tenant.tenant_id)


async def test_a_summary_does_not_evict_and_the_next_write_does(
    capped: Resources, tenant: TenantKey,
) -> None:
    async with make_client(capped, tenant.headers) as client:
        for i in range(3):
            await write(client, f"budget note {i}", user_id="u", importance=0.3)
        run = await client.post("/v1/consolidations", json={
            "user_id": "u", "mode": "synthesize_only"})
        assert run.status_code == 200, run.text
        assert run.json()["created"] == 1
        with_summary = await active(client, user_id="u")
        await write(client, "after the run", user_id="u", importance=0.3)
        after = await active(client, user_id="u")

    assert len(with_summary) == 4  # over the cap until the user's next write
    assert len(after) == 3
    assert "after the run" in after
    assert sum(1 for c in after if c.startswith("- budget note")) == 1  # the summary (0.7)


async def test_a_run_whose_summary_the_cap_put_away_can_still_be_reverted(
    capped: Resources, tenant: TenantKey,
) -> None:
    """The revert answered 409 "consolidated again; revert that run first", naming a run
    that never existed: the summary was archived by the cap, not by a run."""
    async with make_client(capped, tenant.headers) as client:
        notes = [await write(client, f"budget note {i}", user_id="u", importance=0.3)
                 for i in range(3)]
        run = (await client.post("/v1/consolidations", json={
            "user_id": "u", "mode": "archive"})).json()
        (group,) = run["groups"]
        for i in range(3):
            await write(client, f"important {i}", user_id="u", importance=0.9)
        summary = (await client.get(f"/v1/memories/{group['summary_id']}")).json()
        assert summary["archived_at"] is not None  # put away by the cap

        reverted = await client.post(f"/v1/consolidations/{run['id']}/revert")

        assert reverted.status_code == 200, reverted.text
        assert (await client.get(f"/v1/memories/{group['summary_id']}")).status_code == 404
        for memory_id in group["removed_ids"]:
            restored = (await client.get(f"/v1/memories/{memory_id}")).json()
            assert restored["archived_at"] is None
        assert {n["id"] for n in notes} >= set(group["removed_ids"])


async def test_a_tenants_own_cap_applies_at_its_next_write(
    capped: Resources, tenant: TenantKey, other_tenant: TenantKey,
) -> None:
    await set_limits(capped.engine, tenant.name, LimitChange(max_memories_per_user=1))
    await set_limits(capped.engine, other_tenant.name, LimitChange(max_memories_per_user=0))
    async with make_client(capped, tenant.headers) as client, \
            make_client(capped, other_tenant.headers) as other:
        for i in range(3):
            await write(client, f"one of mine {i}", user_id="u")
            await write(other, f"one of theirs {i}", user_id="u")
        mine = await active(client, user_id="u")
        theirs = await active(other, user_id="u")

    assert mine == ["one of mine 2"]
    assert theirs == ["one of theirs 0", "one of theirs 1", "one of theirs 2"]


async def test_without_a_cap_nothing_is_evicted(resources: Resources) -> None:
    tenant = await create_tenant_key(resources)
    async with make_client(resources, tenant.headers) as client:
        for i in range(5):
            await write(client, f"uncapped {i}", user_id="u", importance=0.0)
        assert len(await active(client, user_id="u")) == 5
