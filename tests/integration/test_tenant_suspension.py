"""A suspended tenant through the app on the real database: every request of its keys is
answered 403 `tenant_suspended` problem+json (the reason in the detail) before anything
is read or written, other tenants go on, its refused requests take nothing of its rate,
and `resume` gives it back everything it held."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import httpx
import pytest

from app.errors import NotFound
from app.resources import Resources
from app.tenants.rate_limit import RateLimit
from app.tenants.repository import LimitChange
from app.tenants.service import resume, set_limits, summary, suspend
from tests.conftest import TenantKey, count_memories, create_tenant_key, make_client

REASON = "invoice 2026-11 unpaid"


def assert_suspended(resp: httpx.Response, reason: str | None = REASON) -> None:
    assert resp.status_code == 403, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    problem = resp.json()
    assert problem["type"].endswith("/tenant_suspended")
    assert (problem["status"], problem["title"]) == (403, "Tenant suspended")
    why = "" if reason is None else f": {re.escape(reason)}"
    assert re.fullmatch(r"this tenant has been suspended since "
                        rf"\d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00{why}", problem["detail"]), \
        problem["detail"]


async def test_every_request_of_a_suspended_tenant_is_refused_and_nothing_changes(
    resources: Resources, tenant: TenantKey, other_tenant: TenantKey,
) -> None:
    async with make_client(resources, tenant.headers) as client:
        kept = await client.post("/v1/memories", json={"content": "Ada likes tea",
                                                       "user_id": "ada"})
        assert kept.status_code == 201, kept.text
        memory_id = kept.json()["id"]

        await suspend(resources.engine, tenant.name, REASON)
        refused = [
            await client.post("/v1/memories", json={"content": "Ada likes coffee"}),
            await client.post("/v1/memories/batch", json={"items": [{"content": "x"}]}),
            await client.get("/v1/memories"),
            await client.get(f"/v1/memories/{memory_id}"),
            await client.patch(f"/v1/memories/{memory_id}", json={"importance": 0.9}),
            await client.delete(f"/v1/memories/{memory_id}"),
            await client.post("/v1/search", json={"query": "what does Ada drink?"}),
            await client.post("/v1/sessions/s1/turns", json={"role": "user",
                                                              "content": "hello"}),
            await client.get("/v1/consolidations"),
            await client.post("/v1/consolidations", json={"user_id": "ada"}),
        ]
        for resp in refused:
            assert_suspended(resp)
        assert (await client.get("/healthz")).status_code == 200
        assert await count_memories(resources, tenant) == 1

        async with make_client(resources, other_tenant.headers) as other:
            assert (await other.get("/v1/memories")).status_code == 200

        await resume(resources.engine, tenant.name)
        back = await client.get(f"/v1/memories/{memory_id}")
        assert back.status_code == 200, back.text
        assert (back.json()["content"], back.json()["importance"]) == ("Ada likes tea", 0.5)
        listed = await client.get("/v1/sessions")
        assert (listed.status_code, listed.json()["items"]) == (200, [])
        assert (await client.post("/v1/memories", json={"content": "Ada likes coffee"})
                ).status_code == 201


async def test_every_key_of_the_tenant_is_refused_even_one_made_while_suspended(
    resources: Resources, tenant: TenantKey,
) -> None:
    await suspend(resources.engine, tenant.name, None)
    newer = await create_tenant_key(resources, tenant.name)
    for headers in (tenant.headers, newer.headers):
        async with make_client(resources, headers) as client:
            assert_suspended(await client.get("/v1/memories"), reason=None)
    async with make_client(resources, {"Authorization": "Bearer egm_not_a_key"}) as anon:
        assert (await anon.get("/v1/memories")).status_code == 401  # not a word of it


async def test_suspending_again_replaces_the_reason_and_keeps_the_time(
    resources: Resources, tenant: TenantKey,
) -> None:
    before = datetime.now(UTC)
    first = await suspend(resources.engine, tenant.name, "first reason")
    assert first.suspension is not None
    assert first.suspension.since >= before.replace(microsecond=0)
    again = await suspend(resources.engine, tenant.name, "second reason")
    assert again.suspension is not None
    assert (again.suspension.since, again.suspension.reason) == (first.suspension.since,
                                                                 "second reason")
    async with make_client(resources, tenant.headers) as client:
        assert_suspended(await client.get("/v1/memories"), reason="second reason")
    resumed = await resume(resources.engine, tenant.name)
    assert resumed.suspension is None
    assert (await resume(resources.engine, tenant.name)).suspension is None  # a no-op
    assert (await summary(resources.engine, tenant.name)).suspension is None


async def test_a_refused_request_takes_nothing_of_the_tenant_s_rate(
    resources: Resources, tenant: TenantKey,
) -> None:
    # Two requests, and no token back while the test runs.
    await set_limits(resources.engine, tenant.name,
                     LimitChange(rate=RateLimit.of(0.01, 2)))
    await suspend(resources.engine, tenant.name, REASON)
    async with make_client(resources, tenant.headers) as client:
        for _ in range(5):
            assert_suspended(await client.get("/v1/memories"))
        await resume(resources.engine, tenant.name)
        assert [(await client.get("/v1/memories")).status_code for _ in range(3)] == [
            200, 200, 429]


async def test_an_unknown_tenant_cannot_be_suspended_or_resumed(resources: Resources) -> None:
    with pytest.raises(NotFound, match="no tenant named 'nobody-here'"):
        await suspend(resources.engine, "nobody-here", REASON)
    with pytest.raises(NotFound, match="no tenant named 'nobody-here'"):
        await resume(resources.engine, "nobody-here")


async def test_the_openapi_document_declares_the_403_of_every_tenant_operation(
    anon_client: httpx.AsyncClient,
) -> None:
    spec = (await anon_client.get("/openapi.json")).json()
    operations = [(path, method, op) for path, ops in spec["paths"].items()
                  for method, op in ops.items() if path.startswith("/v1/")]
    assert len(operations) > 20
    for path, method, op in operations:
        declared = op["responses"].get("403")
        assert declared is not None, (method, path)
        assert "tenant_suspended" in declared["description"]
        assert list(declared["content"]) == ["application/problem+json"]
