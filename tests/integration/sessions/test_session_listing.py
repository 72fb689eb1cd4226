"""Listing sessions: newest first, filtered, paged without repeats, confined to the tenant."""

from __future__ import annotations

import httpx
import pytest

from app.resources import Resources
from tests.conftest import TenantKey, make_client
from tests.integration.sessions.conftest import append, get_json


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


async def test_the_list_is_confined_to_the_tenant(
    resources: Resources, client: httpx.AsyncClient, other_tenant: TenantKey,
) -> None:
    await append(client, "mine", "x")
    async with make_client(resources, other_tenant.headers) as other:
        assert await list_all(other) == []
        await append(other, "theirs", "x")
        assert await list_all(other) == ["theirs"]
    assert await list_all(client) == ["mine"]
