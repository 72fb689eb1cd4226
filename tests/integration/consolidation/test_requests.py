"""What a run is refused for (422s naming the field), and what it picks as candidates."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from app.resources import Resources
from tests.conftest import TenantKey, make_client, sample
from tests.fakes.llm_server import FakeLLMServer
from tests.integration.consolidation.conftest import (
    BASE_TIME,
    consolidate,
    get_memory,
    memory,
    seed,
)


def fields(resp: httpx.Response) -> list[str]:
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    return [e["field"] for e in resp.json()["errors"]]


async def test_a_request_with_no_scope_and_no_criteria_is_refused(
    client: httpx.AsyncClient,
) -> None:
    await seed(client, [memory(f"note {i}", i) for i in range(4)])

    # An empty list names nothing, as in search (categories: [] was a 422 of its own).
    for body in ({}, {"strategy": "simple", "mode": "archive"}, {"max_importance": 1.0},
                 {"tags": []}, {"categories": []}, {"tags": [], "categories": []}):
        resp = await client.post("/v1/consolidations", json=body)
        assert fields(resp) == ["body"], body
        assert "whole tenant" in resp.json()["detail"]
    # Nothing was recorded or folded.
    assert (await client.get("/v1/consolidations")).json()["items"] == []
    # Beside a scope, an empty list filters nothing.
    planned = await consolidate(client, user_id="u1", categories=[], tags=[], dry_run=True)
    assert planned["candidates"] == 4


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"strategy": "clever"}, "strategy"),
        ({"mode": "shred"}, "mode"),
        ({"group_threshold": 1}, "group_threshold"),
        ({"surprise": True}, "surprise"),
        ({"op": {"name": "poetry"}}, "op"),
        ({"op": {"name": "concatenate", "max_chars": 10}}, "op.max_chars"),
        ({"op": {"name": "extractive", "bogus": 1}}, "op.bogus"),
        # A key named as the tag is still the key refused, not the tag's segment.
        ({"op": {"name": "concatenate", "concatenate": 1}}, "op.concatenate"),
        # The path of the field sent: pydantic puts the variant's tag in between.
        ({"selector": {"name": "similarity_cluster", "max_distance": 3}},
         "selector.max_distance"),
        ({"older_than_seconds": 0}, "older_than_seconds"),
        ({"max_importance": 2}, "max_importance"),
        ({"metadata": ["doc"]}, "metadata"),
        # A moment without a zone is ambiguous.
        ({"created_after": "2026-01-01T00:00:00"}, "created_after"),
        ({"created_before": "yesterday"}, "created_before"),
        ({"created_before": 0}, "created_before"),  # not a Unix time, as lax parsing would
        ({"async": "later"}, "async"),
        # JSON types, not what lax parsing could make of them.
        ({"async": 1}, "async"),
        ({"dry_run": "true"}, "dry_run"),
        ({"include_summaries": 0}, "include_summaries"),
        ({"older_than_seconds": True}, "older_than_seconds"),
        ({"group_threshold": "3"}, "group_threshold"),
        ({"max_importance": True}, "max_importance"),
        ({"selector": {"name": "similarity_cluster", "by_category": "no"}},
         "selector.by_category"),
        ({"op": {"name": "abstractive", "max_concurrency": True}},
         "op.max_concurrency"),
    ],
)
async def test_bad_parameters_are_422_naming_the_field(
    client: httpx.AsyncClient, body: dict[str, Any], field: str
) -> None:
    resp = await client.post("/v1/consolidations", json={"user_id": "u1", **body})
    assert fields(resp) == [field]


async def test_a_strategy_that_needs_an_llm_is_refused_when_none_is_configured(
    client: httpx.AsyncClient,
) -> None:
    for body, field in (({"strategy": "llm"}, "strategy"), ({"strategy": "dual_mode"}, "strategy"),
                        ({"op": {"name": "abstractive"}}, "op")):
        resp = await client.post("/v1/consolidations", json={"user_id": "u1", **body})
        assert fields(resp) == [field]
        assert "needs an LLM and none is configured" in resp.json()["detail"]


async def test_simple_and_extractive_work_without_an_llm(client: httpx.AsyncClient) -> None:
    await seed(client, [memory(f"Met Bob on day {i}.", i) for i in range(3)])
    before = {s: sample("engram_consolidation_runs_total", trigger="api", status=s)
              for s in ("planned", "succeeded")}

    planned = await consolidate(client, user_id="u1", op={"name": "extractive"}, dry_run=True)
    result = await consolidate(client, user_id="u1", op={"name": "extractive"})

    assert planned["status"] == "planned"
    assert result["status"] == "succeeded"
    assert [g["mode"] for g in result["groups"]] == ["extractive"]
    assert {s: sample("engram_consolidation_runs_total", trigger="api", status=s) - before[s]
            for s in before} == {"planned": 1, "succeeded": 1}


async def test_every_criterion_is_a_predicate_of_the_candidate_query(
    client: httpx.AsyncClient,
) -> None:
    items = [memory(f"keep {i}", i, tags=["a", "b"], category="c1", importance=0.3)
             for i in range(3)]
    items += [
        memory("wrong tag", 10, tags=["a"], category="c1", importance=0.3),
        memory("wrong category", 11, tags=["a", "b"], category="c2", importance=0.3),
        memory("too important", 12, tags=["a", "b"], category="c1", importance=0.9),
        memory("too recent", 13, tags=["a", "b"], category="c1", importance=0.3,
               created_at=datetime.now(UTC).isoformat()),
        memory("expired", 14, tags=["a", "b"], category="c1", importance=0.3,
               expires_at="2020-01-01T00:00:00Z"),
        memory("other scope", 15, tags=["a", "b"], category="c1", importance=0.3,
               user_id="u2"),
    ]
    ids = await seed(client, items)

    result = await consolidate(client, user_id="u1", tags=["a", "b"], categories=["c1"],
                               max_importance=0.5, older_than_seconds=60, dry_run=True)

    assert result["candidates"] == 3
    (group,) = result["groups"]
    assert {group["kept_id"], *group["removed_ids"]} == set(ids[:3])


async def test_metadata_chooses_a_documents_memories_and_their_summary_keeps_it(
    client: httpx.AsyncClient,
) -> None:
    """A run over one document's memories: its summary holds the metadata every source
    shares (the filter's key among them, not a key they disagree on), so a search or a
    listing filtered by that document finds the summary of what was archived."""
    shared = {"doc": "d1", "project": {"name": "apollo"}}
    ids = await seed(client, [
        memory(f"apollo design decision {i}", i, metadata={**shared, "page": i})
        for i in range(3)
    ] + [memory("apollo decision from another document", 5, metadata={"doc": "d2"}),
         memory("apollo decision with no document", 6)])

    result = await consolidate(client, metadata={"doc": "d1"}, mode="archive")

    (group,) = result["groups"]
    assert {group["kept_id"], *group["removed_ids"]} == set(ids[:3])
    assert result["request"]["metadata"] == {"doc": "d1"}
    summary = await get_memory(client, group["summary_id"])
    assert summary["metadata"] == shared
    listed = (await client.get("/v1/memories", params={
        "metadata": '{"doc": "d1"}', "fact_role": "summary"})).json()["items"]
    assert [m["id"] for m in listed] == [group["summary_id"]]
    found = await client.post("/v1/search", json={
        "query": "apollo design decision", "metadata": {"doc": "d1"}, "top_k": 100})
    assert found.status_code == 200, found.text
    assert group["summary_id"] in [r["memory"]["id"] for r in found.json()["results"]]
    # The other documents' memories were not candidates.
    for memory_id in ids[3:]:
        assert (await get_memory(client, memory_id))["archived_at"] is None


async def test_a_creation_window_chooses_the_memories_made_inside_it(
    client: httpx.AsyncClient,
) -> None:
    """The window alone names a run (no scope: it is a criterion), and its bounds are
    exclusive, as the listing's and the search's: a memory made at a bound is outside."""
    ids = await seed(client, [memory(f"standup note {i}", i, user_id="standups")
                              for i in range(10, 16)])
    after = (BASE_TIME + timedelta(minutes=10)).isoformat()
    before = (BASE_TIME + timedelta(minutes=15)).isoformat()

    result = await consolidate(client, created_after=after, created_before=before,
                               mode="archive")

    (group,) = result["groups"]
    assert {group["kept_id"], *group["removed_ids"]} == set(ids[1:5])
    assert result["request"]["created_after"] == after.replace("+00:00", "Z")
    for memory_id in (ids[0], ids[5]):
        assert (await get_memory(client, memory_id))["archived_at"] is None
    # One bound is enough; a window with nothing in it folds nothing.
    planned = await consolidate(
        client, created_before=(BASE_TIME + timedelta(minutes=11)).isoformat(), dry_run=True)
    # Its one match is too few to fold, so it is no candidate either.
    assert (planned["candidates"], planned["remainder"]) == (0, 0)
    assert planned["groups"] == []
    empty = await consolidate(client, created_after=before, created_before=after)
    assert (empty["candidates"], empty["groups"]) == (0, [])


async def test_an_empty_metadata_filter_is_no_criterion(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/consolidations", json={"metadata": {}})

    assert fields(resp) == ["body"]
    assert "metadata" in resp.json()["detail"]


async def test_a_dry_run_reports_the_plan_and_changes_nothing(
    client: httpx.AsyncClient,
) -> None:
    ids = await seed(client, [memory(f"note {i}", i, importance=0.1 * i) for i in range(4)])

    result = await consolidate(client, user_id="u1", dry_run=True)

    assert result["status"] == "planned"
    assert result["dry_run"] is True
    assert result["groups"] == [{
        "category": "general", "kept_id": ids[3], "summary_id": None,
        "scope": {"user_id": "u1", "agent_id": None, "session_id": None, "namespace": None},
        "removed_ids": ids[:3], "folded_ids": ids[:3], "mode": "concatenate",
        "outcome": "planned", "error": None, "detail": None,
    }]
    assert (result["consolidated"], result["created"], result["deleted"]) == (0, 0, 0)
    assert result["progress"] == {"groups_done": 0, "groups_total": 1}
    for memory_id in ids:
        assert (await get_memory(client, memory_id))["archived_at"] is None
    listed = (await client.get("/v1/memories", params={"user_id": "u1"})).json()["items"]
    assert len(listed) == 4
    assert all(m["fact_role"] == "fact" for m in listed)
    # The plan is recorded and readable later.
    again = (await client.get(f"/v1/consolidations/{result['id']}")).json()
    assert again["groups"] == result["groups"]


@pytest.fixture
async def small_scan_client(resources: Resources,
                            tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    settings = resources.settings.model_copy(update={"consolidation_scan_limit": 4})
    async with make_client(dataclasses.replace(resources, settings=settings),
                           tenant.headers) as c:
        yield c


async def test_the_scan_limit_caps_real_matches_and_reports_the_remainder(
    small_scan_client: httpx.AsyncClient,
) -> None:
    client = small_scan_client
    ids = await seed(client, [memory(f"note {i}", i) for i in range(7)]
                     + [memory("other category", 0, category="x")])

    first = await consolidate(client, user_id="u1", categories=["general"])

    # The oldest four matches, then the rest (the non-matching row never counted).
    assert (first["candidates"], first["remainder"]) == (4, 3)
    assert first["groups"][0]["removed_ids"] == ids[:3]
    second = await consolidate(client, user_id="u1", categories=["general"])
    # The first run's kept entry is a candidate again, now beside the newer ones.
    assert (second["candidates"], second["remainder"]) == (4, 0)
    assert second["groups"][0]["kept_id"] == ids[6]
    assert second["groups"][0]["removed_ids"] == ids[3:6]


async def test_matches_that_can_never_fold_do_not_hold_the_scan_window(
    small_scan_client: httpx.AsyncClient,
) -> None:
    # Found by an exploratory probe: the window was the oldest matches, so once scopes
    # (or categories) too small to fold were the oldest, every run read them alone and
    # folded nothing, for good.
    client = small_scan_client
    singles = await seed(client, [memory(f"lone note {i}", i, agent_id=f"a{i}", tags=["t"])
                                  for i in range(4)]
                         + [memory(f"lone {c} note", 4 + n, category=c, agent_id="d",
                                   tags=["t"]) for n, c in enumerate(("x", "y", "z"))])
    foldable = await seed(client, [memory(f"note {i}", 10 + i, agent_id="d", tags=["t"])
                                   for i in range(3)])

    for _ in range(2):
        plan = await consolidate(client, tags=["t"], dry_run=True)
        # Only the three notes of one scope and category are a window's worth.
        assert (plan["candidates"], plan["remainder"]) == (3, 0)
    run = await consolidate(client, tags=["t"])

    assert [(g["kept_id"], g["removed_ids"]) for g in run["groups"]] == [
        (foldable[2], foldable[:2])]
    for memory_id in singles:
        assert (await client.get(f"/v1/memories/{memory_id}")).json()["archived_at"] is None
    # The kept entry is alone in its partition now: nothing is left to fold.
    after = await consolidate(client, tags=["t"])
    assert (after["candidates"], after["remainder"], after["groups"]) == (0, 0, [])


async def test_a_selector_across_categories_folds_small_categories_together(
    small_scan_client: httpx.AsyncClient,
) -> None:
    client = small_scan_client
    ids = await seed(client, [memory(f"note {c}", n, category=c)
                              for n, c in enumerate(("x", "y", "z"))])

    by_category = await consolidate(client, user_id="u1", dry_run=True, selector={
        "name": "similarity_cluster", "max_distance": 1.0})
    across = await consolidate(client, user_id="u1", dry_run=True, selector={
        "name": "similarity_cluster", "max_distance": 1.0, "by_category": False})

    assert (by_category["candidates"], by_category["groups"]) == (0, [])
    assert across["candidates"] == 3
    [group] = across["groups"]
    assert sorted([group["kept_id"], *group["removed_ids"]]) == sorted(ids)


async def test_a_dry_run_says_what_an_ops_length_limit_leaves_for_the_next_run(
    client: httpx.AsyncClient,
) -> None:
    """Found by an exploratory probe: the dry run listed the whole group as removed (29),
    while the run, its summary capped, folded 13."""
    await seed(client, [memory(f"note {i}: " + "word " * 60, i) for i in range(12)])
    op = {"name": "concatenate", "max_chars": 1000}

    plan = await consolidate(client, user_id="u1", dry_run=True, op=op)
    run = await consolidate(client, user_id="u1", op=op)

    [planned], [done] = plan["groups"], run["groups"]
    assert 0 < len(done["removed_ids"]) < 11
    assert planned["removed_ids"] == done["removed_ids"]
    assert planned["folded_ids"] == done["folded_ids"]
    assert (planned["mode"], planned["outcome"]) == ("concatenate", "planned")
    assert plan["consolidated"] == 0


async def test_a_dry_run_says_skipped_for_a_group_the_run_would_skip(
    client: httpx.AsyncClient,
) -> None:
    """Found by an exploratory probe: a group no entry of which fits the op's limit read
    `planned` in the dry run (with `error: op_nothing_fits`), `skipped` in the run; and a
    dry run's `total_ms` was null."""
    await seed(client, [memory(f"note {i}: " + "word " * 300, i) for i in range(4)])
    op = {"name": "concatenate", "max_chars": 1000}

    plan = await consolidate(client, user_id="u1", dry_run=True, op=op)
    run = await consolidate(client, user_id="u1", op=op)

    [planned], [done] = plan["groups"], run["groups"]
    assert (planned["outcome"], planned["error"]) == ("skipped", "op_nothing_fits")
    assert (done["outcome"], done["error"]) == ("skipped", "op_nothing_fits")
    assert planned["removed_ids"] == done["removed_ids"] == []
    assert plan["timings"]["total_ms"] >= plan["timings"]["execute_ms"] >= 0


async def test_a_dry_run_with_an_llm_op_lists_the_whole_group(
    llm_client: httpx.AsyncClient, llm_server: FakeLLMServer,
) -> None:
    # Its LLM is never called (a dry run costs nothing): what it would fold is unknown.
    ids = await seed(llm_client, [memory(f"note {i}", i) for i in range(4)])

    plan = await consolidate(llm_client, user_id="u1", dry_run=True,
                             op={"name": "llm_synthesis"})

    [planned] = plan["groups"]
    assert planned["mode"] is None
    assert planned["removed_ids"] == ids[:3]
    assert llm_server.requests == []

