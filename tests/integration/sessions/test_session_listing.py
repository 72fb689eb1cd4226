"""Listing sessions and reading a session's log: newest first, filtered, paged without
repeats, confined to the tenant."""

from __future__ import annotations

import httpx
import pytest

from app.resources import Resources
from tests.conftest import TenantKey, make_client
from tests.integration.sessions.conftest import append, fold, get_json, new_id


async def list_all(client: httpx.AsyncClient, **params: str | int) -> list[str]:
    seen: list[str] = []
    cursor: str | None = None
    while True:
        query = dict(params, **({"cursor": cursor} if cursor else {}))
        page = (await client.get("/v1/sessions", params=query))
        assert page.status_code == 200, page.text
        body = page.json()
        seen += [s["session_id"] for s in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return seen


async def test_sessions_are_listed_newest_first_and_paged_without_repeats(
    client: httpx.AsyncClient,
) -> None:
    for i in range(7):
        await append(client, f"chat-{i}", "hello", user_id="u1" if i % 2 else "u2")

    everything = await list_all(client, limit=3)
    first = await get_json(client, "/v1/sessions?limit=2")

    assert everything == [f"chat-{i}" for i in reversed(range(7))]
    assert [s["session_id"] for s in first["items"]] == ["chat-6", "chat-5"]
    assert first["items"][0]["counts"]["turns"] == 1
    assert first["items"][0]["strategy"] == "rolling_summary"


async def test_sessions_are_filtered_by_user_agent_and_strategy(
    client: httpx.AsyncClient,
) -> None:
    await append(client, "a", "x", user_id="u1", agent_id="bot")
    await append(client, "b", "x", user_id="u2", agent_id="bot")
    await append(client, "c", "x", user_id="u1")
    resp = await client.put("/v1/sessions/d", json={"strategy": "truncation"})
    assert resp.status_code == 201

    assert await list_all(client, user_id="u1") == ["c", "a"]
    assert await list_all(client, agent_id="bot") == ["b", "a"]
    assert await list_all(client, user_id="u1", agent_id="bot") == ["a"]
    assert await list_all(client, strategy="truncation") == ["d"]
    assert await list_all(client, health="healthy") == ["d", "c", "b", "a"]
    assert await list_all(client, health="degraded") == []


@pytest.mark.parametrize(("params", "field"), [
    ({"limit": "0"}, "query.limit"),
    ({"limit": "501"}, "query.limit"),
    ({"cursor": "not-a-cursor"}, "query.cursor"),
    # Keys PostgreSQL text cannot hold: a 500 from the database before.
    ({"cursor": "WyIyMDI2LTAxLTAxVDAwOjAwOjAwWiIsIlx1MDAwMCJd"}, "query.cursor"),
    ({"cursor": "WyIyMDI2LTAxLTAxVDAwOjAwOjAwWiIsIlx1ZDgwMCJd"}, "query.cursor"),
    ({"strategy": "summary"}, "query.strategy"),
    ({"health": "sick"}, "query.health"),
    ({"session_id": "a"}, "query.session_id"),
])
async def test_bad_list_parameters_are_422_naming_them(
    client: httpx.AsyncClient, params: dict[str, str], field: str,
) -> None:
    resp = await client.get("/v1/sessions", params=params)
    assert resp.status_code == 422
    assert [e["field"] for e in resp.json()["errors"]] == [field]


async def test_an_empty_cursor_reads_the_first_page_as_on_every_other_list(
    client: httpx.AsyncClient,
) -> None:
    sid = new_id()
    await append(client, sid, "x")
    for path in ("/v1/sessions", f"/v1/sessions/{sid}/turns", f"/v1/sessions/{sid}/events",
                 "/v1/memories", "/v1/consolidations"):
        resp = await client.get(path, params={"cursor": ""})
        assert resp.status_code == 200, (path, resp.text)
        assert resp.json() == (await client.get(path)).json(), path


@pytest.mark.parametrize(("path", "param"), [
    ("context", "budget"), ("turns", "limt"), ("events", "since")])
async def test_a_misspelt_parameter_of_a_sessions_read_is_422_naming_it(
    client: httpx.AsyncClient, path: str, param: str,
) -> None:
    """`?budget=500` answered the default budget's context, as if it were understood."""
    sid = new_id()
    await append(client, sid, "x")
    resp = await client.get(f"/v1/sessions/{sid}/{path}", params={param: "5"})
    assert resp.status_code == 422, resp.text
    assert [e["field"] for e in resp.json()["errors"]] == [f"query.{param}"]


async def test_the_list_is_confined_to_the_tenant(
    resources: Resources, client: httpx.AsyncClient, other_tenant: TenantKey,
) -> None:
    await append(client, "mine", "x")
    async with make_client(resources, other_tenant.headers) as other:
        assert await list_all(other) == []
        await append(other, "theirs", "x")
        assert await list_all(other) == ["theirs"]
    assert await list_all(client) == ["mine"]


async def read_log(client: httpx.AsyncClient, sid: str, limit: int) -> list[int]:
    seqs: list[int] = []
    cursor: str | None = None
    while True:
        params: dict[str, str | int] = {"limit": limit, **({"cursor": cursor} if cursor else {})}
        resp = await client.get(f"/v1/sessions/{sid}/turns", params=params)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        seqs += [t["seq"] for t in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            return seqs


async def test_the_log_keeps_every_turn_folded_or_dropped_newest_first(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    sid = new_id()
    await small_client.put(f"/v1/sessions/{sid}", json={"strategy": "truncation"})
    for i in range(20):
        await append(small_client, sid, f"turn {i + 1}", role="user" if i % 2 else "assistant")
    # Switched to a rolling summary: 8 turns dropped from the context, 8 folded.
    await small_client.put(f"/v1/sessions/{sid}", json={"strategy": "rolling_summary"})
    assert (await fold(small, tenant, sid)).folds == 2

    assert await read_log(small_client, sid, limit=7) == list(range(20, 0, -1))
    page = await get_json(small_client, f"/v1/sessions/{sid}/turns?limit=2")
    assert [(t["seq"], t["role"], t["content"]) for t in page["items"]] == [
        (20, "user", "turn 20"), (19, "assistant", "turn 19")]


async def test_reading_the_log_of_an_unknown_or_foreign_session_is_404(
    resources: Resources, client: httpx.AsyncClient, other_tenant: TenantKey,
) -> None:
    sid = new_id()
    await append(client, sid, "mine")
    assert (await client.get(f"/v1/sessions/{new_id()}/turns")).status_code == 404
    async with make_client(resources, other_tenant.headers) as other:
        assert (await other.get(f"/v1/sessions/{sid}/turns")).status_code == 404


@pytest.mark.parametrize("cursor", [
    "nonsense",
    "WyIyMDI2LTAxLTAxVDAwOjAwOjAwWiIsImFiYyJd",  # key "abc"
    "WyIyMDI2LTAxLTAxVDAwOjAwOjAwWiIsIjIxNDc0ODM2NDgiXQ",  # key past int4: a 500 before
])
async def test_a_bad_log_cursor_is_422(client: httpx.AsyncClient, cursor: str) -> None:
    sid = new_id()
    await append(client, sid, "x")
    resp = await client.get(f"/v1/sessions/{sid}/turns", params={"cursor": cursor})
    assert resp.status_code == 422
    assert [e["field"] for e in resp.json()["errors"]] == ["query.cursor"]
