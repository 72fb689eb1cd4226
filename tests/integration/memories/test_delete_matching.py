"""DELETE /v1/memories: forgetting a scope at once. Everything that matches goes (facts,
summaries, archived and expired rows), nothing else does, the search statistics follow,
and a failure half-way deletes nothing."""

from __future__ import annotations

import asyncio
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.memories import repository
from app.resources import Resources
from tests.conftest import (
    TenantKey,
    delete_matching,
    drop_connection_at,
    local_model,
    make_client,
)
from tests.integration.search.test_term_stats import assert_consistent


async def seed(client: httpx.AsyncClient, items: list[dict[str, Any]]) -> list[str]:
    resp = await client.post("/v1/memories/batch", json={"items": items})
    assert resp.status_code == 201, resp.text
    return [m["id"] for m in resp.json()["items"]]


async def rows(resources: Resources, tenant: TenantKey) -> dict[str, dict[str, Any]]:
    """Every row of the tenant, past the API: archived and expired ones too."""
    async with resources.sessionmaker() as session:
        found = await session.execute(text(
            "SELECT id::text, user_id, namespace, fact_role, archived_at, expires_at "
            "FROM memories WHERE tenant_id = :t"), {"t": tenant.tenant_id})
        return {r.id: dict(r._mapping) for r in found}


async def forget(client: httpx.AsyncClient, **params: Any) -> int:
    return await delete_matching(client, "/v1/memories", **params)


async def test_forgetting_a_user_deletes_facts_summaries_archived_and_expired_rows(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
    other_tenant: TenantKey,
) -> None:
    dana = await seed(client, [
        {"content": f"Dana note {i} about her peanut allergy", "user_id": "dana",
         "category": "health", "importance": 0.2} for i in range(4)
    ])
    # The archiving run folds Dana's notes into a summary: her sources stay, archived.
    run = await client.post("/v1/consolidations", json={"user_id": "dana", "mode": "archive"})
    assert run.status_code == 200, run.text
    assert run.json()["created"] == 1
    soon = (datetime.now(UTC) + timedelta(seconds=1)).isoformat()
    dana += await seed(client, [{"content": "Dana's expiring reminder", "user_id": "dana",
                                 "expires_at": soon}])
    kept = await seed(client, [
        {"content": "Eli likes peanuts", "user_id": "eli"},
        {"content": "A note of no user about Dana"},
    ])
    async with make_client(resources, other_tenant.headers) as other:
        elsewhere = await seed(other, [{"content": "Dana in another tenant",
                                        "user_id": "dana"}])
    before = await rows(resources, tenant)
    assert sum(r["archived_at"] is not None for r in before.values()) == run.json()["deleted"]
    assert run.json()["deleted"] >= 2
    [summary] = [i for i, r in before.items() if r["fact_role"] == "summary"]
    # Once the reminder has expired (no read shows it; the purge has not run).
    await asyncio.sleep((datetime.fromisoformat(soon) - datetime.now(UTC)).total_seconds()
                        + 0.05)
    assert (await client.get(f"/v1/memories/{dana[-1]}")).status_code == 404

    assert await forget(client, user_id="dana") == 6  # 4 facts, the summary, the expired

    after = await rows(resources, tenant)
    assert sorted(after) == sorted(kept)
    assert summary not in after
    assert not set(dana) & set(after)
    assert (await client.get(f"/v1/memories/{dana[0]}")).status_code == 404
    async with make_client(resources, other_tenant.headers) as other:
        assert (await other.get(f"/v1/memories/{elsewhere[0]}")).status_code == 200
    # The search's statistics lost exactly these rows.
    stats = await assert_consistent(resources, tenant.tenant_id)
    assert stats[""][0] == 2
    found = await client.post("/v1/search", json={"query": "Dana peanut allergy"})
    assert sorted(r["memory"]["id"] for r in found.json()["results"]) == sorted(kept)
    # Forgetting again finds nothing: a retry is safe.
    assert await forget(client, user_id="dana") == 0


async def test_filters_combine_as_the_listing_reads_them(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    ids = await seed(client, [
        {"content": "a", "user_id": "u", "namespace": "work", "tags": ["x", "y"]},
        {"content": "b", "user_id": "u", "namespace": "work", "tags": ["x"]},
        {"content": "c", "user_id": "u", "namespace": "home", "tags": ["x", "y"]},
        {"content": "d", "user_id": "v", "namespace": "work", "tags": ["x", "y"],
         "category": "plans"},
        {"content": "e", "agent_id": "bot", "category": "plans"},
    ])

    assert await forget(client, user_id="u", namespace="work", tags=["x", "y"]) == 1
    assert sorted(await rows(resources, tenant)) == sorted(ids[1:])
    assert await forget(client, categories=["plans"], fact_role="fact") == 2
    assert sorted(await rows(resources, tenant)) == sorted(ids[1:3])
    assert await forget(client, namespace="work") == 1
    assert await forget(client, tags=["x"]) == 1
    assert await rows(resources, tenant) == {}


async def test_a_users_memories_older_than_a_moment_go_and_newer_ones_stay(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    old = await seed(client, [{"content": f"old {i}", "user_id": "u",
                               "created_at": f"2025-0{i + 1}-01T00:00:00Z"} for i in range(3)])
    new = await seed(client, [{"content": "new", "user_id": "u"},
                              {"content": "someone else's old", "user_id": "v",
                               "created_at": "2025-01-01T00:00:00Z"}])

    assert await forget(client, user_id="u", created_before="2025-06-01T00:00:00+00:00") == 3

    assert sorted(await rows(resources, tenant)) == sorted(new)
    assert not set(old) & set(await rows(resources, tenant))


async def test_the_memories_of_a_document_go_by_their_metadata(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    ids = await seed(client, [
        {"content": "from d1", "user_id": "u", "metadata": {"doc": "d1", "page": 1}},
        {"content": "also from d1", "user_id": "v", "metadata": {"doc": "d1"}},
        {"content": "from d2", "user_id": "u", "metadata": {"doc": "d2"}},
        {"content": "no metadata", "user_id": "u"},
    ])

    assert await forget(client, user_id="u", metadata=json.dumps({"doc": "d1"})) == 1
    assert sorted(await rows(resources, tenant)) == sorted(ids[1:])
    # Metadata alone names what goes: no scope is needed.
    assert await forget(client, metadata=json.dumps({"doc": "d1"})) == 1
    assert sorted(await rows(resources, tenant)) == sorted(ids[2:])
    await assert_consistent(resources, tenant.tenant_id)


@pytest.mark.parametrize("params", [{}, {"fact_role": "fact"},
                                    {"created_before": "2030-01-01T00:00:00Z"},
                                    {"metadata": "{}"}])
async def test_a_delete_naming_no_scope_is_refused_and_deletes_nothing(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
    params: dict[str, str],
) -> None:
    ids = await seed(client, [{"content": "keep me", "user_id": "u"}])

    resp = await client.delete("/v1/memories", params=params)

    assert resp.status_code == 422
    assert resp.headers["content-type"].startswith("application/problem+json")
    [error] = resp.json()["errors"]
    assert error["field"] == "query"
    assert "user_id" in error["message"]
    assert "every memory" in error["message"]
    assert sorted(await rows(resources, tenant)) == ids


@pytest.mark.parametrize(("params", "field"), [
    ({"user_id": "u", "usr": "x"}, "query.usr"),
    ({"user_id": "u", "limit": "5"}, "query.limit"),  # a listing's paging is no filter here
    ({"user_id": "u", "include_archived": "false"}, "query.include_archived"),
    ({"user_id": "u", "fact_role": "note"}, "query.fact_role"),
    ({"user_id": ""}, "query.user_id"),
])
async def test_bad_filters_are_422_naming_the_parameter(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
    params: dict[str, str], field: str,
) -> None:
    ids = await seed(client, [{"content": "keep me", "user_id": "u"}])

    resp = await client.delete("/v1/memories", params=params)

    assert resp.status_code == 422, resp.text
    assert field in [e["field"] for e in resp.json()["errors"]]
    assert sorted(await rows(resources, tenant)) == ids


async def test_a_large_scope_is_deleted_in_statements_of_a_batch_all_or_nothing(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ids = await seed(client, [{"content": f"note {i}", "user_id": "big"} for i in range(25)])
    tried: list[list[int]] = []
    original = repository.MemoryRepository.delete_matching

    async def failing_third(self: Any, filters: Any, batch: int = 10) -> int:
        tried.append(drop_connection_at(self.session, 3))
        return await original(self, filters, batch)

    monkeypatch.setattr(repository.MemoryRepository, "delete_matching", failing_third)
    resp = await client.delete("/v1/memories", params={"user_id": "big"})

    assert resp.status_code >= 500
    assert tried == [[3]]
    assert sorted(await rows(resources, tenant)) == sorted(ids)  # two batches rolled back

    monkeypatch.setattr(repository.MemoryRepository, "delete_matching", original)
    assert await forget(client, user_id="big") == 25
    await assert_consistent(resources, tenant.tenant_id)


async def test_a_run_whose_memories_were_forgotten_still_reverts(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    await seed(client, [{"content": f"Dana note {i}", "user_id": "dana", "category": "c"}
                        for i in range(3)])
    run = (await client.post("/v1/consolidations",
                             json={"user_id": "dana", "mode": "archive"})).json()
    assert run["created"] == 1
    assert await forget(client, user_id="dana") == 4

    reverted = await client.post(f"/v1/consolidations/{run['id']}/revert")

    assert reverted.status_code == 200, reverted.text
    assert reverted.json()["reverted_at"] is not None
    assert await rows(resources, tenant) == {}  # nothing comes back


async def test_a_forgotten_user_is_not_found_by_the_real_model(
    resources: Resources, tenant: TenantKey,
) -> None:
    async with local_model(resources) as res, make_client(res, tenant.headers) as client:
        await seed(client, [
            {"content": "Dana is allergic to peanuts.", "user_id": "dana"},
            {"content": "Eli is allergic to shellfish.", "user_id": "eli"},
        ])
        question = {"query": "Who is allergic to some food?", "top_k": 5}
        before = (await client.post("/v1/search", json=question)).json()["results"]
        assert {r["memory"]["user_id"] for r in before} == {"dana", "eli"}

        assert await forget(client, user_id="dana") == 1

        after = (await client.post("/v1/search", json=question)).json()["results"]
        assert [r["memory"]["user_id"] for r in after] == ["eli"]


async def test_erasing_a_user_of_many_sessions_holds_a_bounded_number_of_locks(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    """Found by an exploratory probe: the delete held one lock per scope, in one
    transaction, and a user with 16,000 sessions filled PostgreSQL's lock table (500 "out
    of shared memory", nothing deleted; other tenants' writes failed meanwhile). The
    families' locks are FAMILY_SLOTS a tenant at most."""
    sessions = 3 * repository.FAMILY_SLOTS
    await seed(client, [{"content": f"turn note {i}", "user_id": "heavy",
                         "session_id": f"s{i}"} for i in range(sessions)])
    async with resources.sessionmaker() as session:
        await session.execute(repository._lock_matching_families(
            tenant.tenant_id, repository.MemoryFilter(user_id="heavy")))
        held = await session.scalar(text(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
            " AND pid = pg_backend_pid()"))
        await session.rollback()

    assert 1 < held <= repository.FAMILY_SLOTS
    assert await forget(client, user_id="heavy") == sessions


async def test_an_erasure_is_logged_by_its_filters_names_not_their_values(
    client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture,
) -> None:
    """An observability probe: the log line of a user's erasure kept the user's id, its
    tags and categories (the metadata's values were already left out)."""
    user, tag, category = "jane.doe@example.com", "hiv-positive", "medical-condition"
    await seed(client, [{"content": "x", "user_id": user, "tags": [tag],
                         "category": category, "metadata": {"diagnosis": "HIV"}}])
    await client.post(f"/v1/sessions/s-{user}/turns", json={
        "role": "user", "content": "hello", "user_id": user})

    with caplog.at_level(logging.INFO):
        erased = await client.request("DELETE", "/v1/memories", params={
            "user_id": user, "tags": tag, "categories": category,
            "metadata": json.dumps({"diagnosis": "HIV"})})
        sessions = await client.request("DELETE", "/v1/sessions", params={"user_id": user})

    assert erased.json()["deleted"] == 1
    assert sessions.status_code == 200, sessions.text
    # The service's own lines (the test's HTTP client logs its requests' URLs too).
    logged = "\n".join(r.getMessage() for r in caplog.records
                       if r.name.startswith("engram"))
    assert "matching user_id, tags, categories, metadata" in logged
    assert "sessions of tenant" in logged
    assert "by user_id" in logged
    for value in (user, tag, category, "HIV"):
        assert value not in logged
