"""Idempotency-Key on create and batch create: one write per key, the first answer replayed."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import replace
from typing import Any

import httpx
from sqlalchemy import text

from app.idempotency.service import request_hash
from app.resources import Resources
from tests.conftest import TenantKey, make_client

PROBLEM_JSON = "application/problem+json"
REPLAYED = "idempotent-replayed"


def new_key() -> str:
    return f"key-{uuid.uuid4()}"


async def count_rows(resources: Resources, tenant_id: uuid.UUID) -> int:
    async with resources.engine.connect() as conn:
        count = await conn.scalar(
            text("SELECT count(*) FROM memories WHERE tenant_id = :t"), {"t": tenant_id}
        )
    return int(count)


async def count_keys(resources: Resources, tenant_id: uuid.UUID) -> int:
    async with resources.engine.connect() as conn:
        count = await conn.scalar(
            text("SELECT count(*) FROM idempotency_keys WHERE tenant_id = :t"), {"t": tenant_id}
        )
    return int(count)


def assert_conflict(resp: httpx.Response) -> None:
    assert resp.status_code == 409, resp.text
    assert resp.headers["content-type"] == PROBLEM_JSON
    body = resp.json()
    assert body["status"] == 409
    assert body["type"].endswith("/conflict")
    assert "Idempotency-Key" in body["detail"]
    assert "Traceback" not in resp.text


async def test_retry_with_same_key_and_body_replays_the_first_answer_and_writes_once(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    headers = {"Idempotency-Key": new_key()}
    payload = {"content": "Carol prefers window seats.", "user_id": "carol",
               "tags": ["travel"], "importance": 0.8, "metadata": {"n": 1, "f": 0.1}}
    first = await client.post("/v1/memories", json=payload, headers=headers)
    second = await client.post("/v1/memories", json=payload, headers=headers)
    third = await client.post("/v1/memories", json=payload, headers=headers)

    assert first.status_code == 201
    assert REPLAYED not in first.headers
    for retry in (second, third):
        assert retry.status_code == 201
        assert retry.headers[REPLAYED] == "true"
        assert retry.headers["content-type"] == "application/json"
        assert retry.json() == first.json()
    assert await count_rows(resources, tenant.tenant_id) == 1
    assert await count_keys(resources, tenant.tenant_id) == 1
    got = await client.get(f"/v1/memories/{first.json()['id']}")
    assert got.json() == first.json()


async def test_same_key_with_a_different_body_is_409_and_keeps_the_original(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    headers = {"Idempotency-Key": new_key()}
    first = await client.post("/v1/memories", json={"content": "original"}, headers=headers)
    assert first.status_code == 201

    for changed in ({"content": "different"},
                    {"content": "original", "importance": 0.9},
                    {"content": "original", "tags": ["x"]}):
        assert_conflict(await client.post("/v1/memories", json=changed, headers=headers))

    # The conflict did not disturb the stored answer: the original body still replays.
    retry = await client.post("/v1/memories", json={"content": "original"}, headers=headers)
    assert retry.status_code == 201
    assert retry.json() == first.json()
    assert retry.headers[REPLAYED] == "true"
    assert await count_rows(resources, tenant.tenant_id) == 1


async def test_a_retry_that_spells_out_the_defaults_is_the_same_request(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    """Found by an exploratory probe: a generated client sends every default, a
    hand-written retry of the same create need not, and the two were a 409."""
    headers = {"Idempotency-Key": new_key()}
    first = await client.post("/v1/memories", json={"content": "eq", "tags": []},
                              headers=headers)
    assert first.status_code == 201
    for same in ({"content": "eq"},
                 {"tags": [], "content": "eq", "importance": 0.5, "user_id": None},
                 {"content": "eq", "category": "general", "source": "api", "metadata": {},
                  "expires_at": None, "created_at": None}):
        retry = await client.post("/v1/memories", json=same, headers=headers)
        assert retry.status_code == 201, retry.text
        assert retry.headers[REPLAYED] == "true"
        assert retry.json() == first.json()
    # A value other than the default is another request still.
    assert_conflict(await client.post("/v1/memories", json={"content": "eq", "importance": 0.6},
                                      headers=headers))
    batch_key = {"Idempotency-Key": new_key()}
    batch = await client.post("/v1/memories/batch", json={"items": [{"content": "b"}]},
                              headers=batch_key)
    spelt = await client.post("/v1/memories/batch", headers=batch_key, json={
        "items": [{"content": "b", "importance": 0.5, "tags": [], "namespace": None}]})
    assert spelt.headers[REPLAYED] == "true"
    assert spelt.json() == batch.json()
    assert await count_rows(resources, tenant.tenant_id) == 2


async def stored_as_before_the_upgrade(resources: Resources, tenant: TenantKey, key: str,
                                       operation: str, sent: dict[str, Any]) -> None:
    """The key's record as a version before 2026-12-01 22:07 stored it: the hash of the
    fields the request sent, defaults spelt out included."""
    async with resources.engine.begin() as conn:
        await conn.execute(
            text("UPDATE idempotency_keys SET request_hash = :h "
                 "WHERE tenant_id = :t AND key = :k"),
            {"h": request_hash(operation, sent), "t": tenant.tenant_id, "k": key})


async def test_a_retry_across_the_upgrade_of_a_key_hashed_the_older_way_replays(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    """Found by an upgrade probe: a generated client's create (every default spelt out),
    retried after the upgrade's restart, was a 409 where it had replayed: the older
    version had hashed the fields as sent."""
    spelt = {"content": "Idem defaults spelt out.", "user_id": "iu", "category": "general",
             "tags": [], "importance": 0.5, "metadata": {}, "source": "api"}
    key = new_key()
    first = await client.post("/v1/memories", json=spelt, headers={"Idempotency-Key": key})
    assert first.status_code == 201
    await stored_as_before_the_upgrade(resources, tenant, key, "createMemory", spelt)

    retry = await client.post("/v1/memories", json=spelt, headers={"Idempotency-Key": key})
    assert retry.status_code == 201, retry.text
    assert retry.headers[REPLAYED] == "true"
    assert retry.json() == first.json()
    # Another request under the key is still one.
    assert_conflict(await client.post("/v1/memories", json={**spelt, "importance": 0.6},
                                      headers={"Idempotency-Key": key}))
    batch_key = new_key()
    items = {"items": [{"content": "b", "importance": 0.5, "tags": []}]}
    batch = await client.post("/v1/memories/batch", json=items,
                              headers={"Idempotency-Key": batch_key})
    await stored_as_before_the_upgrade(resources, tenant, batch_key, "createMemories", items)
    again = await client.post("/v1/memories/batch", json=items,
                              headers={"Idempotency-Key": batch_key})
    assert again.headers[REPLAYED] == "true"
    assert again.json() == batch.json()
    assert await count_rows(resources, tenant.tenant_id) == 2


async def test_same_key_on_create_then_batch_create_is_409(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    headers = {"Idempotency-Key": new_key()}
    single = await client.post("/v1/memories", json={"content": "x"}, headers=headers)
    assert single.status_code == 201
    batch = await client.post("/v1/memories/batch", json={"items": [{"content": "x"}]},
                              headers=headers)
    assert_conflict(batch)
    assert await count_rows(resources, tenant.tenant_id) == 1


async def test_same_key_on_batch_create_then_create_is_409(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    headers = {"Idempotency-Key": new_key()}
    batch = await client.post("/v1/memories/batch", json={"items": [{"content": "x"}]},
                              headers=headers)
    assert batch.status_code == 201
    single = await client.post("/v1/memories", json={"content": "x"}, headers=headers)
    assert_conflict(single)
    assert await count_rows(resources, tenant.tenant_id) == 1


async def test_batch_retry_with_same_key_returns_identical_items_and_writes_once(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    headers = {"Idempotency-Key": new_key()}
    payload = {"items": [{"content": f"batch item {i}", "tags": [f"t{i}"]} for i in range(7)]}
    first = await client.post("/v1/memories/batch", json=payload, headers=headers)
    retry = await client.post("/v1/memories/batch", json=payload, headers=headers)
    assert first.status_code == retry.status_code == 201
    assert REPLAYED not in first.headers
    assert retry.headers[REPLAYED] == "true"
    assert retry.json() == first.json()
    assert [m["content"] for m in retry.json()["items"]] == [f"batch item {i}" for i in range(7)]
    assert await count_rows(resources, tenant.tenant_id) == 7

    reordered = {"items": list(reversed(payload["items"]))}
    assert_conflict(await client.post("/v1/memories/batch", json=reordered, headers=headers))
    assert await count_rows(resources, tenant.tenant_id) == 7


async def test_a_replay_is_the_first_answer_byte_for_byte(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    # Keys that jsonb would store in another order (it sorts shorter keys first), and
    # text that JSON could escape or not.
    metadata = {"zeta_longest": 1, "mid": {"yy": [0.1, "é ✓"], "b": None}, "a": True}
    single = {"content": "Dana's flight is at 9:40.", "metadata": metadata}
    batch = {"items": [single, {"content": "second", "tags": ["t"], "metadata": metadata}]}
    for path, payload in (("/v1/memories", single), ("/v1/memories/batch", batch)):
        headers = {"Idempotency-Key": new_key()}
        first = await client.post(path, json=payload, headers=headers)
        retry = await client.post(path, json=payload, headers=headers)

        assert first.status_code == retry.status_code == 201, path
        assert retry.headers[REPLAYED] == "true", path
        assert retry.content == first.content, path
        assert retry.headers["content-type"] == first.headers["content-type"], path
        assert list(retry.json()) == list(first.json()), path
    assert await count_rows(resources, tenant.tenant_id) == 3


async def test_concurrent_duplicates_all_get_the_first_answer_and_one_row_is_written(
    resources: Resources, tenant: TenantKey
) -> None:
    headers = {**tenant.headers, "Idempotency-Key": new_key()}
    payload = {"content": "written once, however many race", "user_id": "racer"}
    clients = [make_client(resources, headers) for _ in range(5)]
    try:
        responses = await asyncio.gather(
            *(c.post("/v1/memories", json=payload) for c in clients)
        )
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))

    assert [r.status_code for r in responses] == [201] * 5, [r.text for r in responses]
    assert len({r.json()["id"] for r in responses}) == 1
    assert all(r.json() == responses[0].json() for r in responses)
    assert sorted(r.headers.get(REPLAYED, "false") for r in responses) == (
        ["false"] + ["true"] * 4
    )
    assert await count_rows(resources, tenant.tenant_id) == 1


async def test_concurrent_duplicate_batches_write_the_batch_once(
    resources: Resources, tenant: TenantKey
) -> None:
    headers = {**tenant.headers, "Idempotency-Key": new_key()}
    payload = {"items": [{"content": f"racing batch item {i}"} for i in range(20)]}
    clients = [make_client(resources, headers) for _ in range(5)]
    try:
        responses = await asyncio.gather(
            *(c.post("/v1/memories/batch", json=payload) for c in clients)
        )
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))

    assert [r.status_code for r in responses] == [201] * 5
    assert all(r.json() == responses[0].json() for r in responses)
    assert await count_rows(resources, tenant.tenant_id) == 20


async def test_a_failed_request_does_not_consume_the_key(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    headers = {"Idempotency-Key": new_key()}
    bad = await client.post("/v1/memories", json={"content": "   "}, headers=headers)
    assert bad.status_code == 422
    bad_batch = await client.post("/v1/memories/batch", json={"items": []}, headers=headers)
    assert bad_batch.status_code == 422
    assert await count_keys(resources, tenant.tenant_id) == 0

    good = await client.post("/v1/memories", json={"content": "valid now"}, headers=headers)
    assert good.status_code == 201, good.text
    assert REPLAYED not in good.headers
    assert good.json()["content"] == "valid now"
    retry = await client.post("/v1/memories", json={"content": "valid now"}, headers=headers)
    assert retry.headers[REPLAYED] == "true"
    assert retry.json() == good.json()
    assert await count_rows(resources, tenant.tenant_id) == 1


async def test_a_conflicting_request_does_not_replace_the_stored_request(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    headers = {"Idempotency-Key": new_key()}
    first = await client.post("/v1/memories", json={"content": "A"}, headers=headers)
    assert_conflict(await client.post("/v1/memories", json={"content": "B"}, headers=headers))
    # Still conflicting with B, still replaying A: the 409 did not re-bind the key.
    assert_conflict(await client.post("/v1/memories", json={"content": "B"}, headers=headers))
    replay = await client.post("/v1/memories", json={"content": "A"}, headers=headers)
    assert replay.json() == first.json()
    assert await count_rows(resources, tenant.tenant_id) == 1


async def test_json_key_order_and_whitespace_do_not_change_the_body(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    headers = {"Idempotency-Key": new_key(), "content-type": "application/json"}
    compact = (b'{"content":"ordered","tags":["x","y"],"importance":0.25,'
               b'"metadata":{"b":1,"a":{"d":2,"c":3}}}')
    spread = (b'{\n  "metadata" : { "a" : { "c" : 3 , "d" : 2 } , "b" : 1 } ,\n'
              b'  "importance" : 0.25 ,\t"tags" : [ "x" , "y" ] ,\r\n  "content" : "ordered"\n}')
    first = await client.post("/v1/memories", content=compact, headers=headers)
    second = await client.post("/v1/memories", content=spread, headers=headers)
    assert first.status_code == second.status_code == 201
    assert second.headers[REPLAYED] == "true"
    assert second.json() == first.json()
    assert await count_rows(resources, tenant.tenant_id) == 1


async def test_requests_without_a_key_are_not_deduplicated(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    first = await client.post("/v1/memories", json={"content": "same"})
    second = await client.post("/v1/memories", json={"content": "same"})
    assert first.status_code == second.status_code == 201
    assert first.json()["id"] != second.json()["id"]
    assert REPLAYED not in second.headers
    assert await count_rows(resources, tenant.tenant_id) == 2
    assert await count_keys(resources, tenant.tenant_id) == 0


async def test_different_keys_with_the_same_body_create_separate_memories(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    a = await client.post("/v1/memories", json={"content": "same"},
                          headers={"Idempotency-Key": new_key()})
    b = await client.post("/v1/memories", json={"content": "same"},
                          headers={"Idempotency-Key": new_key()})
    assert a.status_code == b.status_code == 201
    assert a.json()["id"] != b.json()["id"]
    assert await count_rows(resources, tenant.tenant_id) == 2


class HeldEmbedder:
    """The resources' embedder, each call held until `release` is set."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name, self.vector_space = inner.name, inner.vector_space
        self.calls = 0
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def embed(self, texts: list[str]) -> Any:
        self.calls += 1
        self.entered.set()
        await self.release.wait()
        return await self.inner.embed(texts)

    async def embed_query(self, text: str) -> Any:
        return await self.inner.embed_query(text)

    async def aclose(self) -> None:
        pass


async def test_a_keyed_create_holds_no_connection_while_it_embeds_and_a_replay_embeds_nothing(
    resources: Resources, tenant: TenantKey,
) -> None:
    """Found by an exploratory probe: the key was claimed, opening the request's
    transaction, before the texts were embedded, so each keyed create held a writer
    connection idle in it for the whole embedding; 22 keyed batches of one tenant held
    all 20, and another tenant's write waited for one."""
    held = HeldEmbedder(resources.embedder)
    key = new_key()
    async with make_client(replace(resources, embedder=held), tenant.headers) as client:
        first = asyncio.create_task(client.post(
            "/v1/memories/batch", json={"items": [{"content": "held note"}]},
            headers={"Idempotency-Key": key}))
        await asyncio.wait_for(held.entered.wait(), 5)
        assert resources.engine.sync_engine.pool.checkedout() == 0
        held.release.set()
        answered = await asyncio.wait_for(first, 10)
        assert answered.status_code == 201, answered.text

        held.release.clear()
        again = await asyncio.wait_for(client.post(
            "/v1/memories/batch", json={"items": [{"content": "held note"}]},
            headers={"Idempotency-Key": key}), 10)

    assert again.status_code == 201
    assert again.headers[REPLAYED] == "true"
    assert again.content == answered.content
    assert held.calls == 1
    assert await count_rows(resources, tenant.tenant_id) == 1


async def test_erasing_what_a_stored_answer_holds_erases_the_answer_and_does_nothing_again(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey
) -> None:
    """Found by a day-2 probe: after a memory was deleted (alone, by its user, or its
    history erased), a retry with its create's key served its text back, and a backup
    held it, for the key's whole life (up to 30 days)."""
    secret = "my API password is hunter2-SECRETX9"

    async def keyed(path: str, key: str, body: dict[str, Any]) -> httpx.Response:
        return await client.post(path, json=body, headers={"Idempotency-Key": key})

    alone = (await keyed("/v1/memories", "k-alone", {"content": secret})).json()
    by_user = (await keyed("/v1/memories/batch", "k-user", {"items": [
        {"content": secret, "user_id": "gdpr"}, {"content": "other", "user_id": "gdpr"}]}))
    history = (await keyed("/v1/memories", "k-history", {"content": secret})).json()
    kept = await keyed("/v1/memories", "k-kept", {"content": "unrelated"})
    assert by_user.status_code == 201
    await client.patch(f"/v1/memories/{history['id']}", json={"content": "rotated"})

    assert (await client.delete(f"/v1/memories/{alone['id']}")).status_code == 204
    assert (await client.delete("/v1/memories", params={"user_id": "gdpr"})).json() == {
        "deleted": 2}
    assert (await client.delete(f"/v1/memories/{history['id']}/history")).status_code == 200

    for path, key, body in (("/v1/memories", "k-alone", {"content": secret}),
                            ("/v1/memories/batch", "k-user", {"items": [
                                {"content": secret, "user_id": "gdpr"},
                                {"content": "other", "user_id": "gdpr"}]}),
                            ("/v1/memories", "k-history", {"content": secret})):
        retry = await keyed(path, key, body)
        assert retry.status_code == 410, retry.text
        assert retry.headers["content-type"] == PROBLEM_JSON
        assert retry.headers[REPLAYED] == "true"
        assert retry.json()["type"].endswith("/answer_erased")
        assert retry.json()["request_id"] == retry.headers["x-request-id"]
        assert secret not in retry.text
    # Nothing was created again, and the answer naming nothing erased still replays.
    assert await count_rows(resources, tenant.tenant_id) == 2
    again = await keyed("/v1/memories", "k-kept", {"content": "unrelated"})
    assert again.content == kept.content
    async with resources.engine.connect() as conn:
        stored = (await conn.execute(text(
            "SELECT string_agg(response_body, ' ') FROM idempotency_keys "
            "WHERE tenant_id = :t"), {"t": tenant.tenant_id})).scalar()
    assert secret not in stored
