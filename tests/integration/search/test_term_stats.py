"""BM25 term statistics: the triggers keep `term_stats` equal to what the tenant's active
memories hold, through every kind of write, in the writer's transaction; the fold sums
the delta rows without changing any total; two writers of a tenant never wait for each
other; a search in a large scope reads them, one in a small scope counts its own."""

from __future__ import annotations

import asyncio
import math
import uuid
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.resources import Resources
from app.search.term_stats import CATEGORY_KEY, TAG_KEY, USER_KEY, fold_loop, fold_term_stats
from tests.conftest import TenantKey, create_tenant_key, make_client

Stats = dict[str, tuple[int, int]]  # lexeme -> (df, total_len)


async def seed(client: httpx.AsyncClient, items: list[dict[str, Any]]) -> list[str]:
    resp = await client.post("/v1/memories/batch", json={"items": items})
    assert resp.status_code == 201, resp.text
    return [m["id"] for m in resp.json()["items"]]


async def recorded(session: AsyncSession, tenant_id: uuid.UUID) -> Stats:
    """What term_stats says: the sum of every row per lexeme, zero sums left out."""
    rows = await session.execute(text(
        "SELECT lexeme, sum(df) AS df, sum(total_len) AS len FROM term_stats "
        "WHERE tenant_id = :t GROUP BY lexeme HAVING sum(df) <> 0 OR sum(total_len) <> 0"
    ), {"t": tenant_id})
    return {r.lexeme: (int(r.df), int(r.len)) for r in rows}


async def truth(session: AsyncSession, tenant_id: uuid.UUID) -> Stats:
    """The same figures counted from the memories themselves ('' is the corpus row; tags,
    categories and users under their keys)."""
    rows = await session.execute(text(
        "SELECT l.lexeme, count(*) AS df, 0 AS len FROM memories m "
        "CROSS JOIN LATERAL unnest(tsvector_to_array(m.tsv)) AS l(lexeme) "
        "WHERE m.tenant_id = :t AND m.archived_at IS NULL GROUP BY l.lexeme "
        "UNION ALL SELECT :tag || d.t, count(*), 0 FROM memories m "
        "CROSS JOIN LATERAL (SELECT DISTINCT unnest(m.tags)) AS d(t) "
        "WHERE m.tenant_id = :t AND m.archived_at IS NULL GROUP BY d.t "
        "UNION ALL SELECT :category || category, count(*), 0 FROM memories "
        "WHERE tenant_id = :t AND archived_at IS NULL GROUP BY category "
        "UNION ALL SELECT :user || user_id, count(*), 0 FROM memories "
        "WHERE tenant_id = :t AND archived_at IS NULL AND user_id IS NOT NULL GROUP BY user_id "
        "UNION ALL SELECT '', count(*), coalesce(sum(length(tsv)), 0) FROM memories "
        "WHERE tenant_id = :t AND archived_at IS NULL HAVING count(*) > 0"
    ), {"t": tenant_id, "tag": TAG_KEY, "category": CATEGORY_KEY, "user": USER_KEY})
    return {r.lexeme: (int(r.df), int(r.len)) for r in rows}


async def set_column(resources: Resources, tenant: TenantKey, memory_id: str,
                     assignment: str) -> None:
    """An UPDATE past the API, whose PATCH neither archives a row nor moves it to another
    user."""
    async with resources.sessionmaker() as session, session.begin():
        await session.execute(text(
            f"UPDATE memories SET {assignment} WHERE tenant_id = :t AND id = :id"
        ), {"t": tenant.tenant_id, "id": memory_id})


async def assert_consistent(resources: Resources, tenant_id: uuid.UUID) -> Stats:
    async with resources.sessionmaker() as session:
        expected = await truth(session, tenant_id)
        assert await recorded(session, tenant_id) == expected
    return expected


async def test_inserts_updates_deletes_and_archiving_keep_the_statistics_exact(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    ids = await seed(client, [
        {"content": "Alice plays the saxophone", "user_id": "u1"},
        {"content": "Bob plays the saxophone and the piano", "user_id": "u1"},
        {"content": "Carol bakes bread", "user_id": "u2"},
    ])
    stats = await assert_consistent(resources, tenant.tenant_id)
    assert stats["saxophon"][0] == 2
    assert stats[""][0] == 3

    resp = await client.patch(f"/v1/memories/{ids[0]}", json={"content": "Alice sings"})
    assert resp.status_code == 200, resp.text
    stats = await assert_consistent(resources, tenant.tenant_id)
    assert stats["saxophon"][0] == 1
    assert stats["sing"][0] == 1

    # A change that leaves the text alone moves nothing.
    async with resources.sessionmaker() as session:
        before = await session.scalar(text("SELECT count(*) FROM term_stats"))
    resp = await client.patch(f"/v1/memories/{ids[1]}", json={"importance": 0.9})
    assert resp.status_code == 200, resp.text
    async with resources.sessionmaker() as session:
        assert await session.scalar(text("SELECT count(*) FROM term_stats")) == before

    resp = await client.delete(f"/v1/memories/{ids[2]}")
    assert resp.status_code == 204, resp.text
    stats = await assert_consistent(resources, tenant.tenant_id)
    assert "bread" not in stats
    assert stats[""][0] == 2

    # Archived rows leave the statistics, and come back when un-archived.
    await set_column(resources, tenant, ids[1], "archived_at = now()")
    stats = await assert_consistent(resources, tenant.tenant_id)
    assert "piano" not in stats
    assert stats[""][0] == 1
    await set_column(resources, tenant, ids[1], "archived_at = NULL")
    stats = await assert_consistent(resources, tenant.tenant_id)
    assert stats["piano"][0] == 1


async def test_tags_and_categories_are_counted_per_tenant_through_every_write(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
    other_tenant: TenantKey,
) -> None:
    """Each tenant's active rows per tag and per category, under keys no lexeme can be
    (a search bounds a tag-filtered scope by them): a change of tags or category moves
    them, archiving takes a row out, and another tenant's rows never count."""
    async with make_client(resources, other_tenant.headers) as other:
        await seed(other, [{"content": "elsewhere", "tags": ["red"], "category": "work"}])
    ids = await seed(client, [
        {"content": "first note", "tags": ["red", "blue"], "category": "work"},
        {"content": "second note", "tags": ["red"], "category": "home"},
        {"content": "third note", "category": "work"},
    ])
    stats = await assert_consistent(resources, tenant.tenant_id)
    assert stats[TAG_KEY + "red"][0] == 2
    assert stats[TAG_KEY + "blue"][0] == 1
    assert stats[CATEGORY_KEY + "work"][0] == 2
    assert stats[CATEGORY_KEY + "home"][0] == 1
    assert stats[""][0] == 3  # the corpus row counts rows, not keys

    resp = await client.patch(f"/v1/memories/{ids[0]}",
                              json={"tags": ["green"], "category": "home"})
    assert resp.status_code == 200, resp.text
    stats = await assert_consistent(resources, tenant.tenant_id)
    assert stats[TAG_KEY + "red"][0] == 1
    assert TAG_KEY + "blue" not in stats
    assert stats[TAG_KEY + "green"][0] == 1
    assert stats[CATEGORY_KEY + "home"][0] == 2

    await set_column(resources, tenant, ids[1], "archived_at = now()")
    stats = await assert_consistent(resources, tenant.tenant_id)
    assert TAG_KEY + "red" not in stats
    assert stats[CATEGORY_KEY + "home"][0] == 1

    resp = await client.delete(f"/v1/memories/{ids[2]}")
    assert resp.status_code == 204, resp.text
    stats = await assert_consistent(resources, tenant.tenant_id)
    assert CATEGORY_KEY + "work" not in stats
    assert (await assert_consistent(resources, other_tenant.tenant_id))[TAG_KEY + "red"][0] == 1


async def test_users_are_counted_per_tenant_through_every_write(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
    other_tenant: TenantKey,
) -> None:
    """Each tenant's active rows per user (a search learns a user's size from it instead
    of counting the user's rows): archiving takes a row out and un-archiving puts it
    back, a row moved to another user moves the count, a text change alone moves
    nothing, rows without a user are not counted, and another tenant's never are."""
    async with make_client(resources, other_tenant.headers) as other:
        await seed(other, [{"content": "elsewhere", "user_id": "u1"}])
    ids = await seed(client, [
        {"content": "first note", "user_id": "u1"},
        {"content": "second note", "user_id": "u1"},
        {"content": "third note", "user_id": "u2"},
        {"content": "nobody's note"},
    ])
    stats = await assert_consistent(resources, tenant.tenant_id)
    assert stats[USER_KEY + "u1"][0] == 2
    assert stats[USER_KEY + "u2"][0] == 1
    assert stats[""][0] == 4  # the corpus row counts rows, the row without a user too

    resp = await client.patch(f"/v1/memories/{ids[0]}", json={"content": "first note, again"})
    assert resp.status_code == 200, resp.text
    assert (await assert_consistent(resources, tenant.tenant_id))[USER_KEY + "u1"][0] == 2

    await set_column(resources, tenant, ids[1], "user_id = 'u2'")
    stats = await assert_consistent(resources, tenant.tenant_id)
    assert stats[USER_KEY + "u1"][0] == 1
    assert stats[USER_KEY + "u2"][0] == 2

    await set_column(resources, tenant, ids[0], "archived_at = now()")
    assert USER_KEY + "u1" not in await assert_consistent(resources, tenant.tenant_id)
    await set_column(resources, tenant, ids[0], "archived_at = NULL")
    assert (await assert_consistent(resources, tenant.tenant_id))[USER_KEY + "u1"][0] == 1

    resp = await client.delete(f"/v1/memories/{ids[2]}")
    assert resp.status_code == 204, resp.text
    assert (await assert_consistent(resources, tenant.tenant_id))[USER_KEY + "u2"][0] == 1
    assert (await assert_consistent(resources, other_tenant.tenant_id))[USER_KEY + "u1"][0] == 1


async def test_an_archiving_consolidation_moves_the_statistics_to_the_summary(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    await seed(client, [
        {"content": f"note {i} about the quarterly budget review", "user_id": "u1",
         "category": "work", "importance": 0.2}
        for i in range(6)
    ])
    resp = await client.post("/v1/consolidations", json={
        "user_id": "u1", "strategy": "simple", "mode": "archive",
    })
    assert resp.status_code == 200, resp.text
    run = resp.json()
    assert run["created"] >= 1
    assert run["deleted"] >= 2

    stats = await assert_consistent(resources, tenant.tenant_id)
    # Only the summaries are active now: each counts once.
    async with resources.sessionmaker() as session:
        active = await session.scalar(text(
            "SELECT count(*) FROM memories WHERE tenant_id = :t AND archived_at IS NULL"
        ), {"t": tenant.tenant_id})
    assert stats[""][0] == active


async def test_a_rolled_back_write_leaves_no_statistics(
    resources: Resources, tenant: TenantKey,
) -> None:
    async with resources.sessionmaker() as session:
        await session.execute(text(
            "INSERT INTO memories (tenant_id, id, content, embedding) "
            "VALUES (:t, :id, 'xylophone quartet', CAST(:v AS halfvec(384)))"
        ), {"t": tenant.tenant_id, "id": uuid.uuid4(), "v": "[" + ",".join(["0.05"] * 384) + "]"})
        assert (await recorded(session, tenant.tenant_id))["xylophon"] == (1, 0)
        await session.rollback()

    assert await assert_consistent(resources, tenant.tenant_id) == {}


async def test_deleting_a_tenant_leaves_only_zero_sums_which_the_fold_drops(
    resources: Resources,
) -> None:
    doomed = await create_tenant_key(resources)
    async with make_client(resources, doomed.headers) as c:
        await seed(c, [{"content": "ephemeral tenant data"}])
    async with resources.sessionmaker() as session, session.begin():
        await session.execute(text("DELETE FROM tenants WHERE id = :t"), {"t": doomed.tenant_id})
    async with resources.sessionmaker() as session, session.begin():
        assert await recorded(session, doomed.tenant_id) == {}
        await fold_term_stats(session)
    async with resources.sessionmaker() as session:
        left = await session.scalar(text(
            "SELECT count(*) FROM term_stats WHERE tenant_id = :t"), {"t": doomed.tenant_id})
    assert left == 0


async def test_a_batch_write_is_one_statement_so_the_triggers_add_one_row_per_key(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    # Per-row INSERTs (an executemany), or one per set of columns set (the ORM's bulk
    # insert), would fire the statement triggers more than once: "garden" would get
    # several delta rows. The rows differ in which optional fields they set.
    items: list[dict[str, Any]] = [
        {"content": f"garden tomato harvest {i}", "user_id": "ann", "tags": ["veg"]}
        for i in range(10)]
    items[3] |= {"agent_id": "planner", "metadata": {"bed": 3}}
    items[6] |= {"expires_at": "2099-01-01T00:00:00Z", "session_id": "s1"}
    ids = await seed(client, items)
    async with resources.sessionmaker() as session:
        rows = (await session.execute(text(
            "SELECT lexeme, count(*) AS n FROM term_stats WHERE tenant_id = :t GROUP BY lexeme"
        ), {"t": tenant.tenant_id})).all()
        stored = (await session.execute(text(
            "SELECT agent_id, session_id, metadata, expires_at IS NOT NULL AS expires "
            "FROM memories WHERE id = ANY(CAST(:ids AS uuid[])) ORDER BY agent_id IS NULL"
        ), {"ids": [ids[3], ids[6]]})).all()
    assert {"garden", "tomato", "harvest", "", TAG_KEY + "veg", USER_KEY + "ann"} <= {
        r.lexeme for r in rows}
    assert all(r.n == 1 for r in rows), rows
    assert [tuple(r) for r in stored] == [("planner", None, {"bed": 3}, False),
                                          (None, "s1", {}, True)]
    await assert_consistent(resources, tenant.tenant_id)


async def test_the_fold_leaves_one_row_per_lexeme_and_every_total_unchanged(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    ids = await seed(client, [{"content": f"garden tomato harvest {i}"} for i in range(4)])
    await seed(client, [{"content": "garden shed paint"}])
    await client.delete(f"/v1/memories/{ids[0]}")
    async with resources.sessionmaker() as session:
        before = await recorded(session, tenant.tenant_id)
        unfolded = await session.scalar(text(
            "SELECT count(*) FROM term_stats WHERE tenant_id = :t AND NOT folded"
        ), {"t": tenant.tenant_id})
    assert unfolded > len(before)  # several delta rows per lexeme

    async with resources.sessionmaker() as session, session.begin():
        folded = await fold_term_stats(session)
    assert folded is not None
    assert folded >= unfolded

    async with resources.sessionmaker() as session:
        rows = (await session.execute(text(
            "SELECT lexeme, count(*) AS n, bool_and(folded) AS folded FROM term_stats "
            "WHERE tenant_id = :t GROUP BY lexeme"
        ), {"t": tenant.tenant_id})).all()
        assert await recorded(session, tenant.tenant_id) == before
    assert {r.lexeme for r in rows} == set(before)
    assert all(r.n == 1 and r.folded for r in rows)
    await assert_consistent(resources, tenant.tenant_id)


async def test_a_second_fold_skips_while_the_first_holds_the_lock(
    resources: Resources, client: httpx.AsyncClient,
) -> None:
    await seed(client, [{"content": "lock contention check"}])
    async with resources.sessionmaker() as first, first.begin():
        assert await fold_term_stats(first) > 0
        async with resources.sessionmaker() as second, second.begin():
            assert await fold_term_stats(second) is None


async def test_the_fold_loop_folds_in_the_background(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    await seed(client, [{"content": "background fold of the statistics"}])
    task = asyncio.create_task(fold_loop(resources.sessionmaker, 0.02))
    try:
        deadline = asyncio.get_running_loop().time() + 5
        while True:
            async with resources.sessionmaker() as session:
                unfolded = await session.scalar(text(
                    "SELECT count(*) FROM term_stats WHERE tenant_id = :t AND NOT folded"
                ), {"t": tenant.tenant_id})
            if unfolded == 0:
                break
            assert asyncio.get_running_loop().time() < deadline, "nothing was folded"
            await asyncio.sleep(0.02)
    finally:
        task.cancel()
    await assert_consistent(resources, tenant.tenant_id)


async def test_two_writers_of_one_tenant_do_not_wait_for_each_other(
    resources: Resources, tenant: TenantKey,
) -> None:
    """Each write appends its own delta rows; a writer that has not committed yet holds
    no lock another writer of the same lexemes needs."""
    vector = "[" + ",".join(["0.05"] * 384) + "]"
    insert = text(
        "INSERT INTO memories (tenant_id, id, content, embedding) "
        "VALUES (:t, :id, 'shared common words', CAST(:v AS halfvec(384)))"
    )
    params: Mapping[str, Any] = {"t": tenant.tenant_id, "v": vector}
    async with resources.sessionmaker() as first, first.begin():
        await first.execute(insert, {**params, "id": uuid.uuid4()})
        async with resources.sessionmaker() as second:
            await second.execute(text("SET LOCAL lock_timeout = '2s'"))
            await second.execute(insert, {**params, "id": uuid.uuid4()})
            await second.commit()
    stats = await assert_consistent(resources, tenant.tenant_id)
    assert stats["share"][0] == 2


async def scoped_scores(client: httpx.AsyncClient) -> dict[str, float]:
    await seed(client, [
        *({"content": f"weekly meeting notes {i}", "user_id": "crowd"} for i in range(20)),
        {"content": "meeting about the zeppelin", "user_id": "solo"},
        {"content": "zeppelin meeting recap", "user_id": "solo"},
        {"content": "groceries for the week", "user_id": "solo"},
    ])
    resp = await client.post("/v1/search", json={
        "query": "meeting zeppelin", "user_id": "solo", "explain": True, "top_k": 10,
    })
    assert resp.status_code == 200, resp.text
    scores = {r["memory"]["id"]: r["explanation"]["fusion"]["text_score"]
              for r in resp.json()["results"] if r["explanation"]["fusion"]["text_score"]}
    assert len(scores) == 2
    return scores


async def solo_lengths(resources: Resources, tenant: TenantKey) -> dict[str, int]:
    async with resources.sessionmaker() as session:
        return {str(r.id): r.dl for r in await session.execute(text(
            "SELECT id, length(tsv) AS dl FROM memories WHERE tenant_id = :t AND user_id = 'solo'"
        ), {"t": tenant.tenant_id})}


def bm25(resources: Resources, idf: Mapping[str, float], dl: int, avgdl: float) -> float:
    k1, b = resources.settings.search_bm25_k1, resources.settings.search_bm25_b
    norm = 1 - b + b * dl / avgdl
    return sum(w * (k1 + 1) / (1 + k1 * norm) for w in idf.values())


def idf(n: float, df: float) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


async def test_a_small_scope_is_scored_with_its_own_statistics(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    """Inside a scope small enough to count, N, df and the average length are the scope's:
    'meeting' is rare in this user's memories however common it is in the tenant."""
    scores = await scoped_scores(client)

    lengths = await solo_lengths(resources, tenant)
    avgdl = sum(lengths.values()) / len(lengths)
    weights = {"meet": idf(3, 2), "zeppelin": idf(3, 2)}
    for memory_id, score in scores.items():
        assert score == pytest.approx(bm25(resources, weights, lengths[memory_id], avgdl),
                                      rel=1e-6)


async def test_a_large_scope_is_scored_with_the_tenants_statistics(
    resources: Resources, tenant: TenantKey,
) -> None:
    """Above `search_exact_below` the statistics come from term_stats: a term common in
    the tenant is worth less than a rare one, even where both are equally frequent."""
    settings = resources.settings.model_copy(update={"search_exact_below": 2})
    large = replace(resources, settings=settings)
    async with make_client(large, tenant.headers) as client:
        scores = await scoped_scores(client)

    async with resources.sessionmaker() as session:
        stats = await recorded(session, tenant.tenant_id)
    lengths = await solo_lengths(resources, tenant)
    n, total = stats[""]
    weights = {t: idf(n, stats[t][0]) for t in ("meet", "zeppelin")}
    assert weights["zeppelin"] > 3 * weights["meet"]
    for memory_id, score in scores.items():
        assert score == pytest.approx(bm25(resources, weights, lengths[memory_id], total / n),
                                      rel=1e-6)
