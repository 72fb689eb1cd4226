"""Happy paths of every memory endpoint over HTTP against the real database."""

from __future__ import annotations

import uuid

import httpx
import pytest
from sqlalchemy import text

from app.resources import Resources
from tests.conftest import TenantKey


async def test_create_returns_the_stored_memory_with_defaults(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/memories", json={"content": "  Alice likes green tea.  "})
    assert resp.status_code == 201
    body = resp.json()
    assert body["content"] == "Alice likes green tea."
    assert body["category"] == "general"
    assert body["importance"] == 0.5
    assert body["tags"] == []
    assert body["metadata"] == {}
    assert body["source"] == "api"
    assert body["fact_role"] == "fact"
    assert body["summary_of"] == []
    assert body["expires_at"] is None
    assert body["archived_at"] is None
    assert body["created_at"] == body["updated_at"]
    assert body["created_at"].endswith("Z") or "+" in body["created_at"]
    got = await client.get(f"/v1/memories/{body['id']}")
    assert got.status_code == 200
    assert got.json() == body


async def test_create_keeps_every_field_given(client: httpx.AsyncClient) -> None:
    payload = {
        "content": "Bob's flight lands at 9:40 on 2026-03-02.",
        "user_id": "bob", "agent_id": "planner", "session_id": "s-1", "namespace": "travel",
        "category": "itinerary", "tags": ["flight", "march"], "importance": 0.9,
        "metadata": {"airline": "KL", "seats": [1, 2], "nested": {"ok": True}},
        "source": "import", "created_at": "2025-12-31T23:00:00+01:00",
        "expires_at": "2030-01-01T00:00:00Z",
    }
    resp = await client.post("/v1/memories", json=payload)
    assert resp.status_code == 201
    body = resp.json()
    for field in ("content", "user_id", "agent_id", "session_id", "namespace", "category",
                  "tags", "importance", "metadata", "source"):
        assert body[field] == payload[field], field
    assert body["created_at"].startswith("2025-12-31T22:00:00")
    assert body["expires_at"].startswith("2030-01-01T00:00:00")


async def test_batch_create_keeps_input_order(client: httpx.AsyncClient) -> None:
    items = [{"content": f"fact number {i}", "user_id": "u"} for i in range(25)]
    resp = await client.post("/v1/memories/batch", json={"items": items})
    assert resp.status_code == 201
    created = resp.json()["items"]
    assert [m["content"] for m in created] == [i["content"] for i in items]
    for memory in created[::6]:
        assert (await client.get(f"/v1/memories/{memory['id']}")).json() == memory


@pytest.mark.parametrize("size", [3, 20], ids=["small-batch", "batch-texts-off-loop"])
async def test_a_batch_stores_each_memorys_own_vector(
    client: httpx.AsyncClient, resources: Resources, size: int,
) -> None:
    # From 16 rows the repository puts the vectors in their text form on a thread.
    contents = [f"batch fact {i}: the {('red', 'green', 'blue')[i % 3]} door" for i in range(size)]
    resp = await client.post("/v1/memories/batch", json={"items": [{"content": c}
                                                                   for c in contents]})
    assert resp.status_code == 201, resp.text
    ids = [m["id"] for m in resp.json()["items"]]

    async with resources.engine.connect() as conn:
        stored = dict((await conn.execute(
            text("SELECT id::text, embedding::text FROM memories WHERE id = ANY(:ids)"),
            {"ids": [uuid.UUID(i) for i in ids]})).all())
    for memory_id, content in zip(ids, contents, strict=True):
        values = [float(x) for x in stored[memory_id].strip("[]").split(",")]
        expected = resources.embedder.embed_one(content)
        assert max(abs(a - b) for a, b in zip(values, expected, strict=True)) < 1e-3


async def test_update_changes_fields_and_reembeds(client: httpx.AsyncClient) -> None:
    created = (await client.post(
        "/v1/memories", json={"content": "old text", "expires_at": "2031-01-01T00:00:00Z"}
    )).json()
    resp = await client.patch(f"/v1/memories/{created['id']}", json={
        "content": "new text", "tags": ["x"], "importance": 0.2, "metadata": {"k": "v"},
        "category": "notes",
    })
    assert resp.status_code == 200
    body = resp.json()
    assert (body["content"], body["tags"], body["importance"], body["metadata"],
            body["category"]) == ("new text", ["x"], 0.2, {"k": "v"}, "notes")
    assert body["expires_at"] is not None
    assert body["updated_at"] > created["updated_at"]
    cleared = await client.patch(f"/v1/memories/{created['id']}", json={"expires_at": None})
    assert cleared.status_code == 200
    assert cleared.json()["expires_at"] is None
    assert cleared.json()["content"] == "new text"


async def test_update_reembeds_content(client: httpx.AsyncClient, resources) -> None:  # type: ignore[no-untyped-def]
    created = (await client.post("/v1/memories", json={"content": "apples and pears"})).json()
    await client.patch(f"/v1/memories/{created['id']}", json={"content": "rockets to mars"})
    async with resources.engine.connect() as conn:
        stored = await conn.scalar(
            text("SELECT embedding::text FROM memories WHERE id = :id"), {"id": created["id"]}
        )
    expected = resources.embedder.embed_one("rockets to mars")
    values = [float(x) for x in stored.strip("[]").split(",")]
    assert max(abs(a - b) for a, b in zip(values, expected, strict=True)) < 1e-3


async def test_delete_removes_the_memory(client: httpx.AsyncClient) -> None:
    created = (await client.post("/v1/memories", json={"content": "short-lived"})).json()
    resp = await client.delete(f"/v1/memories/{created['id']}")
    assert resp.status_code == 204
    assert resp.content == b""
    assert (await client.get(f"/v1/memories/{created['id']}")).status_code == 404
    again = await client.delete(f"/v1/memories/{created['id']}")
    assert again.status_code == 404
    assert again.headers["content-type"] == "application/problem+json"


async def test_get_unknown_id_is_404_problem(client: httpx.AsyncClient) -> None:
    resp = await client.get(f"/v1/memories/{uuid.uuid4()}")
    assert resp.status_code == 404
    assert resp.headers["content-type"] == "application/problem+json"
    assert resp.json()["status"] == 404
    assert "does not exist" in resp.json()["detail"]


async def test_expired_memory_is_gone_from_get_list_patch_and_delete(
    client: httpx.AsyncClient,
) -> None:
    expired = (await client.post("/v1/memories", json={
        "content": "expired", "user_id": "exp", "expires_at": "2020-01-01T00:00:00Z"})).json()
    alive = (await client.post("/v1/memories", json={"content": "alive", "user_id": "exp"})).json()
    assert (await client.get(f"/v1/memories/{expired['id']}")).status_code == 404
    listed = (await client.get("/v1/memories", params={"user_id": "exp"})).json()
    assert [m["id"] for m in listed["items"]] == [alive["id"]]
    # The same answer whether or not the maintenance purge has deleted the row yet.
    patched = await client.patch(f"/v1/memories/{expired['id']}", json={"expires_at": None})
    assert patched.status_code == 404
    assert (await client.delete(f"/v1/memories/{expired['id']}")).status_code == 404
    assert (await client.delete(f"/v1/memories/{alive['id']}")).status_code == 204


async def test_disabled_auth_acts_as_default_tenant(resources) -> None:  # type: ignore[no-untyped-def]
    from app.main import create_app
    from app.models import DEFAULT_TENANT_ID

    settings = resources.settings.model_copy(update={"auth_enabled": False})
    res = type(resources)(settings, resources.engine, resources.sessionmaker, resources.embedder)
    app = create_app(settings, res)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    marker = f"default-{uuid.uuid4()}"
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as anon:
        created = await anon.post("/v1/memories", json={"content": "x", "user_id": marker})
        assert created.status_code == 201
    from sqlalchemy import text

    async with resources.engine.connect() as conn:
        tenant = await conn.scalar(text("SELECT tenant_id FROM memories WHERE user_id = :u"),
                                   {"u": marker})
    assert tenant == DEFAULT_TENANT_ID


async def test_tenant_fixture_is_isolated(tenant: TenantKey) -> None:
    assert tenant.key.startswith("egm_")
