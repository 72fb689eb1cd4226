"""GET /v1/memories: filters, archived rows, newest-first order and stable cursor paging."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.resources import Resources
from tests.conftest import TenantKey

BASE = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def at(minutes: float) -> str:
    return (BASE + timedelta(minutes=minutes)).isoformat().replace("+00:00", "Z")


async def create_batch(client: httpx.AsyncClient, items: list[dict[str, Any]]) -> list[dict]:
    resp = await client.post("/v1/memories/batch", json={"items": items})
    assert resp.status_code == 201, resp.text
    return resp.json()["items"]


async def list_ids(client: httpx.AsyncClient, **params: Any) -> list[str]:
    resp = await client.get("/v1/memories", params=params)
    assert resp.status_code == 200, resp.text
    return [m["id"] for m in resp.json()["items"]]


async def read_all_pages(client: httpx.AsyncClient, limit: int,
                         **params: Any) -> list[list[dict[str, Any]]]:
    pages: list[list[dict[str, Any]]] = []
    cursor = None
    while True:
        query = {**params, "limit": limit, **({"cursor": cursor} if cursor else {})}
        resp = await client.get("/v1/memories", params=query)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        pages.append(body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            return pages
        assert len(pages) < 100, "paging does not terminate"


def newest_first(memories: list[dict[str, Any]]) -> list[str]:
    """The contract's order: created_at desc, then id desc."""
    ordered = sorted(
        memories,
        key=lambda m: (datetime.fromisoformat(m["created_at"]), uuid.UUID(m["id"])),
        reverse=True,
    )
    return [m["id"] for m in ordered]


async def sql(resources: Resources, statement: str, **params: Any) -> None:
    async with resources.engine.begin() as conn:
        result = await conn.execute(text(statement), params)
        assert result.rowcount == 1


# --- filters --------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["user_id", "agent_id", "session_id", "namespace"])
async def test_scope_filter_returns_only_rows_with_that_exact_value(
    client: httpx.AsyncClient, field: str
) -> None:
    created = await create_batch(client, [
        {"content": "match 1", field: "alpha"},
        {"content": "other value", field: "alphabet"},
        {"content": "no value"},
        {"content": "match 2", field: "alpha"},
        {"content": "case differs", field: "Alpha"},
    ])
    ids = await list_ids(client, **{field: "alpha"})
    assert sorted(ids) == sorted([created[0]["id"], created[3]["id"]])
    assert await list_ids(client, **{field: "nobody"}) == []
    assert len(await list_ids(client)) == 5


async def test_scope_filters_combine_with_and(client: httpx.AsyncClient) -> None:
    created = await create_batch(client, [
        {"content": "u1 a1", "user_id": "u1", "agent_id": "a1", "namespace": "n"},
        {"content": "u1 a2", "user_id": "u1", "agent_id": "a2", "namespace": "n"},
        {"content": "u2 a1", "user_id": "u2", "agent_id": "a1", "namespace": "n"},
        {"content": "u1 a1 other ns", "user_id": "u1", "agent_id": "a1", "namespace": "m"},
    ])
    ids = await list_ids(client, user_id="u1", agent_id="a1", namespace="n")
    assert ids == [created[0]["id"]]


async def test_tags_filter_requires_every_given_tag(client: httpx.AsyncClient) -> None:
    created = await create_batch(client, [
        {"content": "red only", "tags": ["red"]},
        {"content": "red and blue", "tags": ["red", "blue"]},
        {"content": "red blue green", "tags": ["green", "blue", "red"]},
        {"content": "blue only", "tags": ["blue"]},
        {"content": "untagged"},
    ])
    by_content = {m["content"]: m["id"] for m in created}
    both = await list_ids(client, tags=["red", "blue"])
    assert sorted(both) == sorted([by_content["red and blue"], by_content["red blue green"]])
    red = await list_ids(client, tags=["red"])
    assert sorted(red) == sorted([by_content["red only"], by_content["red and blue"],
                                  by_content["red blue green"]])
    assert await list_ids(client, tags=["red", "blue", "green"]) == [
        by_content["red blue green"]]
    assert await list_ids(client, tags=["red", "purple"]) == []


async def test_categories_filter_matches_any_given_category(client: httpx.AsyncClient) -> None:
    created = await create_batch(client, [
        {"content": "a", "category": "work"},
        {"content": "b", "category": "health"},
        {"content": "c", "category": "travel"},
        {"content": "d"},
    ])
    ids = await list_ids(client, categories=["work", "travel"])
    assert sorted(ids) == sorted([created[0]["id"], created[2]["id"]])
    assert await list_ids(client, categories=["general"]) == [created[3]["id"]]
    assert await list_ids(client, categories=["nothing"]) == []


async def test_filters_on_tags_categories_and_scope_combine(client: httpx.AsyncClient) -> None:
    created = await create_batch(client, [
        {"content": "hit", "user_id": "u", "category": "work", "tags": ["x", "y"]},
        {"content": "wrong user", "user_id": "v", "category": "work", "tags": ["x", "y"]},
        {"content": "wrong category", "user_id": "u", "category": "fun", "tags": ["x", "y"]},
        {"content": "missing tag", "user_id": "u", "category": "work", "tags": ["x"]},
    ])
    ids = await list_ids(client, user_id="u", categories=["work", "other"], tags=["x", "y"])
    assert ids == [created[0]["id"]]


async def test_fact_role_filter_separates_facts_from_summaries(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    created = await create_batch(client, [{"content": f"m{i}"} for i in range(4)])
    summary_id = created[1]["id"]
    await sql(resources,
              "UPDATE memories SET fact_role = 'summary', source = 'summary', "
              "summary_of = ARRAY[CAST(:a AS uuid), CAST(:b AS uuid)] "
              "WHERE tenant_id = :t AND id = :id",
              a=created[0]["id"], b=created[2]["id"], t=tenant.tenant_id, id=summary_id)

    assert await list_ids(client, fact_role="summary") == [summary_id]
    facts = await list_ids(client, fact_role="fact")
    assert sorted(facts) == sorted(m["id"] for m in created if m["id"] != summary_id)
    assert len(await list_ids(client)) == 4
    listed = (await client.get("/v1/memories", params={"fact_role": "summary"})).json()
    summary = listed["items"][0]
    assert summary["fact_role"] == "summary"
    assert summary["summary_of"] == [created[0]["id"], created[2]["id"]]


async def test_archived_rows_are_hidden_by_default_and_shown_with_include_archived(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    created = await create_batch(client, [
        {"content": f"m{i}", "user_id": "u", "tags": ["t"]} for i in range(4)])
    archived_id = created[2]["id"]
    # What an archive-mode consolidation does to a source row.
    await sql(resources,
              "UPDATE memories SET archived_at = now() WHERE tenant_id = :t AND id = :id",
              t=tenant.tenant_id, id=archived_id)
    others = sorted(m["id"] for m in created if m["id"] != archived_id)

    assert sorted(await list_ids(client)) == others
    assert sorted(await list_ids(client, include_archived="false")) == others
    assert sorted(await list_ids(client, user_id="u", tags=["t"])) == others
    shown = await list_ids(client, include_archived="true")
    assert sorted(shown) == sorted(m["id"] for m in created)
    assert archived_id in await list_ids(client, include_archived="true", user_id="u",
                                         tags=["t"])

    got = await client.get(f"/v1/memories/{archived_id}")
    assert got.status_code == 200
    body = got.json()
    assert body["archived_at"] is not None
    assert datetime.fromisoformat(body["archived_at"]).tzinfo is not None
    assert body["content"] == "m2"
    listed = (await client.get("/v1/memories", params={"include_archived": "true"})).json()
    [as_listed] = [m for m in listed["items"] if m["id"] == archived_id]
    assert as_listed == body
    assert all(m["archived_at"] is None for m in listed["items"] if m["id"] != archived_id)


async def test_archived_rows_are_paged_with_include_archived(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    created = await create_batch(client, [
        {"content": f"m{i}", "created_at": at(i)} for i in range(9)])
    for memory in created[::2]:
        await sql(resources,
                  "UPDATE memories SET archived_at = now() WHERE tenant_id = :t AND id = :id",
                  t=tenant.tenant_id, id=memory["id"])
    hidden = [m["id"] for page in await read_all_pages(client, 2) for m in page]
    assert hidden == newest_first(created[1::2])
    shown = [m["id"] for page in await read_all_pages(client, 2, include_archived="true")
             for m in page]
    assert shown == newest_first(created)


# --- order and paging -----------------------------------------------------------------------


async def test_list_is_newest_first_by_created_at_then_id(client: httpx.AsyncClient) -> None:
    minutes = [5, 1, 3, 3, 9, 1, 3, 0, 9, 7]  # ties at 1, 3 and 9 minutes
    first = await create_batch(client, [
        {"content": f"a{i}", "created_at": at(m)} for i, m in enumerate(minutes)])
    # A second batch adds more rows tied with the first batch's timestamps.
    second = await create_batch(client, [
        {"content": f"b{i}", "created_at": at(m)} for i, m in enumerate([3, 9, 0])])
    everything = first + second

    listed = (await client.get("/v1/memories")).json()
    ids = [m["id"] for m in listed["items"]]
    assert ids == newest_first(everything)
    assert listed["next_cursor"] is None
    stamps = [datetime.fromisoformat(m["created_at"]) for m in listed["items"]]
    assert stamps == sorted(stamps, reverse=True)
    assert stamps[0] == BASE + timedelta(minutes=9)
    # Within a tie the larger id comes first.
    tie = [uuid.UUID(m["id"]) for m in listed["items"]
           if datetime.fromisoformat(m["created_at"]) == BASE + timedelta(minutes=3)]
    assert len(tie) == 4
    assert tie == sorted(tie, reverse=True)


async def test_created_at_given_with_an_offset_orders_by_the_instant(
    client: httpx.AsyncClient,
) -> None:
    created = await create_batch(client, [
        {"content": "13:30 UTC", "created_at": "2025-06-01T15:30:00+02:00"},
        {"content": "14:00 UTC", "created_at": "2025-06-01T14:00:00Z"},
        {"content": "13:00 UTC", "created_at": "2025-06-01T08:00:00-05:00"},
    ])
    listed = (await client.get("/v1/memories")).json()["items"]
    assert [m["content"] for m in listed] == ["14:00 UTC", "13:30 UTC", "13:00 UTC"]
    assert [m["id"] for m in listed] == newest_first(created)


async def test_cursor_paging_returns_every_row_exactly_once_in_order(
    client: httpx.AsyncClient,
) -> None:
    # 23 rows, with runs of equal created_at that straddle page boundaries.
    minutes = [0, 1, 2, 3, 4, 4, 4, 5, 6, 7, 8, 9, 9, 9, 9, 10, 11, 12, 13, 14, 15, 15, 16]
    created = await create_batch(client, [
        {"content": f"row {i}", "created_at": at(m)} for i, m in enumerate(minutes)])
    expected = newest_first(created)

    pages = await read_all_pages(client, 5)
    assert [len(p) for p in pages] == [5, 5, 5, 5, 3]
    ids = [m["id"] for page in pages for m in page]
    assert ids == expected
    assert len(set(ids)) == 23


async def test_paging_with_an_exact_multiple_of_the_limit_ends_without_an_empty_page(
    client: httpx.AsyncClient,
) -> None:
    created = await create_batch(client, [
        {"content": f"row {i}", "created_at": at(i % 3)} for i in range(10)])
    pages = await read_all_pages(client, 5)
    assert [len(p) for p in pages] == [5, 5]
    assert [m["id"] for page in pages for m in page] == newest_first(created)


async def test_paging_with_filters_keeps_the_filter_on_every_page(
    client: httpx.AsyncClient,
) -> None:
    created = await create_batch(client, [
        {"content": f"row {i}", "user_id": "even" if i % 2 == 0 else "odd",
         "created_at": at(i // 4)} for i in range(21)])
    pages = await read_all_pages(client, 4, user_id="even")
    ids = [m["id"] for page in pages for m in page]
    assert ids == newest_first([m for m in created if m["user_id"] == "even"])
    assert [len(p) for p in pages] == [4, 4, 3]


async def test_paging_is_stable_when_rows_are_inserted_and_deleted_between_pages(
    client: httpx.AsyncClient,
) -> None:
    minutes = [0, 1, 1, 2, 3, 3, 3, 4, 5, 6, 7, 7, 8, 9, 10, 11, 11, 12, 13, 14, 15, 16, 17]
    created = await create_batch(client, [
        {"content": f"row {i}", "created_at": at(m)} for i, m in enumerate(minutes)])
    order = newest_first(created)
    existing = set(order)

    first = (await client.get("/v1/memories", params={"limit": 5})).json()
    seen = [m["id"] for m in first["items"]]
    assert seen == order[:5]
    cursor = first["next_cursor"]

    deleted_unread: set[str] = set()
    inserted: set[str] = set()

    async def churn(delete_ids: list[str], newer_count: int) -> None:
        for memory_id in delete_ids:
            assert (await client.delete(f"/v1/memories/{memory_id}")).status_code == 204
            if memory_id not in seen:
                deleted_unread.add(memory_id)
        new = await create_batch(client, [
            {"content": f"newer {uuid.uuid4()}"} for _ in range(newer_count)])
        inserted.update(m["id"] for m in new)

    # Delete the row the cursor points at, a row already read, and two rows not yet read;
    # insert rows that are newer than everything.
    await churn([order[4], order[1], order[6], order[12]], newer_count=3)
    pages_read = 1
    while cursor is not None:
        page = (await client.get("/v1/memories", params={"limit": 5, "cursor": cursor})).json()
        seen.extend(m["id"] for m in page["items"])
        cursor = page["next_cursor"]
        pages_read += 1
        if pages_read == 2:
            # Between pages 2 and 3: delete the next unread row, the current cursor row and
            # insert again.
            next_unread = next(i for i in order if i not in seen and i not in deleted_unread)
            await churn([next_unread, seen[-1]], newer_count=2)
        assert pages_read < 20

    assert len(seen) == len(set(seen)), "a row was served twice"
    assert set(seen) == existing - deleted_unread, "a row was skipped"
    assert not set(seen) & inserted
    assert seen == [i for i in order if i in set(seen)], "rows came out of order"
    assert len(deleted_unread) == 3


async def test_default_limit_is_50(client: httpx.AsyncClient) -> None:
    created = await create_batch(client, [
        {"content": f"row {i}", "created_at": at(i)} for i in range(55)])
    expected = newest_first(created)
    first = (await client.get("/v1/memories")).json()
    assert [m["id"] for m in first["items"]] == expected[:50]
    assert first["next_cursor"] is not None
    rest = (await client.get("/v1/memories", params={"cursor": first["next_cursor"]})).json()
    assert [m["id"] for m in rest["items"]] == expected[50:]
    assert rest["next_cursor"] is None


async def test_empty_list_has_no_cursor(client: httpx.AsyncClient) -> None:
    resp = await client.get("/v1/memories")
    assert resp.status_code == 200
    assert resp.json() == {"items": [], "next_cursor": None}


async def test_a_cursor_past_the_last_row_returns_an_empty_page(
    client: httpx.AsyncClient,
) -> None:
    await create_batch(client, [{"content": f"row {i}", "created_at": at(i)} for i in range(3)])
    first = (await client.get("/v1/memories", params={"limit": 2})).json()
    second = (await client.get("/v1/memories",
                               params={"limit": 2, "cursor": first["next_cursor"]})).json()
    assert len(second["items"]) == 1
    assert second["next_cursor"] is None
    # Deleting the last row leaves a still-valid cursor that simply finds nothing.
    assert (await client.delete(f"/v1/memories/{second['items'][0]['id']}")).status_code == 204
    again = (await client.get("/v1/memories",
                              params={"limit": 2, "cursor": first["next_cursor"]})).json()
    assert again == {"items": [], "next_cursor": None}


async def test_created_after_and_before_bound_the_listing_exclusively(
    client: httpx.AsyncClient,
) -> None:
    created = await create_batch(client, [
        {"content": f"m{i}", "user_id": "u", "created_at": at(i)} for i in range(5)])
    ids = [m["id"] for m in created]

    assert await list_ids(client, created_after=at(1), created_before=at(4)) == [ids[3],
                                                                                 ids[2]]
    assert await list_ids(client, user_id="u", created_after=at(3)) == [ids[4]]
    assert await list_ids(client, created_before=at(0)) == []
    # Offsets other than UTC mean the same moment.
    plus_two = (BASE + timedelta(minutes=3)).astimezone(
        timezone(timedelta(hours=2))).isoformat()
    assert await list_ids(client, created_before=plus_two) == [ids[2], ids[1], ids[0]]


async def test_metadata_filters_the_listing_by_containment(client: httpx.AsyncClient) -> None:
    created = await create_batch(client, [{**item, "created_at": at(i)} for i, item in enumerate([
        {"content": "a", "metadata": {"doc": "d1", "page": 3, "labels": ["x", "y"]}},
        {"content": "b", "metadata": {"doc": "d1", "page": 4}},
        {"content": "c", "metadata": {"doc": "d2", "nested": {"k": "v", "w": 1}}},
        {"content": "d"},
    ])])
    ids = [m["id"] for m in created]

    def filtered(value: Any, **params: Any) -> Any:
        return list_ids(client, metadata=json.dumps(value), **params)

    assert await filtered({"doc": "d1"}) == [ids[1], ids[0]]
    assert await filtered({"doc": "d1", "page": 3}) == [ids[0]]
    assert await filtered({"page": 3.0}) == [ids[0]]  # JSON numbers compare by value
    assert await filtered({"labels": ["y"]}) == [ids[0]]  # an array holding the item
    assert await filtered({"nested": {"k": "v"}}) == [ids[2]]
    assert await filtered({"doc": "d3"}) == []
    assert await filtered({"page": "3"}) == []  # a string is not the number
    assert await filtered({}) == ids[::-1]  # an empty object filters nothing
    # Combined with the other filters and with paging.
    assert await filtered({"doc": "d1"}, created_before=at(1)) == [ids[0]]
    pages = await read_all_pages(client, 1, metadata=json.dumps({"doc": "d1"}))
    assert [m["id"] for page in pages for m in page] == [ids[1], ids[0]]


@pytest.mark.parametrize(("value", "message"), [
    ("{bad", "JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('"doc"', "must be a JSON object"),
    ('{"doc": "\\u0000"}', "NUL"),
    ('{"n": NaN}', "finite"),  # Python's parser takes NaN; bounded_json refuses it
    ('{"doc": "' + "x" * 4096 + '"}', "at most 4096 characters"),
    # Past the JSON parser's depth: a RecursionError, answered 500 (an exploratory probe).
    ('{"a": ' + "[" * 1100 + "]" * 1100 + "}", "levels deep"),
])
async def test_a_metadata_filter_that_is_not_a_storable_object_is_422(
    client: httpx.AsyncClient, value: str, message: str,
) -> None:
    resp = await client.get("/v1/memories", params={"metadata": value})

    assert resp.status_code == 422, resp.text
    [error] = resp.json()["errors"]
    assert error["field"] == "query.metadata"
    assert message.lower() in error["message"].lower(), error


@pytest.mark.parametrize("value", ["2025-06-01T12:00:00", "yesterday", "2025-13-01T00:00:00Z"])
async def test_a_created_bound_without_a_zone_or_not_a_moment_is_422(
    client: httpx.AsyncClient, value: str,
) -> None:
    resp = await client.get("/v1/memories", params={"created_after": value})

    assert resp.status_code == 422, resp.text
    assert [e["field"] for e in resp.json()["errors"]] == ["query.created_after"]


async def test_the_metadata_parameter_is_declared_as_json_text_holding_an_object(
    client: httpx.AsyncClient,
) -> None:
    document = (await client.get("/openapi.json")).json()
    for method in ("get", "delete"):
        [param] = [p for p in document["paths"]["/v1/memories"][method]["parameters"]
                   if p["name"] == "metadata"]
        schema = param["schema"]
        assert (schema["contentMediaType"], schema["contentSchema"]) == (
            "application/json", {"type": "object"})
        assert {"type": "string", "maxLength": 4096} in schema["anyOf"]


async def test_a_batch_lists_newest_input_first(client: httpx.AsyncClient) -> None:
    """Its memories share one created_at, so the list orders them by id, which was random
    within each millisecond (found by an exploratory probe: a 1,000-item batch's first page
    held items 953, 930, 902): ids now increase as they are made."""
    made = await client.post("/v1/memories/batch", json={"items": [
        {"content": f"item {i}", "user_id": "batcher"} for i in range(200)]})
    assert made.status_code == 201, made.text

    listed = await client.get("/v1/memories", params={"user_id": "batcher", "limit": 200})

    assert [m["content"] for m in listed.json()["items"]] == \
        [f"item {i}" for i in reversed(range(200))]
