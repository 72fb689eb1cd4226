"""Bearer API keys: refused keys are 401, and a valid key never reaches another tenant."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.resources import Resources
from app.tenants.keys import hash_key
from app.tenants.repository import TenantRepository
from tests.conftest import TenantKey, create_tenant_key, make_client

PROBLEM_JSON = "application/problem+json"


def assert_unauthorized(resp: httpx.Response) -> None:
    assert resp.status_code == 401, resp.text
    assert resp.headers["content-type"] == PROBLEM_JSON
    assert resp.headers["www-authenticate"] == "Bearer"
    assert "Traceback" not in resp.text
    body = resp.json()
    assert body["status"] == 401
    assert body["title"] == "Unauthorized"
    assert body["type"].endswith("/unauthorized")
    assert isinstance(body["detail"], str)
    assert body["detail"]


async def count_rows(resources: Resources, tenant_id: uuid.UUID) -> int:
    async with resources.engine.connect() as conn:
        count = await conn.scalar(
            text("SELECT count(*) FROM memories WHERE tenant_id = :t"), {"t": tenant_id}
        )
    return int(count)


async def revoke(resources: Resources, key: str) -> None:
    async with resources.sessionmaker() as session:
        key_id = await session.scalar(
            text("SELECT id FROM api_keys WHERE key_hash = :h"), {"h": hash_key(key)}
        )
        assert key_id is not None
        assert await TenantRepository(session).revoke(key_id) is True
        await session.commit()


SOME_ID = "0190b2a4-1c2d-7000-8000-000000000001"
ENDPOINTS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("POST", "/v1/memories", {"content": "x"}),
    ("POST", "/v1/memories/batch", {"items": [{"content": "x"}]}),
    ("GET", "/v1/memories", None),
    ("GET", f"/v1/memories/{SOME_ID}", None),
    ("PATCH", f"/v1/memories/{SOME_ID}", {"content": "y"}),
    ("DELETE", f"/v1/memories/{SOME_ID}", None),
]


@pytest.mark.parametrize(("method", "path", "payload"), ENDPOINTS,
                         ids=[f"{m} {p.replace(SOME_ID, '{id}')}" for m, p, _ in ENDPOINTS])
async def test_every_memory_endpoint_without_a_key_is_401_problem(
    anon_client: httpx.AsyncClient, method: str, path: str, payload: dict[str, Any] | None
) -> None:
    resp = await anon_client.request(method, path, json=payload)
    assert_unauthorized(resp)


async def test_without_a_key_an_invalid_body_is_still_401_not_422(
    anon_client: httpx.AsyncClient,
) -> None:
    resp = await anon_client.post("/v1/memories", json={"content": ""})
    assert_unauthorized(resp)


UNREADABLE_BODIES = [
    pytest.param(b'{"content": ', id="malformed"),
    pytest.param(b'{"content": "caf\xe9"}', id="not-utf8"),
    pytest.param(b'{"content": "x", "importance": ' + b"9" * 5000 + b"}", id="long-integer"),
]


@pytest.mark.parametrize("body", UNREADABLE_BODIES)
@pytest.mark.parametrize("authorization", [None, "Bearer egm_this-key-was-never-issued"],
                         ids=["no-key", "wrong-key"])
async def test_without_a_valid_key_an_unreadable_body_is_401_not_422(
    resources: Resources, tenant: TenantKey, authorization: str | None, body: bytes,
) -> None:
    """FastAPI reads a JSON body before any dependency runs, so these were 422s."""
    headers = {"Content-Type": "application/json"}
    if authorization is not None:
        headers["Authorization"] = authorization
    async with make_client(resources, {}) as c:
        assert_unauthorized(await c.post("/v1/memories", content=body, headers=headers))
    async with make_client(resources, tenant.headers) as c:
        resp = await c.post("/v1/memories", content=body,
                            headers={"Content-Type": "application/json"})
    assert resp.status_code == 422, resp.text
    assert [e["field"] for e in resp.json()["errors"]] == ["body"]


@pytest.mark.parametrize(
    "authorization",
    [
        pytest.param("Bearer egm_this-key-was-never-issued", id="unknown-key"),
        pytest.param("Bearer ", id="empty-bearer"),
        pytest.param("Bearer", id="scheme-only"),
        pytest.param("egm_no-scheme-at-all", id="no-scheme"),
    ],
)
async def test_wrong_key_is_401_problem_and_writes_nothing(
    resources: Resources, tenant: TenantKey, authorization: str
) -> None:
    async with make_client(resources, {"Authorization": authorization}) as c:
        assert_unauthorized(await c.get("/v1/memories"))
        assert_unauthorized(await c.post("/v1/memories", json={"content": "x"}))
    assert await count_rows(resources, tenant.tenant_id) == 0


async def test_a_tenants_key_with_one_character_changed_is_401(
    resources: Resources, tenant: TenantKey
) -> None:
    altered = tenant.key[:-1] + ("A" if tenant.key[-1] != "A" else "B")
    async with make_client(resources, {"Authorization": f"Bearer {altered}"}) as c:
        assert_unauthorized(await c.post("/v1/memories", json={"content": "x"}))
    assert await count_rows(resources, tenant.tenant_id) == 0


@pytest.mark.parametrize("scheme", ["Basic", "Token", "ApiKey"])
async def test_valid_key_with_a_non_bearer_scheme_is_401(
    resources: Resources, tenant: TenantKey, scheme: str
) -> None:
    async with make_client(resources, {"Authorization": f"{scheme} {tenant.key}"}) as c:
        assert_unauthorized(await c.get("/v1/memories"))
        assert_unauthorized(await c.post("/v1/memories", json={"content": "x"}))
    assert await count_rows(resources, tenant.tenant_id) == 0


@pytest.mark.parametrize("second", ["valid", "wrong"])
async def test_two_authorization_headers_are_401_whichever_is_valid(
    resources: Resources, tenant: TenantKey, anon_client: httpx.AsyncClient, second: str
) -> None:
    # A proxy in front may have checked the other one; acting on either is a guess.
    other = tenant.key if second == "valid" else "egm_not-a-key"
    for pair in ([tenant.key, other], [other, tenant.key]):
        headers = [("Authorization", f"Bearer {key}") for key in pair]
        resp = await anon_client.post("/v1/memories", json={"content": "x"}, headers=headers)
        assert_unauthorized(resp)
        assert "more than one" in resp.json()["detail"]
    assert await count_rows(resources, tenant.tenant_id) == 0


async def test_valid_key_is_accepted_with_a_lowercase_bearer_scheme(
    resources: Resources, tenant: TenantKey
) -> None:
    # RFC 9110: the auth scheme is case-insensitive.
    async with make_client(resources, {"Authorization": f"bearer {tenant.key}"}) as c:
        resp = await c.post("/v1/memories", json={"content": "x"})
    assert resp.status_code == 201
    assert await count_rows(resources, tenant.tenant_id) == 1


async def test_revoked_key_is_401_and_its_tenants_rows_stay_untouched(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    created = await client.post("/v1/memories", json={"content": "before revocation"})
    assert created.status_code == 201
    memory_id = created.json()["id"]

    await revoke(resources, tenant.key)

    assert_unauthorized(await client.get("/v1/memories"))
    assert_unauthorized(await client.get(f"/v1/memories/{memory_id}"))
    assert_unauthorized(await client.post("/v1/memories", json={"content": "after"}))
    assert_unauthorized(await client.patch(f"/v1/memories/{memory_id}",
                                           json={"content": "changed"}))
    assert_unauthorized(await client.delete(f"/v1/memories/{memory_id}"))
    async with resources.engine.connect() as conn:
        contents = (await conn.execute(
            text("SELECT content FROM memories WHERE tenant_id = :t"), {"t": tenant.tenant_id}
        )).scalars().all()
    assert contents == ["before revocation"]


async def test_revoking_one_key_leaves_the_tenants_other_key_working(
    resources: Resources, tenant: TenantKey
) -> None:
    second = await create_tenant_key(resources, tenant.name)
    assert second.tenant_id == tenant.tenant_id
    await revoke(resources, tenant.key)
    async with make_client(resources, second.headers) as c:
        resp = await c.post("/v1/memories", json={"content": "via the second key"})
        assert resp.status_code == 201
    async with make_client(resources, tenant.headers) as c:
        assert_unauthorized(await c.get("/v1/memories"))


# --- tenant isolation -----------------------------------------------------------------------


async def test_a_key_of_tenant_a_cannot_read_change_or_delete_tenant_bs_memory(
    resources: Resources, client: httpx.AsyncClient, other_tenant: TenantKey
) -> None:
    async with make_client(resources, other_tenant.headers) as client_b:
        created = await client_b.post("/v1/memories", json={
            "content": "B's secret", "user_id": "shared-user", "namespace": "ns",
            "tags": ["t"], "category": "private", "metadata": {"owner": "b"},
        })
        assert created.status_code == 201
        b_memory = created.json()
        b_id = b_memory["id"]

        get = await client.get(f"/v1/memories/{b_id}")
        patch = await client.patch(f"/v1/memories/{b_id}", json={
            "content": "overwritten by A", "importance": 0.1, "expires_at": None})
        delete = await client.delete(f"/v1/memories/{b_id}")
        for resp in (get, patch, delete):
            assert resp.status_code == 404, resp.text
            assert resp.headers["content-type"] == PROBLEM_JSON
            assert resp.json()["status"] == 404
            assert "B's secret" not in resp.text

        # A 404 for B's id is indistinguishable from one for an id nobody has (but for
        # the id named and the request's own id).
        unknown = await client.get(f"/v1/memories/{uuid.uuid4()}")
        assert {k: v for k, v in get.json().items() if k not in ("detail", "request_id")} == {
            k: v for k, v in unknown.json().items() if k not in ("detail", "request_id")}

        for params in ({}, {"user_id": "shared-user"}, {"namespace": "ns"}, {"tags": "t"},
                       {"categories": "private"}, {"include_archived": "true"}):
            listed = await client.get("/v1/memories", params=params)
            assert listed.status_code == 200
            assert listed.json() == {"items": [], "next_cursor": None}, params

        after = await client_b.get(f"/v1/memories/{b_id}")
        assert after.status_code == 200
        assert after.json() == b_memory
        listed_b = (await client_b.get("/v1/memories")).json()
        assert [m["id"] for m in listed_b["items"]] == [b_id]
    assert await count_rows(resources, other_tenant.tenant_id) == 1


async def test_each_tenant_lists_only_its_own_memories(
    resources: Resources, client: httpx.AsyncClient, other_tenant: TenantKey
) -> None:
    async with make_client(resources, other_tenant.headers) as client_b:
        a_batch = await client.post("/v1/memories/batch", json={
            "items": [{"content": f"A{i}", "user_id": "u"} for i in range(3)]})
        b_batch = await client_b.post("/v1/memories/batch", json={
            "items": [{"content": f"B{i}", "user_id": "u"} for i in range(4)]})
        assert a_batch.status_code == b_batch.status_code == 201
        a_listed = (await client.get("/v1/memories", params={"user_id": "u"})).json()
        b_listed = (await client_b.get("/v1/memories", params={"user_id": "u"})).json()
    assert sorted(m["content"] for m in a_listed["items"]) == ["A0", "A1", "A2"]
    assert sorted(m["content"] for m in b_listed["items"]) == ["B0", "B1", "B2", "B3"]


async def test_same_idempotency_key_in_two_tenants_creates_two_independent_memories(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
    other_tenant: TenantKey,
) -> None:
    key = f"shared-key-{uuid.uuid4()}"
    headers = {"Idempotency-Key": key}
    async with make_client(resources, other_tenant.headers) as client_b:
        a = await client.post("/v1/memories", json={"content": "same body"}, headers=headers)
        b = await client_b.post("/v1/memories", json={"content": "same body"}, headers=headers)
        # A different body under the same key is no conflict either: keys are per tenant.
        b_other = await client_b.post("/v1/memories/batch",
                                      json={"items": [{"content": "other"}]},
                                      headers={"Idempotency-Key": f"{key}-b"})
        a_other = await client.post("/v1/memories", json={"content": "A's other"},
                                    headers={"Idempotency-Key": f"{key}-b"})
        assert (a.status_code, b.status_code) == (201, 201)
        assert (a_other.status_code, b_other.status_code) == (201, 201)
        for resp in (a, b, a_other, b_other):
            assert "idempotent-replayed" not in resp.headers
        assert a.json()["id"] != b.json()["id"]
        assert (await client.get(f"/v1/memories/{b.json()['id']}")).status_code == 404
        assert (await client_b.get(f"/v1/memories/{a.json()['id']}")).status_code == 404
        assert (await client_b.get(f"/v1/memories/{b.json()['id']}")).json() == b.json()

        # Each tenant's retry replays its own answer.
        a_retry = await client.post("/v1/memories", json={"content": "same body"},
                                    headers=headers)
        b_retry = await client_b.post("/v1/memories", json={"content": "same body"},
                                      headers=headers)
    assert a_retry.json() == a.json()
    assert b_retry.json() == b.json()
    assert a_retry.headers["idempotent-replayed"] == "true"
    assert b_retry.headers["idempotent-replayed"] == "true"
    assert await count_rows(resources, tenant.tenant_id) == 2
    assert await count_rows(resources, other_tenant.tenant_id) == 2
