"""SearchRepository's two statements on the real database: the text statement's list is
handed to the vector statement, which re-checks every row against the filter, because
the text statement ran in an earlier snapshot."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.resources import Resources
from app.search.repository import (
    RetrievalLimits,
    RetrievedRow,
    SearchFilter,
    SearchRepository,
    TextMatches,
)
from tests.conftest import TenantKey

ROWS = [
    {"content": "Alice keeps bees on the roof", "user_id": "alice"},
    {"content": "the bees swarmed in May", "user_id": "alice"},
    {"content": "Alice sold honey from her bees", "user_id": "alice"},
    {"content": "Bob keeps bees too", "user_id": "bob"},
]


ALICE = SearchFilter(user_id="alice")
LIMITS = RetrievalLimits()


async def seed(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    resp = await client.post("/v1/memories/batch", json={"items": ROWS})
    assert resp.status_code == 201, resp.text
    created: list[dict[str, Any]] = resp.json()["items"]
    return created


async def repository(resources: Resources, tenant: TenantKey) -> SearchRepository:
    return SearchRepository(await resources.search_reader(), tenant.tenant_id)


async def vector_statement(resources: Resources, repo: SearchRepository,
                           matches: TextMatches) -> list[RetrievedRow]:
    (vector,) = await resources.embedder.embed(["bees"])
    return await repo.candidates(matches, vector, ALICE, LIMITS, top_k=10)


async def update(resources: Resources, sql: str, memory_id: str) -> None:
    async with resources.sessionmaker() as session:
        await session.execute(text(sql), {"id": uuid.UUID(memory_id)})
        await session.commit()


async def test_the_text_list_feeds_the_vector_statement(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    created = await seed(client)
    repo = await repository(resources, tenant)

    matches = await repo.text_matches("bees", ALICE, LIMITS)
    rows = await vector_statement(resources, repo, matches)

    alice_ids = {uuid.UUID(m["id"]) for m in created[:3]}
    assert matches.small
    assert set(matches.ids) == alice_ids
    assert list(matches.scores) == sorted(matches.scores, reverse=True)
    by_id = {r.memory_id: r for r in rows}
    assert set(by_id) == alice_ids
    assert [by_id[i].text_rank for i in matches.ids] == [1, 2, 3]
    assert [by_id[i].text_score for i in matches.ids] == list(matches.scores)
    assert sorted(r.vector_rank for r in rows if r.vector_rank is not None) == [1, 2, 3]


async def test_a_row_archived_expired_or_moved_after_the_text_statement_is_dropped(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    created = await seed(client)
    repo = await repository(resources, tenant)
    matches = await repo.text_matches("bees", ALICE, LIMITS)
    assert len(matches.ids) == 3

    await update(resources, "UPDATE memories SET archived_at = now() WHERE id = :id",
                 created[0]["id"])
    await update(resources, "UPDATE memories SET expires_at = now() WHERE id = :id",
                 created[1]["id"])
    await update(resources, "UPDATE memories SET user_id = 'carol' WHERE id = :id",
                 created[2]["id"])
    rows = await vector_statement(resources, repo, matches)

    assert rows == []


@pytest.mark.parametrize(("path", "depth"), [("exact", 50), ("hnsw", 20)])
async def test_the_vector_list_is_deeper_where_the_scope_is_ranked_exactly(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey, path: str,
    depth: int,
) -> None:
    """`vector_candidates` deep where the scope is ranked exactly (the whole scope is read
    whatever the depth), `hnsw_candidates` deep through HNSW (each row more costs the
    filtered scan); top_k below both."""
    resp = await client.post("/v1/memories/batch", json={"items": [
        {"content": f"diary entry {i}", "user_id": "alice"} for i in range(60)]})
    assert resp.status_code == 201, resp.text
    limits = RetrievalLimits(vector_candidates=50, hnsw_candidates=20,
                             exact_below=1000 if path == "exact" else 5, exact_cost_ratio=0)
    repo = await repository(resources, tenant)
    matches = await repo.text_matches("zebra", ALICE, limits)
    assert matches.small is (path == "exact")
    (vector,) = await resources.embedder.embed(["zebra"])

    rows = await repo.candidates(matches, vector, ALICE, limits, top_k=5)

    assert sorted(r.vector_rank for r in rows if r.vector_rank is not None) == list(
        range(1, depth + 1))
