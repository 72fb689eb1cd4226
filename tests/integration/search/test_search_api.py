"""`POST /v1/search` end to end over HTTP with the real database and the hash embedder:
ordering, explain, filters that never leak (scope, tags, categories, tenant, expiry,
archive), summaries and their down-weight, the indexed date, BM25, validation, and both
vector paths (exact scan for a small scope, HNSW iterative scan for a large one)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import text

from app.db import asyncpg_dsn
from app.ids import uuid7
from app.resources import Resources
from app.search.reader import search_server_settings
from tests.conftest import TenantKey, create_tenant_key, make_client

PROBLEM_JSON = "application/problem+json"
STAGES = ("relevance_floor", "fusion", "scoring", "date_match", "summary_coverage",
          "summary_downweight", "collapse_duplicates", "cut")
HNSW_INDEX = "ix_memories_embedding_hnsw"
# Scopes at or above this many rows take the HNSW path in the `hnsw` variant.
SMALL_EXACT_BELOW = 5


# --- helpers ---------------------------------------------------------------------------------


async def seed(client: httpx.AsyncClient, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    resp = await client.post("/v1/memories/batch", json={"items": items})
    assert resp.status_code == 201, resp.text
    created: list[dict[str, Any]] = resp.json()["items"]
    return created


async def search(client: httpx.AsyncClient, query: str, **body: Any) -> dict[str, Any]:
    resp = await client.post("/v1/search", json={"query": query, **body})
    assert resp.status_code == 200, resp.text
    answer: dict[str, Any] = resp.json()
    assert set(answer) == {"results", "query_style"}
    assert answer["query_style"] in {"summary", "regular"}
    return answer


def ids_of(answer: dict[str, Any]) -> list[str]:
    return [r["memory"]["id"] for r in answer["results"]]


def by_id(answer: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["memory"]["id"]: r for r in answer["results"]}


def vector_literal(vector: list[float]) -> str:
    return "[" + ",".join(f"{x:.6f}" for x in vector) + "]"


async def insert_summary(resources: Resources, tenant_id: uuid.UUID, content: str,
                         covers: list[str], *, embedding: list[float] | None = None,
                         **scope: str | None) -> str:
    """A summary row written as consolidation writes one: fact_role and source 'summary',
    `summary_of` naming the facts it covers. Its vector is `embedding` or its content's."""
    if embedding is None:
        (embedding,) = await resources.embedder.embed([content])
    summary_id = uuid7()
    async with resources.sessionmaker() as session:
        await session.execute(
            text(
                "INSERT INTO memories (tenant_id, id, content, user_id, agent_id, session_id,"
                " namespace, fact_role, source, summary_of, importance, embedding) VALUES"
                " (:tenant_id, :id, :content, :user_id, :agent_id, :session_id, :namespace,"
                " 'summary', 'summary', CAST(:summary_of AS uuid[]), 0.7,"
                " CAST(:embedding AS halfvec(384)))"
            ),
            {
                "tenant_id": tenant_id, "id": summary_id, "content": content,
                "user_id": scope.get("user_id"), "agent_id": scope.get("agent_id"),
                "session_id": scope.get("session_id"), "namespace": scope.get("namespace"),
                "summary_of": [uuid.UUID(i) for i in covers],
                "embedding": vector_literal(embedding),
            },
        )
        await session.commit()
    return str(summary_id)


async def fact_embedding(resources: Resources, tenant_id: uuid.UUID, memory_id: str) -> list[float]:
    async with resources.sessionmaker() as session:
        raw = (await session.execute(
            text("SELECT embedding::text FROM memories WHERE tenant_id = :t AND id = :id"),
            {"t": tenant_id, "id": uuid.UUID(memory_id)},
        )).scalar_one()
    return [float(x) for x in raw.strip("[]").split(",")]


def assert_validation_problem(resp: httpx.Response, field: str) -> None:
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"] == PROBLEM_JSON
    body = resp.json()
    assert body["status"] == 422
    assert body["type"].endswith("/validation_error")
    assert body["detail"]
    fields = [e["field"] for e in body["errors"]]
    assert field in fields, fields


# --- fixtures --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hnsw_resources(resources: Resources) -> Resources:
    """The suite's resources with every scope of SMALL_EXACT_BELOW rows or more on HNSW
    (the test tenants are slivers of the index, which would otherwise be ranked exactly)."""
    settings = resources.settings.model_copy(update={
        "search_exact_below": SMALL_EXACT_BELOW, "search_exact_cost_ratio": 0})
    return replace(resources, settings=settings)


@pytest.fixture(params=["exact", "hnsw"])
async def any_client(request: pytest.FixtureRequest, resources: Resources,
                     hnsw_resources: Resources, tenant: TenantKey,
                     ) -> AsyncIterator[httpx.AsyncClient]:
    """The fresh tenant's client, once with the default settings (every scope in these tests
    is exact) and once with the HNSW path for all but the tiniest scopes."""
    chosen = resources if request.param == "exact" else hnsw_resources
    async with make_client(chosen, tenant.headers) as c:
        yield c


def plan_nodes(node: dict[str, Any], *, into_ctes: bool = True) -> Iterator[dict[str, Any]]:
    """`node` and the nodes under it; with `into_ctes=False`, not those of its CTEs."""
    if not into_ctes and node.get("Subplan Name", "").startswith("CTE "):
        return
    yield node
    for child in node.get("Plans", []):
        yield from plan_nodes(child, into_ctes=into_ctes)


async def generic_plan(resources: Resources, statement: str, args: tuple[Any, ...],
                       marker: str) -> tuple[dict[str, Any], list[Any]]:
    """The ANALYZE plan of `statement` (the logged statement holding `marker`) when it runs
    again, from auto_explain, on a connection set up as the search's pool sets up its own:
    so with the generic plan the service runs (EXPLAIN of the statement would plan it for
    the given values). Also the statement's rows."""
    conn = await asyncpg.connect(asyncpg_dsn(resources.engine),
                                 server_settings=search_server_settings(resources.settings))
    logged: list[str] = []
    conn.add_log_listener(lambda _conn, message: logged.append(message.message))
    try:
        await conn.execute(
            "LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; "
            "SET auto_explain.log_analyze = on; SET auto_explain.log_format = json; "
            "SET auto_explain.log_level = notice; SET client_min_messages = notice")
        rows = await conn.fetch(statement, *args)
        await asyncio.sleep(0.05)  # log listeners are called soon, not at once
    finally:
        await conn.close()
    [raw] = [m for m in logged if marker in m]
    plan: dict[str, Any] = json.loads(raw[raw.index("{"):])["Plan"]
    return plan, list(rows)


async def vector_branch_rows(resources: Resources, statement: str,
                             args: tuple[Any, ...]) -> dict[str, int]:
    """Rows each vector branch produced when `statement` runs again with its generic plan.

    The two branches, inside the `vec` CTE, are gated by one-time filters on the `small`
    parameter: the exact scan on `$n`, the approximate one on `(NOT $n)`. `hnsw_index`
    counts rows out of the HNSW index itself.
    """
    plan, _ = await generic_plan(resources, statement, args, "vec_ann")
    rows = {"exact": 0, "ann": 0, "hnsw_index": 0}
    [vec] = [n for n in plan_nodes(plan) if n.get("Subplan Name") == "CTE vec"]
    for node in plan_nodes(vec):
        produced = int(node.get("Actual Rows", 0) * node.get("Actual Loops", 0))
        gate = node.get("One-Time Filter", "")
        if "$" in gate:
            rows["ann" if gate.startswith("(NOT") else "exact"] += produced
        if node.get("Index Name") == HNSW_INDEX:
            rows["hnsw_index"] += produced
    return rows


async def table_rows(resources: Resources) -> float:
    """The memories table's size as the planner estimates it (what the search's exact/HNSW
    choice reads), refreshed by VACUUM."""
    async with resources.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM memories"))
        rows = await conn.scalar(text("SELECT reltuples FROM pg_class WHERE relname = 'memories'"))
    return float(rows)


async def vacuum_analyze(resources: Resources) -> None:
    """Statistics as autovacuum keeps them in a real store: the planner's and also GIN's
    own (entry and data pages, entries), which only VACUUM writes. Without the latter the
    planner costs a GIN index from invented figures, and on a table of a few thousand rows
    it rightly prefers to read them all."""
    async with resources.engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        await conn.execute(text("VACUUM ANALYZE memories"))


# --- response shape and ordering -------------------------------------------------------------


async def test_results_are_ordered_by_score_and_carry_no_explanation_by_default(
    client: httpx.AsyncClient,
) -> None:
    await seed(client, [
        {"content": "Alice adopted a grey cat named Miso", "importance": 0.2},
        {"content": "Alice's cat Miso likes tuna", "importance": 0.9},
        {"content": "Bob prefers dogs over cats"},
        {"content": "The quarterly report is due on Friday"},
        {"content": "Alice moved to Lisbon in March"},
        {"content": "Miso the cat sleeps on the sofa all day"},
    ])

    answer = await search(client, "What is the name of Alice's cat?")

    assert answer["query_style"] == "regular"
    scores = [r["score"] for r in answer["results"]]
    assert len(scores) == 6
    assert scores == sorted(scores, reverse=True)
    assert all(isinstance(s, float) and math.isfinite(s) for s in scores)
    assert all(r["explanation"] is None for r in answer["results"])
    assert answer["results"][0]["memory"]["content"] in {
        "Alice adopted a grey cat named Miso", "Alice's cat Miso likes tuna"}
    first = answer["results"][0]["memory"]
    assert set(first) >= {"id", "content", "fact_role", "created_at", "summary_of"}


async def test_two_copies_of_a_fact_score_alike_and_the_newer_comes_first(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    """Found by an exploratory probe: each list placed the older copy first (ids are
    time-ordered), and fusion made that place a score up to twice the newer's. Seen with
    both copies answered (collapsing off); collapsed, the newer stands for the older."""
    fact = {"content": "The user's favourite colour is teal", "user_id": "u1"}
    (older,) = await seed(client, [fact])
    (newer,) = await seed(client, [fact])
    await seed(client, [{"content": f"The user had lunch at noon on day {i}", "user_id": "u1"}
                        for i in range(5)])
    question = "what is the user's favourite colour?"
    every_copy = resources.settings.model_copy(update={"search_collapse_duplicates": False})
    async with make_client(replace(resources, settings=every_copy), tenant.headers) as both:
        answer = await search(both, question, user_id="u1", explain=True)

    first, second = answer["results"][:2]
    assert [first["memory"]["id"], second["memory"]["id"]] == [newer["id"], older["id"]]
    assert first["score"] == pytest.approx(second["score"], abs=1e-6)
    assert first["explanation"]["fusion"] == second["explanation"]["fusion"]

    collapsed = await search(client, question, user_id="u1", explain=True)
    assert ids_of(collapsed)[0] == newer["id"]
    assert older["id"] not in ids_of(collapsed)
    assert collapsed["results"][0]["explanation"]["collapse_duplicates"] == {
        "duplicates": 1, "duplicate_ids": older["id"]}


async def test_a_result_is_the_memory_as_stored(client: httpx.AsyncClient) -> None:
    """Every field comes back as GET answers it: metadata (JSON text until the result is
    built), tags, scope, timestamps."""
    [stored] = await seed(client, [{
        "content": "Alice's cat Miso likes tuna", "user_id": "alice", "agent_id": "planner",
        "session_id": "s-1", "namespace": "pets", "category": "preference",
        "tags": ["cat", "food"], "importance": 0.8,
        "metadata": {"source": {"app": "chat", "turn": 7}, "langs": ["en", "pt"], "ok": True},
        "expires_at": (datetime.now(UTC) + timedelta(days=30)).isoformat(),
    }])

    answer = await search(client, "what does the cat like", user_id="alice")

    [result] = answer["results"]
    got = await client.get(f"/v1/memories/{stored['id']}")
    assert result["memory"] == got.json() == stored


@pytest.mark.parametrize(("query", "style"), [
    ("summarize our conversation", "summary"),
    ("Give me a recap of what we discussed about the trip", "summary"),
    ("tl;dr", "summary"),
    ("What is the name of Alice's cat?", "regular"),
    ("where is the recap tool documented?", "regular"),
])
async def test_query_style_is_always_returned(
    client: httpx.AsyncClient, query: str, style: str,
) -> None:
    empty = await search(client, query)
    await seed(client, [{"content": "Alice's cat is called Miso"}])
    filled = await search(client, query, explain=True)

    assert empty == {"results": [], "query_style": style}
    assert filled["query_style"] == style
    assert len(filled["results"]) == 1


async def test_explain_reports_every_stage_for_every_result(client: httpx.AsyncClient) -> None:
    created = await seed(client, [
        {"content": "The Lisbon flight leaves at nine", "importance": 0.8},
        {"content": "Lisbon hotel is near the river"},
        {"content": "Quarterly budget review with finance"},
    ])
    budget_id = created[2]["id"]

    answer = await search(client, "when does the Lisbon flight leave", explain=True)

    results = answer["results"]
    assert len(results) == 3
    for position, result in enumerate(results, 1):
        explanation = result["explanation"]
        assert set(explanation) == set(STAGES), explanation
        fusion, scoring = explanation["fusion"], explanation["scoring"]
        downweight, cut = explanation["summary_downweight"], explanation["cut"]
        assert set(fusion) >= {"vector_rank", "vector_similarity", "text_rank", "text_score",
                               "vector_term", "text_term", "rrf", "score"}
        assert set(scoring) >= {"relevance", "importance", "importance_term", "age_days",
                                "recency", "recency_term", "score"}
        assert set(downweight) >= {"is_summary", "applied", "multiplier", "score_before",
                                   "score"}
        # The stages chain: each one starts from the score the previous one left.
        assert scoring["relevance"] == pytest.approx(fusion["score"])
        assert scoring["score"] == pytest.approx(
            scoring["relevance"] + scoring["importance_term"] + scoring["recency_term"])
        # The query names no day.
        assert explanation["date_match"] == {"matched": False, "score": scoring["score"]}
        # A regular query: no summary is lifted by its sources.
        assert explanation["summary_coverage"] == {"covered_candidates": 0, "lift": 0.0,
                                                   "score": scoring["score"]}
        assert downweight["score_before"] == pytest.approx(scoring["score"])
        assert downweight == {**downweight, "is_summary": False, "applied": False,
                              "multiplier": 1.0}
        assert result["score"] == pytest.approx(downweight["score"])
        assert cut == {"rank": position}
        assert scoring["importance"] == pytest.approx(result["memory"]["importance"])
        # Every row of a 3-row scope is in the vector list.
        assert fusion["vector_rank"] in {1, 2, 3}
        assert -1.0 <= fusion["vector_similarity"] <= 1.0

    top = results[0]
    assert top["memory"]["content"] == "The Lisbon flight leaves at nine"
    assert top["explanation"]["fusion"]["vector_rank"] == 1
    assert top["explanation"]["fusion"]["text_rank"] == 1
    assert top["explanation"]["fusion"]["text_score"] > 0
    # No query word is in the budget memory: only the vector list found it.
    budget = by_id(answer)[budget_id]["explanation"]["fusion"]
    assert budget["text_rank"] is None
    assert budget["text_score"] is None
    assert budget["text_term"] == 0.0


async def test_a_query_that_matches_nothing_returns_an_empty_list(
    client: httpx.AsyncClient,
) -> None:
    assert await search(client, "anything at all") == {"results": [], "query_style": "regular"}

    await seed(client, [{"content": "Alice likes jazz", "user_id": "alice"}])

    for body in ({"user_id": "nobody"}, {"tags": ["absent"]}, {"categories": ["absent"]},
                 {"namespace": "absent"}):
        answer = await search(client, "Alice likes jazz", **body)
        assert answer["results"] == [], body


async def test_top_k_caps_the_results(client: httpx.AsyncClient) -> None:
    await seed(client, [{"content": f"note {i} about the garden"} for i in range(12)])

    default = await search(client, "garden")
    three = await search(client, "garden", top_k=3)
    all_of_them = await search(client, "garden", top_k=100)
    one = await search(client, "garden", top_k=1)

    assert len(default["results"]) == 10
    assert len(three["results"]) == 3
    assert len(all_of_them["results"]) == 12
    assert len(one["results"]) == 1
    assert ids_of(three) == ids_of(all_of_them)[:3]
    assert ids_of(one) == ids_of(all_of_them)[:1]


# --- filters never leak ----------------------------------------------------------------------


SCOPE_FILTERS: list[dict[str, Any]] = [
    {"user_id": "u1"},
    {"agent_id": "a2"},
    {"session_id": "s1"},
    {"namespace": "n2"},
    {"user_id": "u2", "session_id": "s2"},
    {"user_id": "u1", "agent_id": "a1", "session_id": "s2", "namespace": "n1"},
]


async def test_scope_filters_return_exactly_the_rows_in_scope(
    any_client: httpx.AsyncClient,
) -> None:
    items = [
        {"content": f"packing list for the ski trip, copy {u}{a}{s}{n}",
         "user_id": f"u{u}", "agent_id": f"a{a}", "session_id": f"s{s}", "namespace": f"n{n}"}
        for u in (1, 2) for a in (1, 2) for s in (1, 2) for n in (1, 2)
    ]
    # Rows without any scope must not match a scope filter either.
    items.append({"content": "packing list for the ski trip, unscoped"})
    created = await seed(any_client, items)

    for scope in SCOPE_FILTERS:
        answer = await search(any_client, "packing list for the ski trip", top_k=100, **scope)
        expected = {m["id"] for m in created
                    if all(m[field] == value for field, value in scope.items())}
        assert set(ids_of(answer)) == expected, scope
        for result in answer["results"]:
            for field, value in scope.items():
                assert result["memory"][field] == value, (scope, result["memory"])

    unscoped = await search(any_client, "packing list for the ski trip", top_k=100)
    assert len(unscoped["results"]) == 17


async def test_tags_must_all_match_and_categories_any(any_client: httpx.AsyncClient) -> None:
    rows = [
        ("red", []), ("red", ["a"]), ("red", ["a", "b"]), ("blue", ["b"]),
        ("blue", ["a", "b", "c"]), ("green", ["c"]), ("green", ["a", "b"]),
    ]
    created = await seed(any_client, [
        {"content": f"weekly grocery order number {i}", "category": category, "tags": tags,
         "user_id": "u1" if i % 2 else "u2"}
        for i, (category, tags) in enumerate(rows)
    ])

    cases: list[dict[str, Any]] = [
        {"tags": ["a"]},
        {"tags": ["a", "b"]},
        {"tags": ["b", "c"]},
        {"categories": ["red"]},
        {"categories": ["red", "green"]},
        {"tags": ["a", "b"], "categories": ["blue", "green"]},
        {"tags": ["a"], "categories": ["red"], "user_id": "u1"},
    ]
    for case in cases:
        answer = await search(any_client, "weekly grocery order", top_k=100, **case)
        expected = {
            m["id"] for m in created
            if set(case.get("tags", [])) <= set(m["tags"])
            and ("categories" not in case or m["category"] in case["categories"])
            and ("user_id" not in case or m["user_id"] == case["user_id"])
        }
        assert expected, case
        assert set(ids_of(answer)) == expected, case


async def test_a_creation_window_and_metadata_bound_the_results_exactly(
    any_client: httpx.AsyncClient,
) -> None:
    """On both vector paths and both text branches (a scope of 12 rows is large in the
    `hnsw` variant): every row the query matches, lexically and by vector, so a filter
    that leaked through either list would show."""
    base = datetime(2025, 3, 1, tzinfo=UTC)
    created = await seed(any_client, [
        # Each row's own code word: every row a full-text match of the query through a
        # word no other holds (a word every row holds ties no row to it).
        {"content": f"notes from the quarterly planning meeting, part {i}, code word w{i}x",
         "user_id": "u1" if i % 3 else "u2", "tags": ["board"] if i % 2 else [],
         "created_at": (base + timedelta(days=i)).isoformat(),
         "metadata": {"doc": f"d{i % 4}", "page": i, "meta": {"lang": "en" if i < 8 else "fr"}}}
        for i in range(12)
    ])

    def day(i: float) -> str:
        return (base + timedelta(days=i)).isoformat()

    cases: list[dict[str, Any]] = [
        {"created_after": day(3)},
        {"created_before": day(3)},
        {"created_after": day(2), "created_before": day(7)},
        {"created_after": day(2.5), "created_before": day(2.6)},  # nothing in between
        {"metadata": {"doc": "d1"}},
        {"metadata": {"meta": {"lang": "fr"}}},
        {"metadata": {"doc": "d1", "page": 5}},
        {"metadata": {"doc": "d9"}},
        {"metadata": {}},
        {"metadata": {"doc": "d2"}, "created_after": day(5), "user_id": "u1"},
        {"metadata": {"meta": {"lang": "en"}}, "tags": ["board"], "created_before": day(6)},
    ]

    def matches(memory: dict[str, Any], case: dict[str, Any]) -> bool:
        at = datetime.fromisoformat(memory["created_at"])
        wanted = case.get("metadata", {})
        return (("created_after" not in case or at > datetime.fromisoformat(case["created_after"]))
                and ("created_before" not in case
                     or at < datetime.fromisoformat(case["created_before"]))
                and all(memory["metadata"].get(k) == v for k, v in wanted.items())
                and ("user_id" not in case or memory["user_id"] == case["user_id"])
                and set(case.get("tags", [])) <= set(memory["tags"]))

    for case in cases:
        words = " ".join(f"w{i}x" for i in range(12))
        answer = await search(any_client, f"quarterly planning meeting notes {words}",
                              top_k=100, explain=True, **case)
        expected = {m["id"] for m in created if matches(m, case)}
        assert set(ids_of(answer)) == expected, case
        if expected:
            # Both lists were filtered, not only one: each result came through both.
            for result in answer["results"]:
                assert result["explanation"]["fusion"]["text_rank"] is not None, case
                assert result["explanation"]["fusion"]["vector_rank"] is not None, case


async def test_another_tenants_memory_never_returns_even_as_the_best_match(
    resources: Resources, hnsw_resources: Resources, client: httpx.AsyncClient,
    tenant: TenantKey,
) -> None:
    secret = "Carol's bank PIN is 4721 and her safe code is 9931"
    other = await create_tenant_key(resources)
    async with make_client(resources, other.headers) as other_client:
        [theirs] = await seed(other_client, [{"content": secret, "user_id": "u1"}])
        mine = await seed(client, [
            {"content": f"shopping note {i}: buy bread and milk", "user_id": "u1"}
            for i in range(8)
        ])
        async with make_client(hnsw_resources, tenant.headers) as hnsw_client:
            for c in (client, hnsw_client):
                for scope in ({}, {"user_id": "u1"}):
                    answer = await search(c, secret, top_k=100, **scope)
                    assert theirs["id"] not in ids_of(answer)
                    assert set(ids_of(answer)) == {m["id"] for m in mine}

        # The owner does find it, first.
        own = await search(other_client, secret)
        assert ids_of(own) == [theirs["id"]]


async def test_expired_memories_never_return(any_client: httpx.AsyncClient) -> None:
    now = datetime.now(UTC)
    created = await seed(any_client, [
        {"content": "The wifi password is hunter2", "expires_at": (now - timedelta(
            seconds=1)).isoformat()},
        {"content": "The wifi password is swordfish", "expires_at": (now - timedelta(
            days=30)).isoformat()},
        {"content": "The wifi password is tr0ub4dor", "expires_at": (now + timedelta(
            days=30)).isoformat()},
        {"content": "The wifi password is correct-horse"},
        *({"content": f"The guest wifi password was p{i}", "expires_at": (now - timedelta(
            hours=1)).isoformat()} for i in range(6)),
    ])
    alive = {created[2]["id"], created[3]["id"]}

    for query in ("The wifi password is hunter2", "wifi password"):
        answer = await search(any_client, query, top_k=100)
        assert set(ids_of(answer)) == alive, query


async def test_archived_memories_never_return(
    resources: Resources, any_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    created = await seed(any_client, [
        {"content": f"Dentist appointment moved to slot {i}", "user_id": "u1"} for i in range(8)
    ])
    archived = [m["id"] for m in created[:5]]
    async with resources.sessionmaker() as session:
        await session.execute(
            text("UPDATE memories SET archived_at = now() "
                 "WHERE tenant_id = :t AND id = ANY(CAST(:ids AS uuid[]))"),
            {"t": tenant.tenant_id, "ids": [uuid.UUID(i) for i in archived]},
        )
        await session.commit()

    for scope in ({}, {"user_id": "u1"}):
        answer = await search(any_client, "Dentist appointment moved to slot 0", top_k=100,
                              **scope)
        assert set(ids_of(answer)) == {m["id"] for m in created[5:]}, scope


# --- summaries -------------------------------------------------------------------------------


TRIP_FACTS = [
    "The Lisbon flight leaves Tuesday at nine",
    "The Lisbon hotel is the Almalusa near the river",
    "We plan a museum visit in Lisbon on Wednesday",
    "Alice's cat Miso likes tuna",
]
TRIP_SUMMARY = "Recap of the Lisbon trip plan: flight Tuesday, hotel near the river, museum visit"


async def seed_trip(resources: Resources, client: httpx.AsyncClient,
                    tenant: TenantKey) -> tuple[list[dict[str, Any]], str]:
    facts = await seed(client, [{"content": c, "user_id": "u1"} for c in TRIP_FACTS])
    summary_id = await insert_summary(resources, tenant.tenant_id, TRIP_SUMMARY,
                                      [m["id"] for m in facts[:3]], user_id="u1")
    return facts, summary_id


async def test_include_summaries_false_removes_summaries(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    facts = await seed(client, [{"content": c, "user_id": "u1"} for c in TRIP_FACTS])
    # A summary that sits exactly where the flight fact sits.
    flight_vector = await fact_embedding(resources, tenant.tenant_id, facts[0]["id"])
    summary_id = await insert_summary(resources, tenant.tenant_id, TRIP_SUMMARY,
                                      [m["id"] for m in facts[:3]], embedding=flight_vector,
                                      user_id="u1")

    for query in ("Lisbon flight", "Give me a recap of the Lisbon trip"):
        with_summaries = await search(client, query, top_k=100)
        without = await search(client, query, top_k=100, include_summaries=False)
        scoped_without = await search(client, query, top_k=100, include_summaries=False,
                                      user_id="u1")

        assert summary_id in ids_of(with_summaries), query
        summary = by_id(with_summaries)[summary_id]["memory"]
        assert summary["fact_role"] == "summary"
        assert set(summary["summary_of"]) == {m["id"] for m in facts[:3]}
        for answer in (without, scoped_without):
            assert set(ids_of(answer)) == {m["id"] for m in facts}, query
            assert all(r["memory"]["fact_role"] == "fact" for r in answer["results"])


async def test_regular_query_halves_a_summarys_score_and_ranks_the_fact_above_it(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    facts, summary_id = await seed_trip(resources, client, tenant)

    # Every content word of the summary: before the down-weight it is first in both lists.
    answer = await search(client, "Lisbon trip plan flight Tuesday hotel river museum visit",
                          explain=True)

    assert answer["query_style"] == "regular"
    summary = by_id(answer)[summary_id]
    downweight = summary["explanation"]["summary_downweight"]
    assert downweight["is_summary"] is True
    assert downweight["applied"] is True
    assert downweight["multiplier"] == 0.5
    assert downweight["score"] == pytest.approx(downweight["score_before"] * 0.5)
    assert summary["score"] == pytest.approx(downweight["score"])
    fusion = summary["explanation"]["fusion"]
    assert (fusion["vector_rank"], fusion["text_rank"]) == (1, 1)
    # ... and after it, the facts it covers come first.
    ranked = ids_of(answer)
    assert ranked.index(summary_id) > ranked.index(facts[0]["id"])
    assert ranked[0] != summary_id
    for result in answer["results"]:
        if result["memory"]["fact_role"] == "fact":
            assert result["explanation"]["summary_downweight"]["applied"] is False
            assert result["explanation"]["summary_downweight"]["multiplier"] == 1.0


async def test_summary_style_query_leaves_the_summary_and_gets_it_first(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    _, summary_id = await seed_trip(resources, client, tenant)

    answer = await search(client, "Give me a recap of the Lisbon trip plan", explain=True)

    assert answer["query_style"] == "summary"
    assert ids_of(answer)[0] == summary_id
    downweight = answer["results"][0]["explanation"]["summary_downweight"]
    assert downweight["is_summary"] is True
    assert downweight["applied"] is False
    # Left as it is, or raised by the optional boost (1.0 by default: no change).
    boost = resources.settings.summary_boost_factor
    assert downweight["multiplier"] == boost
    assert downweight["score"] == pytest.approx(downweight["score_before"] * boost)


# --- full text: the date and BM25 ------------------------------------------------------------


async def test_the_utc_date_is_searchable_through_the_text_list(
    client: httpx.AsyncClient,
) -> None:
    created = await seed(client, [
        {"content": "We booked the venue for the party", "created_at": "2023-05-08T10:00:00Z"},
        {"content": "We booked the caterer for the party", "created_at": "2023-06-12T10:00:00Z"},
        {"content": "We booked the band for the party", "created_at": "2022-11-03T10:00:00Z"},
        # 23:30 at UTC-2 is 01:30 UTC the next day: indexed as 9 May 2023.
        {"content": "We booked the florist for the party",
         "created_at": "2023-05-08T23:30:00-02:00"},
    ])
    venue, florist = created[0]["id"], created[3]["id"]

    answer = await search(client, "What happened on 8 May 2023?", explain=True)

    # No word of the venue memory is in the query: only its date matches.
    fusion = by_id(answer)[venue]["explanation"]["fusion"]
    assert fusion["text_rank"] == 1
    assert fusion["text_score"] > 0

    next_day = await search(client, "What happened on 9 May 2023?", explain=True)
    assert by_id(next_day)[florist]["explanation"]["fusion"]["text_rank"] == 1
    assert by_id(next_day)[venue]["explanation"]["fusion"]["text_rank"] != 1


async def test_bm25_prefers_a_rare_term_match_over_a_common_one(
    client: httpx.AsyncClient,
) -> None:
    # Coffee in half the rows: common, but not held by so many that it ties no row to the
    # query (search_text_common_share, 0.5).
    created = await seed(client, [
        *({"content": f"Morning coffee with colleague number {i}"} for i in range(8)),
        *({"content": f"Morning tea with colleague number {i}"} for i in range(7)),
        {"content": "Morning saxophone with colleague number 99"},
    ])
    rare = created[-1]["id"]

    answer = await search(client, "coffee saxophone", top_k=100, explain=True)

    fusion = {mid: r["explanation"]["fusion"] for mid, r in by_id(answer).items()}
    assert fusion[rare]["text_rank"] == 1
    common_scores = [f["text_score"] for mid, f in fusion.items()
                     if mid != rare and f["text_score"] is not None]
    assert len(common_scores) == 8
    assert all(0 < s < fusion[rare]["text_score"] for s in common_scores)


async def test_bm25_uses_the_configured_k1_and_b(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    """text_score is Okapi BM25 with the settings' k1 and b, from the tenant's term
    statistics: idf = ln(1 + (N - df + 0.5) / (df + 0.5)) over the N active rows of the
    tenant, term frequency = the term's positions in the row, document length = lexemes in
    the row's tsvector, average length over those N rows. With b > 0 the shorter of two
    rows that hold the term once scores higher."""
    settings = resources.settings
    created = await seed(client, [
        {"content": "saxophone", "created_at": "2024-02-01T09:00:00Z"},
        {"content": "saxophone practice with the jazz band every Tuesday evening downtown",
         "created_at": "2024-02-01T09:00:00Z"},
        {"content": "saxophone and more saxophone lessons", "created_at": "2024-02-01T09:00:00Z"},
        *({"content": f"coffee with colleague number {i}", "created_at": "2024-02-01T09:00:00Z"}
          for i in range(5)),
    ])
    short, long, twice = (m["id"] for m in created[:3])
    async with resources.sessionmaker() as session:
        stats = {
            str(row.id): (row.dl, row.tf)
            for row in await session.execute(
                text("SELECT id, length(tsv) AS dl, (SELECT coalesce(array_length(positions, 1),"
                     " 1) FROM unnest(tsv) WHERE lexeme = 'saxophon') AS tf FROM memories"
                     " WHERE tenant_id = :t"),
                {"t": tenant.tenant_id},
            )
        }
    matching = {i: s for i, s in stats.items() if s[1] is not None}
    assert set(matching) == {short, long, twice}
    assert matching[twice][1] == 2
    n, df = len(stats), len(matching)
    idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
    avgdl = sum(dl for dl, _ in stats.values()) / n
    k1, b = settings.search_bm25_k1, settings.search_bm25_b
    assert b > 0  # the length-normalisation assertion below needs it

    answer = await search(client, "saxophone", top_k=100, explain=True)

    scores = {mid: r["explanation"]["fusion"]["text_score"] for mid, r in by_id(answer).items()}
    for memory_id, (dl, tf) in matching.items():
        expected = idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))
        assert scores[memory_id] == pytest.approx(expected, rel=1e-6), (memory_id, dl, tf)
    assert scores[short] > scores[long]


# --- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(("body", "field"), [
    ({"query": ""}, "query"),
    ({"query": "   \n\t "}, "query"),
    ({"query": "x" * 4097}, "query"),
    ({"query": "bad \x00 byte"}, "query"),
    ({}, "query"),
    ({"query": None}, "query"),
    ({"query": "ok", "top_k": 0}, "top_k"),
    ({"query": "ok", "top_k": 101}, "top_k"),
    ({"query": "ok", "top_k": "ten"}, "top_k"),
    ({"query": "ok", "filters": {"user_id": "u1"}}, "filters"),
    ({"query": "ok", "tags": "a"}, "tags"),
    ({"query": "ok", "tags": [""]}, "tags.0"),
    ({"query": "ok", "categories": "work"}, "categories"),
    ({"query": "ok", "user_id": ""}, "user_id"),
    ({"query": "ok", "session_id": " "}, "session_id"),
    ({"query": "ok", "include_summaries": "maybe"}, "include_summaries"),
    # JSON types, not what lax parsing could make of them.
    ({"query": "ok", "top_k": True}, "top_k"),
    ({"query": "ok", "top_k": "5"}, "top_k"),
    ({"query": "ok", "top_k": 5.5}, "top_k"),
    ({"query": "ok", "include_summaries": "false"}, "include_summaries"),
    ({"query": "ok", "explain": 1}, "explain"),
    ({"query": "ok", "created_after": "2025-06-01T12:00:00"}, "created_after"),
    ({"query": "ok", "created_before": 1748779200}, "created_before"),
    ({"query": "ok", "metadata": ["doc"]}, "metadata"),
    ({"query": "ok", "metadata": {"doc": "bad \x00 byte"}}, "metadata"),
])
async def test_bad_input_is_a_422_problem_naming_the_field(
    client: httpx.AsyncClient, body: dict[str, Any], field: str,
) -> None:
    resp = await client.post("/v1/search", json=body)

    assert_validation_problem(resp, field)


async def test_limits_are_inclusive(client: httpx.AsyncClient) -> None:
    await seed(client, [{"content": "x marks the spot"}])

    longest = await search(client, "x" * 4096)
    one = await search(client, "spot", top_k=1)
    hundred = await search(client, "spot", top_k=100)
    # An integral float is an integer, as JSON Schema's "integer" has it.
    integral = await search(client, "spot", top_k=1.0)

    assert len(longest["results"]) == 1
    assert len(one["results"]) == len(hundred["results"]) == len(integral["results"]) == 1


async def test_search_requires_a_key(anon_client: httpx.AsyncClient) -> None:
    resp = await anon_client.post("/v1/search", json={"query": "anything"})

    assert resp.status_code == 401
    assert resp.headers["content-type"] == PROBLEM_JSON


# --- both vector paths return top_k ----------------------------------------------------------


@pytest.mark.parametrize("path", ["exact", "hnsw"])
async def test_a_small_scope_of_a_large_tenant_still_returns_top_k(
    resources: Resources, hnsw_resources: Resources, tenant: TenantKey,
    search_statements: list[tuple[str, tuple[Any, ...]]], path: str,
) -> None:
    """40 rows of one user among 4,040 of the tenant; the query shares no word with any row,
    so every result comes from the vector list alone, and it must fill top_k.

    The HNSW path is the planner's choice on a generic plan: on a table of a few hundred
    rows it rightly sorts them all instead, so, as in a real store, enough other rows (and
    fresh statistics) that the index is the cheaper plan whatever ran before this test."""
    chosen = resources if path == "exact" else hnsw_resources
    async with make_client(chosen, tenant.headers) as c:
        for batch in range(4):
            await seed(c, [
                {"content": f"filler row {batch} {i} for someone else entirely",
                 "user_id": f"other{i % 30}"}
                for i in range(1000)
            ])
        scoped = await seed(c, [
            {"content": f"entry {i} in the diary of the scoped person", "user_id": "target"}
            for i in range(40)
        ])
        async with chosen.engine.connect() as conn:
            await conn.execute(text("ANALYZE memories"))
        search_statements.clear()

        answer = await search(c, "zebra quokka", user_id="target", explain=True)

    assert len(answer["results"]) == 10
    assert {r["memory"]["user_id"] for r in answer["results"]} == {"target"}
    fusion = [r["explanation"]["fusion"] for r in answer["results"]]
    assert all(f["text_rank"] is None for f in fusion)
    assert all(f["vector_rank"] is not None for f in fusion)
    scoped_ids = {m["id"] for m in scoped}
    assert set(ids_of(answer)) <= scoped_ids

    # The path taken: rerun the search statement under EXPLAIN ANALYZE.
    [(statement, args)] = [(s, a) for s, a in search_statements if "vec_ann" in s]
    rows = await vector_branch_rows(chosen, statement, args)
    if path == "hnsw":
        assert rows["exact"] == 0, rows
        assert rows["ann"] >= 10, rows
        assert rows["hnsw_index"] >= 10, rows
    else:
        assert rows == {"exact": 40, "ann": 0, "hnsw_index": 0}


@pytest.mark.parametrize("scope", ["user", "tenant", "tenant holding most rows"])
async def test_a_large_scope_finds_its_text_matches_through_the_scoped_index(
    hnsw_resources: Resources, tenant: TenantKey, other_tenant: TenantKey,
    search_statements: list[tuple[str, tuple[Any, ...]]], scope: str,
) -> None:
    """A large scope's rare-term rows come out of ix_memories_tsv_scope with the tenant (and
    tenant/user) keys in its index condition, in the generic plan the service runs: the
    other users' and the other tenant's rows holding the term are dropped inside GIN and
    never read from the heap. A tenant holding most of the table
    (`search_text_keyless_share`, here 0 so as not to depend on what else the suite's
    table holds) is matched by the terms alone, and the other tenant's rows holding them,
    out of the index, are dropped on the heap. And the scope is known to be large from
    term_stats (the tenant's rows, a user's count), without reading or counting its rows."""
    user = "target" if scope == "user" else None
    keyless = scope == "tenant holding most rows"
    resources = replace(hnsw_resources, settings=hnsw_resources.settings.model_copy(
        update={"search_text_keyless_share": 0.0 if keyless else 1.0}))
    rows = [{"content": f"kayak trip number {i}", "user_id": "target" if i % 3 == 0
             else f"other{i}"} for i in range(30)]
    async with make_client(resources, other_tenant.headers) as c:
        others = await seed(c, [{"content": f"kayak trip {i}", "user_id": "target"}
                                for i in range(20)])
    async with make_client(resources, tenant.headers) as c:
        created = await seed(c, rows)
        # Enough other rows that scanning the table or a whole scope index costs more than
        # the GIN index, as in any real store (on a handful of rows the planner rightly
        # reads them all).
        for batch in range(4):
            await seed(c, [{"content": f"filler note {batch} {i}", "user_id": f"u{i % 50}"}
                           for i in range(1000)])
        await vacuum_analyze(resources)
        search_statements.clear()
        answer = await search(c, "kayak", user_id=user, top_k=50, explain=True)

    expected = {m["id"] for m in created if user is None or m["user_id"] == user}
    if user is not None:
        assert {r["memory"]["user_id"] for r in answer["results"]} == {user}
    assert not {m["id"] for m in others} & set(ids_of(answer))
    [(statement, args)] = [(s, a) for s, a in search_statements if "rare_terms" in s]
    plan, [(small, text_ids, *_)] = await generic_plan(resources, statement, args,
                                                      "rare_terms")
    assert small is False
    assert {str(i) for i in text_ids} == expected
    scans = [n for n in plan_nodes(plan) if n.get("Index Name") == "ix_memories_tsv_scope"]
    [scan] = [n for n in scans if n["Actual Loops"]]
    condition = scan["Index Cond"]
    assert "tsv @@" in condition
    assert ("(tenant_id)::text = " in condition) == (scope == "tenant")
    assert ("|| (user_id)::text" in condition) == (user is not None)
    if keyless:
        # The other tenant's 20 rows holding the term left the index too (and whatever
        # else of the suite's table holds it), and the heap kept only the tenant's.
        assert scan["Actual Rows"] >= len(expected) + len(others)
    else:
        # Only the scope's rows with the term left the index.
        assert scan["Actual Rows"] == len(expected)
    assert not [n for n in plan_nodes(plan) if n.get("Index Name") == "ix_memories_tsv"]
    [probe] = [n for n in plan_nodes(plan) if n.get("Subplan Name") == "CTE small"]
    reads = [n for n in plan_nodes(probe) if n.get("Relation Name") == "memories"
             or n.get("Index Name") in TENANT_LED]
    assert [n["Actual Loops"] for n in reads] == [0] * len(reads)
    if user is not None:
        assert reads  # the probe's scan of the user's rows is there, and never ran


@pytest.mark.parametrize("case", ["one category", "two categories", "user and category"])
async def test_a_category_filter_intersects_the_categories_and_the_terms_in_gin(
    hnsw_resources: Resources, tenant: TenantKey,
    search_statements: list[tuple[str, tuple[Any, ...]]], case: str,
) -> None:
    """With categories, a large scope's rare-term rows come out of ix_memories_tsv_scope
    with a tenant/category key and the terms in one index condition per category
    (migration 0012): only the listed categories' rows holding the term leave the index,
    where through the tenant's keys every row holding it was read to check its category.
    Without a scope column the categories' counts tell the scope is large, unread."""
    kinds = ["event", "task", "general"]
    rows = [{"content": f"kayak trip number {i}", "category": kinds[i % 3],
             "user_id": "target" if i % 2 == 0 else "other"} for i in range(30)]
    categories = ["task", "event"] if case == "two categories" else ["event"]
    user = "target" if case == "user and category" else None
    async with make_client(hnsw_resources, tenant.headers) as c:
        created = await seed(c, rows)
        for batch in range(4):
            await seed(c, [{"content": f"filler note {batch} {i}", "user_id": "target",
                            "category": kinds[i % 2]} for i in range(1000)])
        await vacuum_analyze(hnsw_resources)
        search_statements.clear()
        answer = await search(c, "kayak", categories=categories, user_id=user, top_k=50)

    expected = {m["id"] for m in created
                if m["category"] in categories and (user is None or m["user_id"] == user)}
    assert {r["memory"]["category"] for r in answer["results"]} <= set(categories)
    [(statement, args)] = [(s, a) for s, a in search_statements if "rare_terms" in s]
    plan, [(small, text_ids, *_)] = await generic_plan(hnsw_resources, statement, args,
                                                      "rare_terms")
    assert small is False
    assert {str(i) for i in text_ids} == expected
    scans = [n for n in plan_nodes(plan) if n.get("Index Name") == "ix_memories_tsv_scope"]
    assert len(scans) == len(categories)
    for scan in scans:
        condition = scan["Index Cond"]
        assert "tsv @@" in condition
        assert "|| (category)::text" in condition
        assert ("|| (user_id)::text" in condition) == (user is not None)
        assert "(tenant_id)::text = " not in condition
    # Only the listed categories' rows with the term left the index.
    assert sum(scan["Actual Rows"] for scan in scans) == len(expected)
    [probe] = [n for n in plan_nodes(plan) if n.get("Subplan Name") == "CTE small"]
    reads = [n for n in plan_nodes(probe) if n.get("Relation Name") == "memories"]
    assert reads
    # 4,010 rows of the categories are large by their counts in term_stats; a user and a
    # category together are counted on their rows.
    if user is None:
        assert [n["Actual Loops"] for n in reads] == [0] * len(reads)
    else:
        assert any(n["Actual Loops"] for n in reads)


async def test_a_tag_filter_over_a_large_tenant_intersects_the_tag_and_the_terms_in_gin(
    hnsw_resources: Resources, tenant: TenantKey,
    search_statements: list[tuple[str, tuple[Any, ...]]],
) -> None:
    """With tags and no scope column, a large tenant's rare-term rows come out of
    ix_memories_tenant_tags with both the tag and the terms in its index condition
    (migration 0011): only the tagged rows holding the term leave the index, where through
    the tenant's full-text keys every row holding the term was read to check its tags.
    And the tag's count tells the scope is large without reading its rows."""
    rows = [{"content": f"kayak trip number {i}", "tags": ["trip"] if i % 3 == 0 else ["x"]}
            for i in range(30)]
    async with make_client(hnsw_resources, tenant.headers) as c:
        created = await seed(c, rows)
        for batch in range(4):
            await seed(c, [{"content": f"filler note {batch} {i}", "tags": ["trip"]}
                           for i in range(1000)])
        async with hnsw_resources.engine.connect() as conn:
            await conn.execute(text("ANALYZE memories"))
        search_statements.clear()
        answer = await search(c, "kayak", tags=["trip"], top_k=50)

    expected = {m["id"] for m in created if m["tags"] == ["trip"]}
    # The text list's rows, and the vector list's (tagged fillers among them).
    assert expected <= set(ids_of(answer))
    [(statement, args)] = [(s, a) for s, a in search_statements if "rare_terms" in s]
    plan, [(small, text_ids, *_)] = await generic_plan(hnsw_resources, statement, args,
                                                      "rare_terms")
    assert small is False
    assert {str(i) for i in text_ids} == expected
    [scan] = [n for n in plan_nodes(plan)
              if n.get("Index Name") == "ix_memories_tenant_tags" and "tsv @@" in
              n.get("Index Cond", "")]
    assert "tenant_tags(" in scan["Index Cond"]
    assert scan["Actual Rows"] == len(expected)
    assert not [n for n in plan_nodes(plan)
                if n.get("Index Name") in {"ix_memories_tsv_scope", "ix_memories_tsv"}]
    # One tag on 4,010 rows is large by its count in term_stats: the probe that counts a
    # scope up to `search_exact_below` rows never read them.
    probes = [n for n in plan_nodes(plan) if n.get("Index Name") == "ix_memories_tenant_tags"
              and "tsv @@" not in n.get("Index Cond", "")]
    assert probes
    assert [n["Actual Loops"] for n in probes] == [0] * len(probes)


@pytest.mark.parametrize("scope", ["user", "user and agent", "tenant"])
async def test_a_word_common_in_the_tenant_still_finds_a_users_rows(
    resources: Resources, tenant: TenantKey, scope: str,
) -> None:
    """`search_text_max_df` bounds the postings the GIN scan reads, and for a user's scope
    those are the tenant's postings times the user's share: 'kayak', in far more tenant
    rows than the bound, still finds the user's three rows holding it. Across the tenant
    the bound holds as it is, and so it does for a user and agent (the agent is checked
    on the heap, so the user's share is no bound on the rows read there)."""
    settings = resources.settings.model_copy(update={
        "search_exact_below": SMALL_EXACT_BELOW, "search_text_max_df": 20})
    large = replace(resources, settings=settings)
    async with make_client(large, tenant.headers) as c:
        await seed(c, [{"content": f"kayak trip number {i}", "user_id": f"other{i % 40}"}
                       for i in range(200)])
        await seed(c, [{"content": f"filler note {i}", "user_id": f"other{i % 40}"}
                       for i in range(300)])
        target = await seed(c, [
            {"content": f"note {i} " + ("about the red kayak" if i < 3 else "on groceries"),
             "user_id": "target", "agent_id": "helper"} for i in range(12)])
        async with large.engine.connect() as conn:
            await conn.execute(text("ANALYZE memories"))
        body: dict[str, Any] = {"top_k": 50, "explain": True}
        if scope != "tenant":
            body["user_id"] = "target"
        if scope == "user and agent":
            body["agent_id"] = "helper"
        answer = await search(c, "kayak", **body)

    matched = {mid for mid, r in by_id(answer).items()
               if r["explanation"]["fusion"]["text_rank"] is not None}
    if scope == "user":
        assert matched == {m["id"] for m in target[:3]}
    else:
        assert matched == set()


@contextlib.asynccontextmanager
async def beside_tiny_tenants(resources: Resources, tenant: TenantKey,
                              tags: list[str] | None = None) -> AsyncIterator[None]:
    """300 one-row tenants (a copy of one of `tenant`'s vectors; `tags` if given) beside
    `tenant`, the table analysed: statistics then make every tenant look tiny to a generic
    plan. Deleted when the block ends."""
    prefix = f"tiny-{uuid.uuid4().hex[:12]}-"
    try:
        async with resources.engine.begin() as conn:
            await conn.execute(text(
                "INSERT INTO tenants (id, name) SELECT gen_random_uuid(), :prefix || g"
                " FROM generate_series(1, 300) g"), {"prefix": prefix})
            await conn.execute(text(
                "INSERT INTO memories (tenant_id, id, content, tags, embedding)"
                " SELECT t.id, gen_random_uuid(), 'a kayak of my own',"
                " CAST(:tags AS text[]), m.embedding"
                " FROM tenants t, (SELECT embedding FROM memories WHERE tenant_id = :tenant"
                "  LIMIT 1) m WHERE t.name LIKE :prefix || '%'"),
                {"prefix": prefix, "tenant": tenant.tenant_id, "tags": tags or []})
            await conn.execute(text("ANALYZE memories"))
        yield
    finally:
        async with resources.engine.begin() as conn:
            await conn.execute(text("DELETE FROM tenants WHERE name LIKE :prefix || '%'"),
                               {"prefix": prefix})


# Every btree whose first column is tenant_id (a scope's, the listing's, the primary key).
TENANT_LED = {"pk_memories", "ix_memories_tenant_created", "ix_memories_tenant_category",
              "ix_memories_tenant_user_id_created", "ix_memories_tenant_agent_id_created",
              "ix_memories_tenant_session_id_created",
              "ix_memories_tenant_namespace_created"}


@pytest.mark.parametrize("categories", [None, ["event"]])
async def test_a_tag_filter_reads_the_tags_index_keyed_by_tenant_among_many_tenants(
    resources: Resources, tenant: TenantKey, search_statements: list[tuple[str, tuple[Any, ...]]],
    categories: list[str] | None,
) -> None:
    """A tag's rows come out of ix_memories_tenant_tags, whose keys hold the tenant, in the
    generic plans the service runs, even where statistics make every tenant look tiny (many
    one-row tenants, some with the same tag). There the plan ANDed in a tenant-led btree,
    which reads every index entry of the tenant whatever the tag."""
    rows = [{"content": f"kayak trip number {i}", "category": "event",
             "tags": ["rare"] if i % 60 == 0 else [f"t{i % 9}"]} for i in range(600)]
    async with make_client(resources, tenant.headers) as c:
        created = await seed(c, rows)
        async with beside_tiny_tenants(resources, tenant, tags=["rare"]):
            search_statements.clear()
            answer = await search(c, "kayak trip", tags=["rare"], categories=categories,
                                  top_k=20)
            plans = [await generic_plan(resources, s, a, marker)
                     for marker in ("rare_terms", "vec_ann")
                     for s, a in search_statements if marker in s]

    tagged = {m["id"] for m in created if m["tags"] == ["rare"]}
    assert len(tagged) == 10
    assert set(ids_of(answer)) == tagged
    assert len(plans) == 2
    for plan, _ in plans:
        scans = [n for n in plan_nodes(plan) if n.get("Index Name")]
        assert not [n["Index Name"] for n in scans if n["Index Name"] in TENANT_LED], scans
        # Each scan of it that ran (the text statement counts the scope, then matches in
        # it; the large scope's rare-term branch, through it too, does not run for 10
        # rows) found exactly the tenant's tagged rows.
        found = [n["Actual Rows"] for n in scans
                 if n["Index Name"] == "ix_memories_tenant_tags" and n["Actual Loops"]]
        assert found, scans
        assert set(found) == {len(tagged)}, scans


@pytest.mark.parametrize("path", ["exact", "hnsw"])
async def test_the_listed_rows_are_read_by_id_however_few_rows_a_tenant_seems_to_hold(
    resources: Resources, hnsw_resources: Resources, tenant: TenantKey,
    search_statements: list[tuple[str, tuple[Any, ...]]], path: str,
) -> None:
    """The vector statement reads the rows of both lists by id, one lookup each,
    in the generic plan the service runs, even when statistics make every tenant look
    tiny (here: many one-row tenants; a table never analysed does too). There a plain
    join scanned or hashed all of the tenant's rows, 27 ms at 2,000 rows."""
    chosen = resources if path == "exact" else hnsw_resources
    async with make_client(chosen, tenant.headers) as c:
        # Kayak in half the rows: a full-text match (a word every row held would tie none).
        await seed(c, [{"content": f"{'kayak' if i % 2 else 'canoe'} trip number {i} along "
                                   "the coast", "user_id": f"u{i % 7}"} for i in range(150)])
        async with beside_tiny_tenants(chosen, tenant):
            search_statements.clear()
            answer = await search(c, "kayak trip", top_k=20)
            # On the HNSW path the tenant is a sliver of the suite's shared index (beside
            # 300 identical vectors), and the scan sometimes came back short, which re-runs
            # the statement exact, as it should: every vector statement that ran is checked.
            ran = [(s, a) for s, a in search_statements if "vec_ann" in s]
            plans = [await generic_plan(chosen, s, a, "vec_ann") for s, a in ran]

    assert len(answer["results"]) == 20
    assert 1 <= len(plans) <= (1 if path == "exact" else 2)
    for plan, rows in plans:
        assert len(rows) > 20  # the union of both lists, each row once
        reads = [n for n in plan_nodes(plan, into_ctes=False)
                 if n.get("Relation Name") == "memories"]
        assert [(n["Node Type"], n.get("Index Name")) for n in reads] == [
            ("Index Scan", "ix_memories_id")], reads
        [lookup] = reads
        assert lookup["Actual Loops"] == len(rows)
        assert lookup["Actual Rows"] == 1


@pytest.mark.parametrize("path", ["exact", "hnsw"])
async def test_top_k_above_the_vector_depth_is_still_filled(
    resources: Resources, tenant: TenantKey, path: str,
) -> None:
    """The vector list is at least top_k deep: a query that no row matches lexically,
    asking for more results than `search_vector_candidates`, gets top_k of them."""
    settings = resources.settings.model_copy(update={
        "search_vector_candidates": 5,
        "search_exact_below": 1000 if path == "exact" else SMALL_EXACT_BELOW,
        "search_exact_cost_ratio": 0,
    })
    shallow = replace(resources, settings=settings)
    async with make_client(shallow, tenant.headers) as c:
        await seed(c, [{"content": f"diary entry {i}", "user_id": "u1"} for i in range(40)])

        answer = await search(c, "zebra quokka", user_id="u1", top_k=25, explain=True)

    assert len(answer["results"]) == 25
    # Every row is as far from "zebra quokka" (the test embedder's vectors share none of
    # its words), so all share one place: each result came by the vector list.
    assert len({r["explanation"]["fusion"]["vector_rank"] for r in answer["results"]}) == 1


async def test_a_scope_the_hnsw_scan_gives_up_on_is_ranked_exactly(
    resources: Resources, tenant: TenantKey,
) -> None:
    """A filtered HNSW scan stops after hnsw.max_scan_tuples index tuples, so a scope that
    is a sliver of the index can come back short. The search then runs the vector
    statement again on the exact branch: top_k is still filled, in distance order."""
    settings = resources.settings.model_copy(update={
        "search_exact_below": SMALL_EXACT_BELOW, "search_exact_cost_ratio": 0,
        "hnsw_ef_search": 1,
        "hnsw_max_scan_tuples": 1,
    })
    # Its own pool: the scan limits are the connections' settings.
    stingy = replace(resources, settings=settings, reader=None, background=[])
    reader = await stingy.search_reader()
    fetch = reader.fetch
    vector_rows: list[int] = []

    async def recording(query: str, *args: Any) -> Any:
        rows = await fetch(query, *args)
        if "vec_ann" in query:
            vector_rows.append(sum(1 for r in rows if r["vector_similarity"] is not None))
        return rows

    reader.fetch = recording  # type: ignore[method-assign]
    try:
        async with make_client(stingy, tenant.headers) as c:
            # u1's 40 rows, a sixth of the tenant's.
            await seed(c, [{"content": f"diary entry {i}", "user_id": "u1"} for i in range(40)]
                       + [{"content": f"log line {i}", "user_id": "crowd"} for i in range(200)])
            answer = await search(c, "zebra quokka", user_id="u1", top_k=25, explain=True)
    finally:
        await reader.close()
    async with make_client(resources, tenant.headers) as c:  # 40 rows: exact from the start
        exact = await search(c, "zebra quokka", user_id="u1", top_k=25)

    # top_k 25 asks for 50 vector rows: HNSW gave up short of u1's 40, the exact branch
    # ranked them all.
    assert len(vector_rows) == 2, vector_rows
    assert vector_rows[0] < 40 == vector_rows[1], vector_rows
    assert len(answer["results"]) == 25
    # Every row is as far from "zebra quokka" (the test embedder's vectors share none of
    # its words), so all share one place: each result came by the vector list.
    assert len({r["explanation"]["fusion"]["vector_rank"] for r in answer["results"]}) == 1
    assert ids_of(answer) == ids_of(exact)


@pytest.mark.parametrize("ratio", [9.0, 0.0])
async def test_a_tenant_that_is_a_sliver_of_the_index_is_ranked_exactly(
    resources: Resources, tenant: TenantKey, other_tenant: TenantKey,
    search_statements: list[tuple[str, tuple[Any, ...]]], ratio: float,
) -> None:
    """Over `search_exact_below` rows, a tenant still gets the exact ranking when it holds
    so small a share of the HNSW index that the filtered scan would cost more than reading
    the tenant (app/search/vector_path.py); a cost ratio of 0 turns that off."""
    settings = resources.settings.model_copy(update={
        "search_exact_below": SMALL_EXACT_BELOW, "search_exact_cost_ratio": ratio})
    chosen = replace(resources, settings=settings)
    async with make_client(chosen, other_tenant.headers) as c:
        await seed(c, [{"content": f"log line {i}"} for i in range(300)])
    async with make_client(chosen, tenant.headers) as c:
        mine = await seed(c, [{"content": f"diary entry {i}", "user_id": "u1"}
                              for i in range(30)])
    index_rows = await table_rows(resources)
    assert index_rows >= 330  # 30 rows of 330+: 30 * 30 < 9 * 20 * 330

    async with make_client(chosen, tenant.headers) as c:
        search_statements.clear()
        answer = await search(c, "zebra quokka", top_k=10)  # the whole tenant

    assert len(answer["results"]) == 10
    assert set(ids_of(answer)) <= {m["id"] for m in mine}
    vector = [(s, a) for s, a in search_statements if "vec_ann" in s]
    rows = await vector_branch_rows(chosen, *vector[0])
    if ratio:
        assert len(vector) == 1
        assert rows == {"exact": 30, "ann": 0, "hnsw_index": 0}, rows
    else:
        assert rows["exact"] == 0, rows
        assert rows["hnsw_index"] > 0, rows


async def search_across_the_crossover(
    resources: Resources, tenant: TenantKey,
    search_statements: list[tuple[str, tuple[Any, ...]]], path: str, **body: Any,
) -> dict[str, Any]:
    """`body` searched (top 10) with a cost ratio that puts the exact/HNSW crossover at 100
    rows for k 20, over a tenant of 330 rows of which "few" (30) are under it and the
    tenant and "crowd" (300) over; the vector statement checked to have taken `path`."""
    index_rows = await table_rows(resources)
    assert index_rows >= 330
    settings = resources.settings.model_copy(update={
        "search_exact_below": SMALL_EXACT_BELOW,
        "search_exact_cost_ratio": 100 * 100 / (20 * index_rows)})
    chosen = replace(resources, settings=settings)

    async with make_client(chosen, tenant.headers) as c:
        search_statements.clear()
        answer = await search(c, "zebra quokka", top_k=10, **body)

    assert len(answer["results"]) == 10
    vector = [(s, a) for s, a in search_statements if "vec_ann" in s]
    rows = await vector_branch_rows(chosen, *vector[0])
    if path == "exact":
        assert len(vector) == 1
        assert rows == {"exact": 30, "ann": 0, "hnsw_index": 0}, rows
    else:
        assert rows["exact"] == 0, rows
        assert rows["hnsw_index"] > 0, rows
    return answer


@pytest.mark.parametrize(("field", "value", "path"), [
    ("tags", ["few"], "exact"), ("tags", ["few", "crowd"], "exact"),
    ("tags", ["crowd"], "hnsw"), ("categories", ["few"], "exact"),
    ("categories", ["few", "crowd"], "hnsw"),
])
async def test_a_tag_or_category_that_is_a_sliver_of_a_large_tenant_is_ranked_exactly(
    resources: Resources, tenant: TenantKey,
    search_statements: list[tuple[str, tuple[Any, ...]]], field: str, value: list[str],
    path: str,
) -> None:
    """A tag's or a category's rows are bounded by the tenant's counts of them (term_stats):
    a filter leaving fewer rows than the crossover is ranked exactly in a tenant too large
    for it (all tags must match: the rarest bounds; any category may: they add up)."""
    async with make_client(resources, tenant.headers) as c:
        await seed(c, [{"content": f"diary entry {i}", "tags": ["few", "crowd"],
                        "category": "few"} for i in range(30)]
                   + [{"content": f"log line {i}", "tags": ["crowd"], "category": "crowd"}
                      for i in range(300)])
    answer = await search_across_the_crossover(resources, tenant, search_statements, path,
                                               **{field: value})
    if path == "exact":
        assert {r["memory"]["category"] for r in answer["results"]} == {"few"}


@pytest.mark.parametrize("column", ["user_id", "session_id"])
@pytest.mark.parametrize(("scope", "path"), [("few", "exact"), ("crowd", "hnsw")])
async def test_a_scope_that_is_a_sliver_of_a_large_tenant_is_ranked_exactly(
    resources: Resources, tenant: TenantKey,
    search_statements: list[tuple[str, tuple[Any, ...]]], column: str, scope: str, path: str,
) -> None:
    """Within a tenant too large for the exact ranking, a user (or agent, session,
    namespace) scope is counted (its entries in that column's btree, up to the crossover)
    and ranked exactly when it is small enough; a scope with more rows than the crossover
    goes through HNSW."""
    async with make_client(resources, tenant.headers) as c:
        await seed(c, [{"content": f"diary entry {i}", column: "few"} for i in range(30)]
                   + [{"content": f"log line {i}", column: "crowd"} for i in range(300)])
    answer = await search_across_the_crossover(resources, tenant, search_statements, path,
                                               **{column: scope})
    assert {r["memory"][column] for r in answer["results"]} == {scope}


async def test_a_month_spelt_with_a_look_alike_letter_is_no_date_and_no_error(
    client: httpx.AsyncClient,
) -> None:
    """An exploratory probe: "8 sep 2023" spelt with a long s matched the month pattern case-blind
    and was then looked up as it was spelt, and the search answered 500."""
    await seed(client, [{"content": "The user moved to Porto in September", "user_id": "u1"}])
    for query in ("what happened on 8 \u017fep 2023", "on 5 Apr\u0130l 2023"):
        answer = await search(client, query, user_id="u1")
        assert answer["query_style"] == "regular"


@pytest.mark.parametrize(("content", "query"), [
    # Greek: a capital sigma lowered one letter at a time is the medial one, never the
    # final, so the word in capitals matched neither way.
    ("Meeting with \u039a\u03a9\u03a3\u03a4\u0391\u03a3 tomorrow at the office",
     "\u039a\u03c9\u03c3\u03c4\u03b1\u03c2"),
    ("Meeting with \u039a\u03c9\u03c3\u03c4\u03b1\u03c2 tomorrow at the office",
     "\u039a\u03a9\u03a3\u03a4\u0391\u03a3"),
    # German: the sharp s, small and capital, against ss.
    ("Treffen in der GROSSSTRASSE 5", "Gro\u00dfstra\u00dfe"),
    ("Treffen in der Gro\u00dfstra\u00dfe 5", "GROSSSTRASSE"),
    ("Treffen in der STRA\u1e9eE 5", "Strasse"),
    # A soft hyphen or a zero-width character inside a word (text copied from the web)
    # made it two words.
    ("The pass\u00adword was rotated", "password"),
    ("The pass\u200bword was rotated", "password"),
    ("The pass\u200dword was rotated", "password"),
    ("The password was rotated", "pass\u200bword"),
    # Letters Unicode 15 added, whose compatibility form Python's older tables did not
    # know: the query is read by the database's tables, as the content is.
    ("code \U0001e030\U0001e031\U0001e032 here", "\U0001e030\U0001e031\U0001e032"),
])
async def test_a_word_matches_across_case_folding_and_invisible_characters(
    client: httpx.AsyncClient, content: str, query: str,
) -> None:
    """An exploratory probe found each of these matching only by the vector list, or not
    at all (migration 0032)."""
    stored = await seed(client, [{"content": content, "user_id": "u1"},
                                 {"content": "Unrelated filler about gardening", "user_id": "u1"}])

    answer = await search(client, query, user_id="u1", explain=True)

    first = answer["results"][0]
    assert first["memory"]["id"] == stored[0]["id"], query
    assert first["explanation"]["fusion"]["text_rank"] == 1, query
    assert first["memory"]["content"] == content  # stored as sent


async def test_a_word_matches_its_other_unicode_spellings_by_full_text(
    client: httpx.AsyncClient,
) -> None:
    """An exploratory probe: "finance" found nothing of a PDF's "\ufb01nance" (a ligature),
    an NFC "Zoë" no decomposed one, nor "API" full-width letters; content and query are
    both matched in Unicode's compatibility normal form (migration 0031)."""
    stored = await seed(client, [
        {"content": "The \ufb01nance report is due on Friday", "user_id": "u1"},
        {"content": "Zoe\u0308 Bronte\u0308 lives in Besanc\u0327on", "user_id": "u1"},
        {"content": "Rotate the \uff21\uff30\uff29 secret monthly", "user_id": "u1"},
        {"content": "The garden needs water", "user_id": "u1"},
    ])
    ligature, decomposed, wide = (m["id"] for m in stored[:3])
    for query, expected in (("finance", ligature), ("Zo\u00eb Bront\u00eb", decomposed),
                            ("Zoe\u0308", decomposed), ("API secret", wide)):
        answer = await search(client, query, user_id="u1", explain=True)
        first = answer["results"][0]
        assert first["memory"]["id"] == expected, query
        assert first["explanation"]["fusion"]["text_rank"] == 1, query
    # The content itself is returned as it was sent.
    assert stored[0]["content"] == "The \ufb01nance report is due on Friday"
