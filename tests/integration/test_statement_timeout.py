"""A statement past ENGRAM_DB_STATEMENT_TIMEOUT_SECONDS: cancelled by the server when it
is stuck (here: queued behind a lock, as behind a migration's ALTER TABLE), given up on
by the client when the server does not answer at all (here: its backend stopped with
SIGSTOP, as by storage that hangs). Either way the request answers 503 database_timeout
instead of waiting without end, changes nothing, and the service goes on afterwards."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Awaitable, Callable

import httpx
import pytest
from sqlalchemy import text

from app.db import create_engine
from app.errors import DatabaseTimeout
from app.resources import Resources
from app.search.reader import SearchReader
from tests.conftest import (
    STATEMENT_BOUND,
    TenantKey,
    count_memories,
    make_client,
    memories_locked,
    reconfigured,
)


def assert_timed_out(resp: httpx.Response) -> None:
    assert resp.status_code == 503, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert resp.headers["retry-after"] == "1"
    body = resp.json()
    assert body["type"].endswith("/database_timeout")
    assert body["detail"] == (
        f"a database statement did not finish within {STATEMENT_BOUND:g} s; retry later")


Call = Callable[[httpx.AsyncClient, str], Awaitable[httpx.Response]]

# Each path's statements run on another of the service's connections: the engine's
# (the writes), the search's pool, the memory reads' pool.
CALLS: dict[str, Call] = {
    "write": lambda c, _: c.post("/v1/memories", json={"content": "written while stuck"}),
    "search": lambda c, _: c.post("/v1/search", json={"query": "stuck"}),
    "read": lambda c, memory_id: c.get(f"/v1/memories/{memory_id}"),
}
EXPECTED = {"write": 201, "search": 200, "read": 200}


async def remember(client: httpx.AsyncClient, content: str) -> str:
    created = await client.post("/v1/memories", json={"content": content})
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


@pytest.mark.parametrize("path", list(CALLS))
async def test_a_statement_stuck_behind_a_lock_is_cancelled_and_answers_503(
    bounded: Resources, resources: Resources, tenant: TenantKey, path: str,
) -> None:
    async with make_client(bounded, tenant.headers) as client:
        memory_id = await remember(client, "stuck in a queue")
        before = await count_memories(resources, tenant)

        async with memories_locked(resources):
            stuck = await CALLS[path](client, memory_id)
        # The same single connection of each pool serves the next request: the server
        # cancelled the statement and left the connection usable.
        after = await CALLS[path](client, memory_id)

    assert_timed_out(stuck)
    assert after.status_code == EXPECTED[path], after.text
    assert await count_memories(resources, tenant) == before + (path == "write")


async def backend_pid(res: Resources, path: str) -> int:
    """The backend of the one connection of the pool that `path`'s statements run on."""
    if path == "write":
        async with res.engine.connect() as conn:
            return int(await conn.scalar(text("SELECT pg_backend_pid()")) or 0)
    reader = await (res.search_reader() if path == "search" else res.memory_reader())
    assert isinstance(reader, SearchReader)
    return int((await reader.fetch("SELECT pg_backend_pid()"))[0][0])


@pytest.mark.parametrize("path", list(CALLS))
async def test_a_server_that_stops_answering_is_given_up_on_and_answers_503(
    bounded: Resources, resources: Resources, tenant: TenantKey, path: str,
) -> None:
    async with make_client(bounded, tenant.headers) as client:
        memory_id = await remember(client, "a frozen server")
        # Every pool holds its one connection now (the search's served the API key).
        assert (await CALLS["search"](client, memory_id)).status_code == 200
        assert (await CALLS["read"](client, memory_id)).status_code == 200
        before = await count_memories(resources, tenant)

        frozen = await backend_pid(bounded, path)
        os.kill(frozen, signal.SIGSTOP)
        try:
            stuck = await CALLS[path](client, memory_id)
        finally:
            os.kill(frozen, signal.SIGCONT)
        after = await CALLS[path](client, memory_id)
        replacement = await backend_pid(bounded, path)

    assert_timed_out(stuck)
    assert after.status_code == EXPECTED[path], after.text
    # The connection whose statement went unanswered was thrown away, not reused.
    assert replacement != frozen
    assert await count_memories(resources, tenant) == before + (path == "write")


async def test_an_unanswered_statement_in_a_transaction_discards_only_its_connection(
    bounded: Resources,
) -> None:
    """A statement (not the pool's ping) the server stopped answering mid-transaction."""
    engine = bounded.engine
    async with engine.connect() as conn:
        frozen = int(await conn.scalar(text("SELECT pg_backend_pid()")) or 0)
        os.kill(frozen, signal.SIGSTOP)
        try:
            with pytest.raises(DatabaseTimeout) as raised:
                await conn.execute(text("SELECT 1"))
        finally:
            os.kill(frozen, signal.SIGCONT)
        invalidated = conn.invalidated
    async with engine.connect() as conn:
        replacement = int(await conn.scalar(text("SELECT pg_backend_pid()")) or 0)

    assert raised.value.status == 503
    assert invalidated
    assert replacement != frozen


async def test_the_bound_is_set_on_the_services_connections_and_not_on_the_clis(
    resources: Resources, database_url: str,
) -> None:
    settings = resources.settings.model_copy(update={"db_statement_timeout_seconds": 2.5})
    service = create_engine(database_url, settings)
    cli = create_engine(database_url, settings, application_name="engram-cli", bounded=False)
    search = await SearchReader.open(service, settings)
    try:
        async with service.connect() as conn:
            service_value = await conn.scalar(text("SHOW statement_timeout"))
            raw = (await conn.get_raw_connection()).driver_connection
        async with cli.connect() as conn:
            cli_value = await conn.scalar(text("SHOW statement_timeout"))
        search_value = (await search.fetch("SHOW statement_timeout"))[0][0]
    finally:
        await search.close()
        await service.dispose()
        await cli.dispose()

    assert (service_value, search_value, cli_value) == ("2500ms", "2500ms", "0")
    assert raw is not None
    assert raw._config.command_timeout == 5.0


async def test_a_zero_bound_leaves_statements_unbounded(
    resources: Resources, database_url: str,
) -> None:
    settings = resources.settings.model_copy(update={"db_statement_timeout_seconds": 0})
    engine = create_engine(database_url, settings)
    try:
        async with engine.connect() as conn:
            value = await conn.scalar(text("SHOW statement_timeout"))
            raw = (await conn.get_raw_connection()).driver_connection
    finally:
        await engine.dispose()

    assert value == "0"
    assert raw is not None
    assert raw._config.command_timeout is None



async def test_a_statement_cancelled_by_an_operator_answers_503_saying_so(
    resources: Resources, database_url: str, tenant: TenantKey,
) -> None:
    """pg_cancel_backend on a request's statement (the same SQLSTATE as the timeout)."""
    async with (
        reconfigured(resources, database_url, db_pool_size=1, db_max_overflow=0,
                     db_statement_timeout_seconds=30) as res,
        make_client(res, tenant.headers) as client,
        memories_locked(resources),
    ):
        stuck = asyncio.ensure_future(client.post("/v1/memories", json={"content": "cancelled"}))
        waiting = await waiting_for_a_lock(resources)
        async with resources.engine.connect() as conn:
            await conn.execute(text("SELECT pg_cancel_backend(:p)"), {"p": waiting})
        resp = await stuck

    assert resp.status_code == 503, resp.text
    assert resp.headers["retry-after"] == "1"
    assert resp.json()["detail"] == ("a database statement was cancelled on the server "
                                     "(pg_cancel_backend); retry later")
    assert await count_memories(resources, tenant) == 0


async def waiting_for_a_lock(resources: Resources) -> int:
    """The backend of the one statement waiting for `memories_locked`'s lock."""
    for _ in range(200):
        async with resources.engine.connect() as conn:
            pid = await conn.scalar(text(
                "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND query ILIKE 'INSERT INTO memories%'"))
        if pid is not None:
            return int(pid)
        await asyncio.sleep(0.05)
    raise AssertionError("no statement came to wait for the lock")


async def test_a_cut_write_is_logged_without_what_it_would_have_stored(
    bounded: Resources, tenant: TenantKey, resources: Resources,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by an exploratory probe: the log line of a write cut by the bound held the
    statement's parameters, the content and user id among them, where no erasure reaches."""
    secret = "diagnosis PELICAN-DIAG-31"
    async with make_client(bounded, tenant.headers) as client, memories_locked(resources):
        stuck = await client.post("/v1/memories",
                                  json={"content": secret, "user_id": "sara-7731"})

    assert_timed_out(stuck)
    cut = [r.getMessage() for r in caplog.records if "statement cut" in r.getMessage()]
    assert cut, [r.getMessage() for r in caplog.records]
    assert not [m for m in cut if "PELICAN" in m or "sara-7731" in m], cut
