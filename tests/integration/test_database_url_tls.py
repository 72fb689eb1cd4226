"""A database URL with TLS and timeout parameters, in libpq's spelling or SQLAlchemy's,
reaches the server on every path: the engine's connections and the asyncpg pools'.
Before, `?sslmode=require` was a TypeError on the engine and `?ssl=require` a server
setting PostgreSQL refused on the pools, so no spelling let `serve` start.

The suite's server has no TLS, so `require` must fail as a refused TLS upgrade (proof
that the word reached the driver), and `disable` / `prefer` must connect."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest
from sqlalchemy import text

from app.db import asyncpg_dsn, create_engine
from app.settings import Settings
from tests.fakes.pg_forwarder import forwarding, tcp_url, unix_socket_path


@pytest.fixture
async def tcp_base(database_url: str) -> AsyncIterator[str]:
    async with forwarding(unix_socket_path(database_url), "127.0.0.1") as port:
        yield tcp_url("127.0.0.1", port)


@pytest.mark.parametrize("query", [
    "sslmode=disable", "sslmode=prefer", "ssl=disable", "ssl=prefer",
    "sslmode=prefer&connect_timeout=5&application_name=theirs",
    "sslmode=disable&target_session_attrs=read-write",
])
async def test_a_url_with_tls_and_timeout_parameters_connects_on_every_path(
    tcp_base: str, settings: Settings, query: str,
) -> None:
    engine = create_engine(f"{tcp_base}?{query}", settings)
    try:
        async with engine.connect() as conn:
            assert await conn.scalar(text("SELECT current_setting('application_name')")) \
                == "engram"
        pooled = await asyncpg.connect(asyncpg_dsn(engine))
        try:
            assert await pooled.fetchval("SELECT 1") == 1
        finally:
            await pooled.close()
    finally:
        await engine.dispose()


@pytest.mark.parametrize(("query", "sign"), [
    ("sslmode=require", "ssl"), ("ssl=require", "ssl"),
    # The CA file is read before the server is asked: its absence shows it was read.
    ("sslmode=verify-full&sslrootcert=/nonexistent/ca.pem", "no such file"),
])
async def test_a_url_requiring_tls_asks_the_server_for_it_on_every_path(
    tcp_base: str, settings: Settings, query: str, sign: str,
) -> None:
    engine = create_engine(f"{tcp_base}?{query}", settings)
    try:
        with pytest.raises(Exception) as on_engine:  # noqa: PT011
            async with engine.connect():
                pass
        with pytest.raises(Exception) as on_pool:  # noqa: PT011
            await asyncpg.connect(asyncpg_dsn(engine))
    finally:
        await engine.dispose()
    for caught in (on_engine.value, on_pool.value):
        words = f"{type(caught).__name__}: {caught}".lower()
        assert sign in words, words
        assert not isinstance(caught, TypeError)
