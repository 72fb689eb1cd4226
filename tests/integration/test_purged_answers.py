"""What the service forgets by itself takes the keyed answers that quote it: a memory the
expiry purge deletes, a first state the history lets go (by its bound or its retention),
a session purged as idle. The answer becomes the 410 `answer_erased`, as after a delete,
and a retry with the key still does nothing again (found by the day-2 probe's follow-up:
each of these answers outlived what it quoted by the key's hours)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import text

from app.memories.repository import purge_expired, purge_versions_replaced_before
from app.resources import Resources
from app.sessions.repository import purge_idle
from tests.conftest import TenantKey
from tests.integration.memories.test_history_bounds import age as age_version
from tests.integration.sessions.conftest import new_id
from tests.integration.sessions.test_session_retention import RETENTION
from tests.integration.sessions.test_session_retention import age as age_session

SECRET = "the vault code is 4471-SECRETQ"


async def keyed(client: httpx.AsyncClient, path: str, key: str,
                body: dict[str, Any]) -> httpx.Response:
    return await client.post(path, json=body, headers={"Idempotency-Key": key})


async def stored_answer(resources: Resources, tenant: TenantKey, key: str) -> tuple[int, str]:
    async with resources.engine.connect() as conn:
        row = (await conn.execute(text(
            "SELECT status_code, response_body FROM idempotency_keys "
            "WHERE tenant_id = :t AND key = :k"), {"t": tenant.tenant_id, "k": key})).one()
    return row[0], row[1]


async def assert_erased(client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
                        path: str, key: str, body: dict[str, Any]) -> None:
    status, stored = await stored_answer(resources, tenant, key)
    assert status == 410, stored
    assert "SECRETQ" not in stored
    retry = await keyed(client, path, key, body)
    assert retry.status_code == 410, retry.text
    assert retry.json()["type"].endswith("/answer_erased")
    assert "SECRETQ" not in retry.text


async def test_the_expiry_purge_erases_the_answers_of_what_it_deletes(
    resources: Resources, tenant: TenantKey, client: httpx.AsyncClient,
) -> None:
    # Accepted, and gone at once for every read (an expired memory is absent); the purge
    # deletes it at its next round.
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    one = {"content": SECRET, "expires_at": past}
    batch = {"items": [{"content": SECRET, "expires_at": past}, {"content": "stays"}]}
    kept = {"content": "kept " + SECRET.replace("SECRETQ", "open")}
    for path, key, body in (("/v1/memories", "exp-one", one),
                            ("/v1/memories/batch", "exp-batch", batch),
                            ("/v1/memories", "exp-kept", kept)):
        assert (await keyed(client, path, key, body)).status_code == 201

    await purge_expired(resources.engine)

    await assert_erased(client, resources, tenant, "/v1/memories", "exp-one", one)
    await assert_erased(client, resources, tenant, "/v1/memories/batch", "exp-batch", batch)
    replay = await keyed(client, "/v1/memories", "exp-kept", kept)
    assert replay.status_code == 201
    assert replay.json()["content"] == kept["content"]


async def test_a_first_state_the_history_lets_go_takes_its_create_answer(
    resources: Resources, tenant: TenantKey, client: httpx.AsyncClient,
) -> None:
    """By the retention purge, and by the bound (ENGRAM_HISTORY_MAX_VERSIONS, 100 here)
    as a change drops the oldest state; not before the first state goes."""
    aged_body = {"content": SECRET}
    aged = (await keyed(client, "/v1/memories", "hist-aged", aged_body)).json()
    assert (await client.patch(f"/v1/memories/{aged['id']}",
                               json={"content": "rotated"})).status_code == 200
    await age_version(resources, aged["id"], 1, 45)
    await purge_versions_replaced_before(resources.engine, datetime.now(UTC) - timedelta(days=30))
    await assert_erased(client, resources, tenant, "/v1/memories", "hist-aged", aged_body)

    bound_body = {"content": SECRET + " bound"}
    bounded = (await keyed(client, "/v1/memories", "hist-bound", bound_body)).json()
    assert resources.settings.history_max_versions == 100
    for n in range(100):
        assert (await client.patch(f"/v1/memories/{bounded['id']}",
                                   json={"importance": n / 1000})).status_code == 200
    # Versions 1..100 are all kept: the answer still replays.
    replay = await keyed(client, "/v1/memories", "hist-bound", bound_body)
    assert replay.status_code == 201
    assert replay.json()["content"] == bound_body["content"]
    assert (await client.patch(f"/v1/memories/{bounded['id']}",
                               json={"importance": 0.9})).status_code == 200
    await assert_erased(client, resources, tenant, "/v1/memories", "hist-bound", bound_body)


async def test_the_idle_session_purge_erases_its_appends_answers(
    resources: Resources, tenant: TenantKey, client: httpx.AsyncClient,
) -> None:
    idle, active = new_id(), new_id()
    turn = {"role": "user", "content": SECRET}
    for sid, key in ((idle, "turn-idle"), (active, "turn-active")):
        resp = await keyed(client, f"/v1/sessions/{sid}/turns", key, turn)
        assert resp.status_code == 201, resp.text
    await age_session(resources, tenant, idle, 3)

    await purge_idle(resources.engine, RETENTION)

    await assert_erased(client, resources, tenant, f"/v1/sessions/{idle}/turns", "turn-idle",
                        turn)
    replay = await keyed(client, f"/v1/sessions/{active}/turns", "turn-active", turn)
    assert replay.status_code == 201
    assert replay.json()["content"] == SECRET
