"""The search's own asyncpg pool (the API key lookup's too) and the memory reads' pool:
the session their statements run in, their recovery when the server drops their
connections, and bounded waits when a backend stops answering."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import httpx
import pytest
from sqlalchemy import text

from app.errors import DatabaseUnavailable
from app.resources import Resources
from app.search import reader as reader_module
from app.search.reader import RELEASE_SECONDS, SearchReader
from tests.conftest import TenantKey, backends_frozen, lock_waiters, memories_locked


async def test_search_connections_start_with_the_plan_settings(resources: Resources) -> None:
    reader = await resources.search_reader()

    [row] = await reader.fetch(
        "SELECT current_setting('plan_cache_mode'), "
        "current_setting('max_parallel_workers_per_gather'), "
        "current_setting('application_name'), current_setting('hnsw.iterative_scan'), "
        "current_setting('hnsw.ef_search')"
    )

    assert tuple(row) == (
        "force_generic_plan", "0", "engram-search", "relaxed_order",
        str(resources.settings.hnsw_ef_search),
    )


async def test_memory_read_connections_plan_for_their_parameters(resources: Resources) -> None:
    reader = await resources.memory_reader()

    [row] = await reader.fetch(
        "SELECT current_setting('plan_cache_mode'), current_setting('application_name'), "
        "current_setting('hnsw.iterative_scan')"
    )

    # A listing filtered by a rare category took 27 ms under a generic plan, 0.6 custom.
    assert tuple(row) == ("force_custom_plan", "engram-reads", "relaxed_order")


async def drop_the_pools_connections(resources: Resources, pool: str = "engram-search") -> None:
    """What a server restart does to the pool: every one of its backends terminated."""
    async with resources.engine.connect() as conn:
        killed = (await conn.execute(text(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = :pool"
        ), {"pool": pool})).scalar_one()
    assert killed >= 1


async def test_a_search_after_the_server_dropped_its_connections_still_answers(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    created = await client.post("/v1/memories", json={"content": "Alice keeps bees"})
    assert created.status_code == 201, created.text
    first = await client.post("/v1/search", json={"query": "bees"})
    assert first.status_code == 200, first.text

    await drop_the_pools_connections(resources)

    again = await client.post("/v1/search", json={"query": "bees"})

    assert again.status_code == 200, again.text
    assert [r["memory"]["id"] for r in again.json()["results"]] == [created.json()["id"]]


async def test_the_key_lookup_after_the_server_dropped_the_pools_connections_still_answers(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    """Every authenticated request looks its key up on this pool first (app/auth.py), not
    only searches."""
    created = await client.post("/v1/memories", json={"content": "Alice keeps bees"})
    assert created.status_code == 201, created.text
    memory_id = created.json()["id"]

    await drop_the_pools_connections(resources)

    again = await client.get(f"/v1/memories/{memory_id}")

    assert again.status_code == 200, again.text
    assert again.json()["content"] == "Alice keeps bees"


async def test_memory_reads_after_the_server_dropped_their_pools_connections_still_answer(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    created = await client.post("/v1/memories", json={"content": "Alice keeps bees"})
    assert created.status_code == 201, created.text
    memory_id = created.json()["id"]
    assert (await client.get(f"/v1/memories/{memory_id}")).status_code == 200

    await drop_the_pools_connections(resources, "engram-reads")
    got = await client.get(f"/v1/memories/{memory_id}")
    await drop_the_pools_connections(resources, "engram-reads")
    listed = await client.get("/v1/memories")

    assert got.status_code == 200, got.text
    assert got.json() == created.json()
    assert listed.status_code == 200, listed.text
    assert [m["id"] for m in listed.json()["items"]] == [memory_id]


async def waiting_search_backend(conn: asyncpg.Connection) -> int:
    """The pid of the search pool's backend once it waits for `conn`'s lock."""
    for _ in range(250):
        pids = await lock_waiters(conn, "engram-search")
        if pids:
            (pid,) = pids
            return pid
        await asyncio.sleep(0.02)
    raise AssertionError("the statement never waited for the lock")


async def test_a_statement_cut_while_its_backend_never_answers_gives_its_connection_up(
    resources: Resources,
) -> None:
    """A search cut by the shutdown leaves its connection waiting for the server to answer
    the cancel. asyncpg's release waited for that without end, so a backend that never
    answered held the request, and then the pool's close, for good: now the connection
    is thrown away after RELEASE_SECONDS and the pool closes at once."""
    reader = await SearchReader.open(resources.engine, resources.settings)
    try:
        async with memories_locked(resources) as lock:
            statement = asyncio.create_task(reader.fetch("SELECT count(*) FROM memories"))
            backend = await waiting_search_backend(lock)
            with backends_frozen([backend]):
                statement.cancel()
                started = time.monotonic()
                done, _ = await asyncio.wait([statement], timeout=RELEASE_SECONDS + 5)
                gave_up_after = time.monotonic() - started
                assert done == {statement}, "still waiting for the frozen backend"
                assert statement.cancelled()  # the cut goes on unwinding as it was
                started = time.monotonic()
                await reader.close()
                closed_in = time.monotonic() - started
    finally:
        await reader.close()

    assert RELEASE_SECONDS - 0.2 <= gave_up_after < RELEASE_SECONDS + 2
    assert closed_in < 1


async def test_closing_a_pool_whose_connection_is_never_given_back_is_bounded(
    resources: Resources, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(reader_module, "CLOSE_SECONDS", 0.5)
    reader = await SearchReader.open(resources.engine, resources.settings)
    await reader._pool.acquire()  # never released: what a stuck statement does

    started = time.monotonic()
    await asyncio.wait_for(reader.close(), 10)

    assert time.monotonic() - started < 2
    assert "read connections still in use after 0.5 s; closed" in caplog.text


async def test_a_server_that_does_not_answer_a_new_connection_is_unavailable_not_busy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """An observability probe: with the database frozen, a read whose pool had to open a
    connection answered database_busy, "no database connection was free within 30 s",
    after the 10 s connect timeout, and logged nothing."""
    async def silent(reader_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)  # accepts, never answers: a frozen server

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = await asyncpg.create_pool(f"postgresql://u:p@127.0.0.1:{port}/d", min_size=0,
                                     max_size=1, timeout=0.3)
    reader = SearchReader(pool, 5.0, 5.0)
    try:
        started = time.monotonic()
        with pytest.raises(DatabaseUnavailable):
            await reader.fetch("SELECT 1")
        assert time.monotonic() - started < 2  # the connect timeout, not the pool wait
    finally:
        pool.terminate()
        server.close()
    assert "did not answer a new read connection" in caplog.text
