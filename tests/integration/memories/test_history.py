"""GET /v1/memories/{id}/history: every change to what a memory says keeps the state it
replaced, newest first and paged; nothing else adds one; the past goes with the memory."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from datetime import datetime
from typing import Any

import httpx
from sqlalchemy import text

from app.memories.repository import MemoryRepository
from app.resources import Resources
from tests.conftest import TenantKey, local_model, make_client


async def create(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    resp = await client.post("/v1/memories", json={"content": "Alice drinks tea.", **fields})
    assert resp.status_code == 201, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def patch(client: httpx.AsyncClient, memory_id: str, **change: Any) -> dict[str, Any]:
    resp = await client.patch(f"/v1/memories/{memory_id}", json=change)
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def history(client: httpx.AsyncClient, memory_id: str, **params: Any) -> dict[str, Any]:
    resp = await client.get(f"/v1/memories/{memory_id}/history", params=params)
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def stored_versions(resources: Resources, memory_id: str) -> int:
    async with resources.engine.connect() as conn:
        return int(await conn.scalar(text(
            "SELECT count(*) FROM memory_versions WHERE memory_id = :m"), {"m": memory_id}))


async def test_each_change_keeps_the_state_it_replaced_newest_first(
    client: httpx.AsyncClient,
) -> None:
    first = await create(client, tags=["drinks"], metadata={"source": "chat"},
                         category="preferences", importance=0.4)
    assert (await history(client, first["id"])) == {"items": [], "next_cursor": None}

    second = await patch(client, first["id"], content="Alice drinks coffee now.")
    third = await patch(client, first["id"], importance=0.9, tags=["drinks", "morning"])

    items = (await history(client, first["id"]))["items"]
    assert [v["version"] for v in items] == [2, 1]
    assert items[1] == {
        "version": 1, "content": "Alice drinks tea.", "category": "preferences",
        "tags": ["drinks"], "importance": 0.4, "metadata": {"source": "chat"},
        "expires_at": None, "valid_from": first["updated_at"],
        "replaced_at": second["updated_at"]}
    assert items[0]["content"] == "Alice drinks coffee now."
    assert (items[0]["importance"], items[0]["tags"]) == (0.4, ["drinks"])
    assert items[0]["valid_from"] == second["updated_at"]
    assert items[0]["replaced_at"] == third["updated_at"]
    current = (await client.get(f"/v1/memories/{first['id']}")).json()
    assert (current["importance"], current["tags"]) == (0.9, ["drinks", "morning"])


async def test_a_change_that_changes_nothing_and_archiving_keep_no_version(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    memory = await create(client, tags=["a"], user_id="u", category="c")
    await patch(client, memory["id"], tags=["a"])  # the same value
    assert (await history(client, memory["id"]))["items"] == []
    for i in range(2):
        await create(client, content=f"another note {i}", user_id="u", category="c")
    run = await client.post("/v1/consolidations", json={"user_id": "u", "mode": "archive"})
    assert run.status_code == 200, run.text
    assert run.json()["deleted"] >= 2

    async with resources.engine.connect() as conn:
        versions = await conn.scalar(text(
            "SELECT count(*) FROM memory_versions WHERE tenant_id = :t"),
            {"t": tenant.tenant_id})
    assert versions == 0


async def test_a_change_that_changes_nothing_leaves_no_gap_in_the_timeline(
    client: httpx.AsyncClient,
) -> None:
    """It kept no version but moved updated_at, where the next version starts: from its
    time to the next change, no state of the history covered the memory."""
    first = await create(client, content="A", tags=["t"], metadata={"k": [1, {"x": None}]})
    second = await patch(client, first["id"], content="B")
    same = await patch(client, first["id"], content="B", tags=["t"],
                       metadata={"k": [1, {"x": None}]}, expires_at=None)
    assert same == second
    await patch(client, first["id"], content="C")

    newer, older = (await history(client, first["id"]))["items"]
    assert (older["content"], newer["content"]) == ("A", "B")
    assert older["replaced_at"] == newer["valid_from"] == second["updated_at"]


def at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp)


async def test_a_change_that_waited_for_anothers_lock_is_stamped_after_it(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    """A change's transaction may start before another's and get the row's lock after it.
    Stamped with its transaction's start, it ended the state the other made before that
    state began, and updated_at went back in time."""
    memory = await create(client, content="A")
    async with resources.sessionmaker() as early:
        await early.execute(text("SELECT now()"))  # the transaction's start is now fixed
        await asyncio.sleep(0.01)
        await patch(client, memory["id"], content="B")  # starts later, commits first
        await MemoryRepository(early, tenant.tenant_id).update(
            uuid.UUID(memory["id"]), {"content": "C"})
        await early.commit()

    newer, older = (await history(client, memory["id"]))["items"]
    assert (older["content"], newer["content"]) == ("A", "B")
    for state in (older, newer):
        assert at(state["valid_from"]) <= at(state["replaced_at"]), state
    assert newer["valid_from"] == older["replaced_at"]
    current = (await client.get(f"/v1/memories/{memory['id']}")).json()
    assert current["content"] == "C"
    assert current["updated_at"] == newer["replaced_at"]
    assert at(newer["replaced_at"]) > at(older["replaced_at"])


async def test_concurrent_changes_leave_one_unbroken_timeline(
    client: httpx.AsyncClient,
) -> None:
    memory = await create(client, content="version 0")
    answers = await asyncio.gather(*(
        client.patch(f"/v1/memories/{memory['id']}", json={"content": f"version {n + 1}"})
        for n in range(12)))
    assert [a.status_code for a in answers] == [200] * 12

    states = (await history(client, memory["id"], limit=50))["items"]
    assert [s["version"] for s in states] == list(range(12, 0, -1))
    current = (await client.get(f"/v1/memories/{memory['id']}")).json()
    timeline = [*reversed(states), {"valid_from": current["updated_at"]}]
    for state, following in itertools.pairwise(timeline):
        assert state["replaced_at"] == following["valid_from"], state
        assert at(state["valid_from"]) <= at(state["replaced_at"]), state


async def test_history_pages_with_a_cursor(client: httpx.AsyncClient) -> None:
    memory = await create(client)
    for n in range(5):
        await patch(client, memory["id"], content=f"version {n + 2}")

    seen, cursor = [], None
    while True:
        page = await history(client, memory["id"], limit=2, **({"cursor": cursor} if cursor
                                                                 else {}))
        seen += [v["version"] for v in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [5, 4, 3, 2, 1]
    times = [datetime.fromisoformat(v["replaced_at"]) for v in
             (await history(client, memory["id"]))["items"]]
    assert times == sorted(times, reverse=True)


async def test_unknown_foreign_and_bad_requests_are_refused(
    resources: Resources, client: httpx.AsyncClient, other_tenant: TenantKey,
) -> None:
    memory = await create(client)
    await patch(client, memory["id"], content="changed")
    async with make_client(resources, other_tenant.headers) as other:
        foreign = await other.get(f"/v1/memories/{memory['id']}/history")
    assert foreign.status_code == 404
    unknown = await client.get("/v1/memories/0190b2a4-1c2d-7000-8000-000000000001/history")
    assert unknown.status_code == 404
    assert unknown.headers["content-type"].startswith("application/problem+json")
    for params, field in (({"cursor": "nonsense"}, "query.cursor"),
                          # "²" is a digit to str.isdigit, and past int4 is too
                          # large for the column: both were 500s.
                          ({"cursor": "WyIyMDI2LTAxLTAxVDAwOjAwOjAwWiIsIlx1MDBiMiJd"},
                           "query.cursor"),
                          ({"cursor": "WyIyMDI2LTAxLTAxVDAwOjAwOjAwWiIsIjIxNDc0ODM2NDgiXQ"},
                           "query.cursor"),
                          ({"limit": 0}, "query.limit"),
                          ({"user_id": "u"}, "query.user_id")):
        resp = await client.get(f"/v1/memories/{memory['id']}/history", params=params)
        assert resp.status_code == 422, resp.text
        assert [e["field"] for e in resp.json()["errors"]] == [field]


async def test_the_past_goes_with_the_memory(
    resources: Resources, client: httpx.AsyncClient,
) -> None:
    one = await create(client, user_id="dana")
    two = await create(client, user_id="eli")
    for memory in (one, two):
        await patch(client, memory["id"], content="changed once")
        await patch(client, memory["id"], content="changed twice")
    assert await stored_versions(resources, one["id"]) == 2

    assert (await client.delete(f"/v1/memories/{one['id']}")).status_code == 204
    forgotten = await client.delete("/v1/memories", params={"user_id": "eli"})
    assert forgotten.json() == {"deleted": 1}

    assert await stored_versions(resources, one["id"]) == 0
    assert await stored_versions(resources, two["id"]) == 0
    assert (await client.get(f"/v1/memories/{one['id']}/history")).status_code == 404


async def test_with_the_real_model_search_finds_the_change_and_history_the_past(
    resources: Resources, tenant: TenantKey,
) -> None:
    async with local_model(resources) as res, make_client(res, tenant.headers) as client:
        memory = await create(client, content="Alice lives in Lisbon.", user_id="alice")
        await patch(client, memory["id"], content="Alice moved to Berlin in May.")

        found = (await client.post("/v1/search", json={
            "query": "Which city does Alice live in now?", "user_id": "alice"})).json()
        past = (await history(client, memory["id"]))["items"]

    assert found["results"][0]["memory"]["content"] == "Alice moved to Berlin in May."
    assert [v["content"] for v in past] == ["Alice lives in Lisbon."]
