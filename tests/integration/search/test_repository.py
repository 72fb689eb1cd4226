"""SearchRepository's two statements on the real database: the text statement's list is
handed to the vector statement, which re-checks every row against the filter, because
the text statement ran in an earlier snapshot."""

from __future__ import annotations

import math
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


async def bees_matched(resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
                       ) -> tuple[list[dict[str, Any]], SearchRepository, TextMatches]:
    """ROWS stored, and the text statement's list for "bees" in Alice's scope."""
    created = await seed(client)
    repo = await repository(resources, tenant)
    return created, repo, await repo.text_matches("bees", ALICE, LIMITS)


async def test_the_text_list_feeds_the_vector_statement(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    created, repo, matches = await bees_matched(resources, client, tenant)

    rows = await vector_statement(resources, repo, matches)

    alice_ids = {uuid.UUID(m["id"]) for m in created[:3]}
    assert matches.small
    assert set(matches.ids) == alice_ids
    assert list(matches.scores) == sorted(matches.scores, reverse=True)
    by_id = {r.memory_id: r for r in rows}
    assert set(by_id) == alice_ids
    # Rows of equal score share the mean of their places.
    assert [by_id[i].text_rank for i in matches.ids] == [
        sum(o > s for o in matches.scores) + (sum(o == s for o in matches.scores) + 1) / 2
        for s in matches.scores]
    assert [by_id[i].text_score for i in matches.ids] == list(matches.scores)
    assert sorted(r.vector_rank for r in rows if r.vector_rank is not None) == [1, 2, 3]


async def test_a_row_archived_expired_or_moved_after_the_text_statement_is_dropped(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    created, repo, matches = await bees_matched(resources, client, tenant)
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

    # The rows are equally far from "zebra", so they share a place: count them.
    assert sum(r.vector_rank is not None for r in rows) == depth


async def diary_with_one_beekeeper(client: httpx.AsyncClient) -> dict[str, Any]:
    """25 diary entries and one row about bees, which a query about the diary's vector and
    the word "bees" finds by text alone (the diary is nearer)."""
    resp = await client.post("/v1/memories/batch", json={"items": [
        *({"content": f"diary entry number {i}", "user_id": "alice"} for i in range(25)),
        {"content": "Alice keeps bees on the roof", "user_id": "alice"}]})
    assert resp.status_code == 201, resp.text
    bees: dict[str, Any] = resp.json()["items"][-1]
    return bees


async def test_a_text_row_changed_after_the_text_statement_loses_its_text_place(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    """Found by an exploratory probe: a search racing a PATCH returned the memory's new
    content on the strength of its old text's match."""
    bees = await diary_with_one_beekeeper(client)
    repo = await repository(resources, tenant)
    matches = await repo.text_matches("bees", ALICE, LIMITS)
    assert matches.ids == (uuid.UUID(bees["id"]),)
    (diary,) = await resources.embedder.embed(["diary entry"])
    before = await repo.candidates(matches, diary, ALICE, LIMITS, top_k=10)
    assert [r.text_rank for r in before if r.memory_id == uuid.UUID(bees["id"])] == [1]

    resp = await client.patch(f"/v1/memories/{bees['id']}",
                              json={"content": "Alice painted the fence"})
    assert resp.status_code == 200, resp.text
    after = await repo.candidates(matches, diary, ALICE, LIMITS, top_k=10)

    assert uuid.UUID(bees["id"]) not in {r.memory_id for r in after}
    assert len(after) == len(before) - 1


async def test_a_row_in_both_lists_changed_after_the_text_statement_keeps_its_vector_place(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    created, repo, matches = await bees_matched(resources, client, tenant)
    await update(resources, "UPDATE memories SET content = 'Alice keeps wasps' WHERE id = :id",
                 created[0]["id"])

    rows = {r.memory_id: r for r in await vector_statement(resources, repo, matches)}

    changed = rows[uuid.UUID(created[0]["id"])]
    assert (changed.text_rank, changed.text_score, changed.text_day_only) == (None, None, False)
    assert changed.vector_rank is not None
    assert sorted(r.text_rank for r in rows.values() if r.text_rank is not None) in (
        [1, 2], [1.5, 1.5])


async def test_a_text_row_as_near_as_the_vector_lists_farthest_is_placed_in_it(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    """25 copies of one text: the vector list holds 20 of them, the text list all 25, and
    the 5 the vector list left out are as near as its farthest, so they join it (as an
    exact scan would have placed a row an approximate one missed), all 25 in one place."""
    resp = await client.post("/v1/memories/batch", json={"items": [
        {"content": "Alice keeps bees on the roof", "user_id": "alice"}] * 25})
    assert resp.status_code == 201, resp.text
    repo = await repository(resources, tenant)
    matches = await repo.text_matches("bees", ALICE, LIMITS)
    assert len(matches.ids) == 25

    rows = await vector_statement(resources, repo, matches)

    assert len(rows) == 25
    assert {(r.vector_rank, r.text_rank) for r in rows} == {(13, 13)}
    assert len({r.vector_similarity for r in rows}) == 1


async def test_a_text_row_farther_than_the_vector_list_gets_no_vector_place(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    bees = await diary_with_one_beekeeper(client)
    repo = await repository(resources, tenant)
    matches = await repo.text_matches("bees", ALICE, LIMITS)
    (diary,) = await resources.embedder.embed(["diary entry"])

    rows = {r.memory_id: r for r in await repo.candidates(matches, diary, ALICE, LIMITS,
                                                          top_k=10)}

    row = rows[uuid.UUID(bees["id"])]
    assert (row.vector_rank, row.text_rank) == (None, 1)
    assert sum(r.vector_rank is not None for r in rows.values()) == 20
    # Its similarity was computed, and stays for explain, below every placed row's.
    (stored,) = await resources.embedder.embed([bees["content"]])
    cosine = sum(a * b for a, b in zip(diary, stored, strict=True)) / (
        math.sqrt(sum(a * a for a in diary)) * math.sqrt(sum(b * b for b in stored)))
    assert row.vector_similarity == pytest.approx(cosine, abs=2e-3)
    placed = [r.vector_similarity for r in rows.values() if r.vector_rank is not None]
    assert all(s is not None and row.vector_similarity < s for s in placed)


USER_ROWS = ["The user is vegetarian.", "The user has two kids.", "The user is a nurse.",
             "The user likes jazz.", "The user drinks oat milk.",
             "Every Thursday the user plays five-a-side football with colleagues."]


@pytest.mark.parametrize("exact_below", [1000, 2], ids=["own_statistics", "tenant_statistics"])
async def test_rows_sharing_only_words_most_rows_hold_tie_in_the_text_list(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey, exact_below: int,
) -> None:
    """Found by an exploratory search probe: every row holds "user", so each was a
    full-text match of "does the user do any sports?" ranked by its length alone, and
    "The user is a nurse." came first. They still match (a name every row of a small
    scope holds still finds them), all at 0; a term most rows hold still scores a row
    that another term matches. Small scopes (their own statistics) and large ones (the
    tenant's) alike."""
    resp = await client.post("/v1/memories/batch", json={"items": [
        {"content": c, "user_id": "pat"} for c in USER_ROWS]})
    assert resp.status_code == 201, resp.text
    football = resp.json()["items"][-1]["id"]
    repo = await repository(resources, tenant)
    scope = SearchFilter(user_id="pat")
    limits = RetrievalLimits(exact_below=exact_below, text_common_share=0.5)

    sports = await repo.text_matches("does the user do any sports?", scope, limits)
    ball = await repo.text_matches("does the user play football?", scope, limits)
    off = await repo.text_matches("does the user do any sports?", scope,
                                  RetrievalLimits(exact_below=exact_below))

    assert sports.small is (exact_below == 1000)
    assert len(sports.ids) == len(USER_ROWS)
    assert set(sports.scores) == {0.0}
    assert str(ball.ids[0]) == football
    assert ball.scores[0] > 0
    assert set(ball.scores[1:]) == {0.0}
    assert len(set(off.scores)) > 1
    # A lone row's words are all in every row of its scope, and still tie it to a query.
    resp = await client.post("/v1/memories", json={"content": "router serial XK-7731",
                                                   "user_id": "solo"})
    solo = await repo.text_matches("serial XK-7731", SearchFilter(user_id="solo"), limits)
    assert [str(i) for i in solo.ids] == [resp.json()["id"]]
