"""The engine, the session factory, the one-transaction-per-request dependency, and the
batched deletes: the purges' (a transaction each batch) and a request's (one in all)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Protocol

from fastapi import Request
from sqlalchemy import Delete, Row, event
from sqlalchemy.ext.asyncio import (
    AsyncConnection,
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.sql.dml import ReturningDelete

from app import db_tcp, db_timeout, db_url
from app.errors import COMMIT_CUT, answer_lost, commit_unanswered
from app.settings import Settings

CONNECT_TIMEOUT_SECONDS = 10


class Fetcher(Protocol):
    """One read statement, one round trip, no transaction: what the hot read paths (the
    search statements, the API key lookup) run on app/search/reader.py's asyncpg pool."""

    async def fetch(self, query: str, *args: Any) -> Sequence[Sequence[Any]]: ...


def jsonb(value: Any) -> Any:
    """A jsonb column as a `Fetcher` (plain asyncpg) reads it: its JSON text, decoded."""
    return json.loads(value) if isinstance(value, str) else value


def server_settings(settings: Settings) -> dict[str, str]:
    """The session settings every Engram connection starts with."""
    return {
        # asyncpg prepares statements; PostgreSQL may then switch a filtered vector query
        # to a generic plan that sorts a whole scope (measurements.md). Plan every time.
        "plan_cache_mode": "force_custom_plan",
        "application_name": "engram",
        # A filtered HNSW scan keeps going until it has enough rows that pass
        # the filter (pgvector 0.8); otherwise a scoped search returns too few.
        "hnsw.iterative_scan": "relaxed_order",
        "hnsw.ef_search": str(settings.hnsw_ef_search),
        "hnsw.max_scan_tuples": str(settings.hnsw_max_scan_tuples),
        # Read by the memories_history trigger (migration 0020): a connection without it
        # keeps every state.
        "engram.history_max_versions": str(settings.history_max_versions),
    }


def create_engine(url: str, settings: Settings, application_name: str = "engram", *,
                  bounded: bool = True) -> AsyncEngine:
    """The engine; `application_name` is how its connections show in pg_stat_activity
    (the CLI's say `engram-cli`, which a re-embedding tells from the service's). Its
    statements are bounded by `db_statement_timeout_seconds` unless not `bounded`: the
    migrations and the CLI's commands may build an index for minutes."""
    timeout = settings.db_statement_timeout_seconds if bounded else 0.0
    connect_args: dict[str, Any] = {
        "server_settings": {**server_settings(settings), **db_timeout.server_settings(timeout),
                            "application_name": application_name},
        "timeout": CONNECT_TIMEOUT_SECONDS,
    }
    if (client_timeout := db_timeout.client_timeout(timeout)) is not None:
        connect_args["command_timeout"] = client_timeout
    engine = create_async_engine(
        url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_timeout=settings.db_pool_timeout_seconds,
        pool_pre_ping=True,
        connect_args=connect_args,
        # A statement's failure is logged with its error, and its parameters are what
        # tenants stored (content, user ids, vectors): no erasure reaches a log.
        hide_parameters=True,
    )
    db_tcp.install(engine, settings.db_tcp_timeout_seconds)
    db_timeout.install(engine, timeout)

    def keywords(_dialect: Any, _record: Any, _args: Any, keywords: dict[str, Any]) -> None:
        db_url.connect_keywords(keywords)

    event.listen(engine.sync_engine, "do_connect", keywords)
    return engine


def asyncpg_dsn(engine: AsyncEngine) -> str:
    """The engine's URL as libpq/asyncpg spell it, for the code that uses asyncpg directly."""
    return db_url.dsn(engine.url)


Deleted = Callable[[AsyncConnection, "Sequence[Row[*tuple[Any, ...]]]"], Awaitable[object]]
"""What must go with a batch's deleted rows (its RETURNING), in their transaction."""


async def delete_in_batches(engine: AsyncEngine,
                            stmt: Delete | ReturningDelete[*tuple[Any, ...]], batch: int,
                            then: Deleted | None = None) -> int:
    """Run `stmt`, a DELETE of at most `batch` rows, one transaction at a time until a
    round deletes fewer; how many rows in all. For the maintenance purges: no round holds
    many locks for long. With `then`, `stmt` returns what `then` needs of the rows."""
    total = 0
    while True:
        async with engine.begin() as conn:
            result = await conn.execute(stmt)
            if then is None:
                removed = int(result.rowcount or 0)
            else:
                rows = result.all()
                removed = len(rows)
                await then(conn, rows)
        total += removed
        if removed < batch:
            return total


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return async_sessionmaker(engine, expire_on_commit=False, autoflush=False)


async def request_session(request: Request) -> AsyncIterator[AsyncSession]:
    """One transaction per request, committed before the response is sent.

    Used with `Depends(..., scope="function")`, so the exit code runs when the handler
    returns and a failed commit becomes an error answer instead of a false 2xx. A COMMIT
    whose answer never came (the server stopped answering, the connection broke) may
    have been applied, so a request that can change anything answers OutcomeUnknown
    then, not an error saying nothing changed.
    """
    maker: async_sessionmaker[AsyncSession] = request.app.state.resources.sessionmaker
    async with maker() as session:
        try:
            yield session
        except BaseException:
            await session.rollback()
            raise
        else:
            # Pending ORM changes first: a failure there is a statement's, and certain.
            await session.flush()
            try:
                await session.commit()
            except asyncio.CancelledError:
                # The shutdown cut the request mid-commit: the server may apply it anyway.
                if request.method not in _SAFE_METHODS:
                    request.scope.setdefault("state", {})[COMMIT_CUT] = True
                raise
            except Exception as exc:
                if request.method not in _SAFE_METHODS and answer_lost(exc):
                    raise commit_unanswered() from exc
                raise


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
