"""The request body bound (ENGRAM_MAX_BODY_MB for a batch of memories, 1 MiB for any other
request): past it a request answers 413 problem+json as soon as that many bytes have come,
whatever Content-Length said, and writes nothing."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest

from app.resources import Resources
from tests.conftest import TenantKey, count_memories, make_client, reconfigured, sample

MIB = 2**20


@pytest.fixture
async def limited(resources: Resources, database_url: str,
                  tenant: TenantKey) -> AsyncIterator[tuple[httpx.AsyncClient, Resources]]:
    async with reconfigured(resources, database_url, max_body_mb=1) as res, \
            make_client(res, tenant.headers) as client:
        yield client, res


def batch_of(size: int) -> bytes:
    """A batch body of about `size` bytes (valid JSON, items of 32,000 characters)."""
    items = [{"content": "x" * 32_000} for _ in range(max(1, size // 32_020))]
    return json.dumps({"items": items}).encode()


async def test_a_body_over_the_bound_is_413_problem_and_writes_nothing(
    limited: tuple[httpx.AsyncClient, Resources], tenant: TenantKey,
) -> None:
    client, res = limited
    body = batch_of(2 * MIB)
    assert len(body) > MIB
    labels = {"method": "POST", "route": "/v1/memories/batch", "status": "413"}
    counted = sample("engram_http_requests_total", **labels)
    resp = await client.post("/v1/memories/batch", content=body,
                             headers={"Content-Type": "application/json"})
    assert resp.status_code == 413, resp.text
    # Refused before routing, and still counted under the route it was sent to.
    assert sample("engram_http_requests_total", **labels) == counted + 1
    assert resp.headers["content-type"] == "application/problem+json"
    problem = resp.json()
    assert problem["type"].endswith("/payload_too_large")
    assert problem["status"] == 413
    assert problem["request_id"] == resp.headers["x-request-id"]
    assert await count_memories(res, tenant) == 0


async def test_a_body_without_a_length_is_cut_at_the_bound(
    limited: tuple[httpx.AsyncClient, Resources], tenant: TenantKey,
) -> None:
    client, res = limited
    sent = 0

    async def chunks() -> AsyncIterator[bytes]:
        # Chunked: no Content-Length to refuse by, so the bytes themselves are counted.
        nonlocal sent
        yield b'{"items": ['
        for _ in range(200):
            chunk = json.dumps({"content": "y" * 32_000}).encode() + b","
            sent += len(chunk)
            yield chunk
        yield b'{"content": "z"}]}'

    resp = await client.post("/v1/memories/batch", content=chunks(),
                             headers={"Content-Type": "application/json"})
    assert resp.status_code == 413, resp.text
    assert resp.json()["type"].endswith("/payload_too_large")
    assert await count_memories(res, tenant) == 0


async def test_a_body_under_the_bound_is_read(
    limited: tuple[httpx.AsyncClient, Resources], tenant: TenantKey,
) -> None:
    client, res = limited
    body = batch_of(MIB - 64 * 1024)
    assert len(body) < MIB
    resp = await client.post("/v1/memories/batch", content=body,
                             headers={"Content-Type": "application/json"})
    assert resp.status_code == 201, resp.text
    assert await count_memories(res, tenant) == len(resp.json()["items"])


async def test_the_default_bound_reads_the_largest_ascii_batch(client: httpx.AsyncClient,
                                                               resources: Resources) -> None:
    # 1,000 items of 32,768 characters: ~31 MiB, under the default 64 MiB.
    assert resources.settings.max_body_mb == 64
    body = json.dumps({"items": [{"content": "w" * 32_768, "tags": ["t"]}
                                 for _ in range(1000)]}).encode()
    assert 31 * MIB < len(body) < 64 * MIB
    resp = await client.post("/v1/memories/batch", content=body,
                             headers={"Content-Type": "application/json"})
    assert resp.status_code == 201, resp.text[:300]
    assert len(resp.json()["items"]) == 1000


def metadata_body(size: int, **fields: object) -> bytes:
    """A body of about `size` bytes, most of it a metadata list of small values."""
    return json.dumps({**fields, "metadata": {"a": [[] for _ in range(size // 4)]}}).encode()


@pytest.mark.parametrize(("path", "fields"), [
    ("/v1/search", {"query": "anything"}),
    ("/v1/memories", {"content": "one memory"}),
])
async def test_a_request_of_one_item_is_bounded_at_a_mib(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey, path: str,
    fields: dict[str, object],
) -> None:
    """Found by an exploratory probe: a 60 MiB body of small values under the 64 MiB
    bound took FastAPI's parser and the validation 10-25 s of the event loop before its
    422, every other request waiting. Only a batch may pass a MiB."""
    body = metadata_body(2 * MIB, **fields)

    async def chunked() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 64 * 1024):
            yield body[start:start + 64 * 1024]

    for content in (body, chunked()):
        resp = await client.post(path, content=content,
                                 headers={"Content-Type": "application/json"})
        assert resp.status_code == 413, resp.text
        assert resp.json()["type"].endswith("/payload_too_large")
        assert "1024 KiB" in resp.json()["detail"]
    assert await count_memories(resources, tenant) == 0
    batch = batch_of(2 * MIB)
    resp = await client.post("/v1/memories/batch", content=batch,
                             headers={"Content-Type": "application/json"})
    assert resp.status_code == 201, resp.text[:300]
