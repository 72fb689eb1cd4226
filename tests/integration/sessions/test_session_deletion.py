"""DELETE /v1/sessions?user_id=&agent_id=: a user's or an agent's sessions go at once,
with their turns, summaries and events; nothing else does."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.resources import Resources
from app.sessions import repository
from tests.conftest import TenantKey, delete_matching, drop_connection_at, make_client
from tests.integration.sessions.conftest import append


async def session_ids(resources: Resources, tenant: TenantKey) -> set[str]:
    async with resources.engine.connect() as conn:
        return set((await conn.scalars(text(
            "SELECT session_id FROM sessions WHERE tenant_id = :t"),
            {"t": tenant.tenant_id})).all())


async def leftovers(resources: Resources, tenant: TenantKey, sids: list[str]) -> int:
    """Turns and events of these sessions still stored."""
    async with resources.engine.connect() as conn:
        return int(await conn.scalar(text(
            "SELECT (SELECT count(*) FROM session_turns WHERE tenant_id = :t "
            "AND session_id = ANY(:s)) + (SELECT count(*) FROM session_events "
            "WHERE tenant_id = :t AND session_id = ANY(:s))"),
            {"t": tenant.tenant_id, "s": sids}))


async def forget(client: httpx.AsyncClient, **params: Any) -> int:
    return await delete_matching(client, "/v1/sessions", **params)


async def test_a_users_sessions_go_with_their_turns_and_events_and_nothing_else(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
    other_tenant: TenantKey,
) -> None:
    for sid, user, agent in (("d1", "dana", "bot"), ("d2", "dana", "helper"),
                             ("e1", "eli", "bot"), ("n1", None, "bot")):
        identity = {k: v for k, v in (("user_id", user), ("agent_id", agent)) if v}
        await append(client, sid, f"hello from {sid}", **identity)
        await append(client, sid, "and again")
    await append(client, "d1", "someone else", user_id="eli", expect=409)  # an event
    memory = await client.post("/v1/memories", json={"content": "kept", "user_id": "dana",
                                                     "session_id": "d1"})
    async with make_client(resources, other_tenant.headers) as other:
        await append(other, "d1", "another tenant's Dana", user_id="dana")

    assert await forget(client, user_id="dana", agent_id="helper") == 1
    assert await session_ids(resources, tenant) == {"d1", "e1", "n1"}
    assert await forget(client, user_id="dana") == 1

    assert await session_ids(resources, tenant) == {"e1", "n1"}
    assert await leftovers(resources, tenant, ["d1", "d2"]) == 0
    assert (await client.get("/v1/sessions/d1")).status_code == 404
    assert (await client.get(f"/v1/memories/{memory.json()['id']}")).status_code == 200
    async with make_client(resources, other_tenant.headers) as other:
        assert (await other.get("/v1/sessions/d1")).status_code == 200
    assert await forget(client, agent_id="bot") == 2
    assert await session_ids(resources, tenant) == set()
    assert await forget(client, user_id="dana") == 0  # a retry is safe


@pytest.mark.parametrize(("params", "field"), [
    ({}, "query"),
    ({"user_id": "u", "strategy": "none"}, "query.strategy"),
    ({"user_id": ""}, "query.user_id"),
])
async def test_a_delete_naming_nobody_or_unknown_filters_is_422_and_deletes_nothing(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
    params: dict[str, str], field: str,
) -> None:
    await append(client, "s1", "keep me", user_id="u")

    resp = await client.delete("/v1/sessions", params=params)

    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert field in [e["field"] for e in resp.json()["errors"]]
    assert await session_ids(resources, tenant) == {"s1"}


async def test_many_sessions_go_in_statements_of_a_batch_all_or_nothing(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sids = [f"s{i}" for i in range(7)]
    for sid in sids:
        await append(client, sid, "hello", user_id="many")
    tried: list[list[int]] = []
    delete_of = repository.SessionRepository.delete_of

    async def failing_third(self: Any, **kwargs: Any) -> int:
        tried.append(drop_connection_at(self.session, 3))
        return await delete_of(self, **kwargs, batch=3)

    monkeypatch.setattr(repository.SessionRepository, "delete_of", failing_third)
    resp = await client.delete("/v1/sessions", params={"user_id": "many"})

    assert resp.status_code >= 500
    assert tried == [[3]]
    assert await session_ids(resources, tenant) == set(sids)  # two batches rolled back

    monkeypatch.setattr(repository.SessionRepository, "delete_of",
                        lambda self, **kw: delete_of(self, **kw, batch=3))
    assert await forget(client, user_id="many") == 7
    assert await leftovers(resources, tenant, sids) == 0
