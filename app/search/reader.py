"""The search's own connection pool: plain asyncpg, one round trip per statement.

A search's statements only read, so they need no transaction around them. Through the
request's SQLAlchemy session the single statement of the time cost five round trips
(the pool's pre-ping, BEGIN, a set_config for the plan settings, the statement, COMMIT)
and 3-4.5 ms more than the statement alone at 100k rows (bench/search.py). Here the
connections start with the settings the statements need (generic plans, no parallel
workers), are not pinged, and are not reset on release: a search changes no session
state. The API key lookup of every authenticated request (app/auth.py) runs here too,
for the same reason: one read statement. The memory and session endpoints' reads run on
a second pool of the same kind whose connections plan each statement for its parameters
(`memory_read_settings`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Any

import asyncpg
from sqlalchemy.ext.asyncio import AsyncEngine

from app import db_tcp, db_timeout
from app.db import CONNECT_TIMEOUT_SECONDS, asyncpg_dsn, server_settings
from app.errors import DatabaseUnavailable, pool_wait_expired, statement_timed_out
from app.settings import Settings

log = logging.getLogger("engram.search")

# A pooled connection the server closed (restart, idle timeout, terminated backend).
# InternalClientError too: a connection whose backend was terminated while it sat idle
# can be handed out before asyncpg has seen its socket close, and its first statement
# then fails with "another operation is in progress" (the unsolicited FATAL message left
# its protocol mid-answer). Every statement here only reads, so a retry is safe.
_STALE = (asyncpg.PostgresConnectionError, asyncpg.AdminShutdownError, ConnectionError,
          asyncpg.InternalClientError)

# A statement cancelled mid-way (the shutdown cut its request) leaves its connection
# waiting for the server to answer the cancel; asyncpg's release and pool close wait for
# that without end, so a backend that never answers held the request, and then the
# shutdown, for good. Past these bounds the connection is thrown away instead (as
# SQLAlchemy's asyncpg driver gives a cancelled connection 2 s).
RELEASE_SECONDS = 2.0
CLOSE_SECONDS = 5.0


def search_server_settings(settings: Settings) -> dict[str, str]:
    return {
        **server_settings(settings),
        "application_name": "engram-search",
        # The search statements are written to have one plan for every scope
        # (app/search/repository.py); planning them each time took ~3 ms.
        "plan_cache_mode": "force_generic_plan",
        # The planner costed a gated branch as a parallel scan, and starting the workers
        # took ~6 ms even when the branch never ran.
        "max_parallel_workers_per_gather": "0",
    }


def memory_read_settings(settings: Settings) -> dict[str, str]:
    """The memory and session endpoints' reads (MemoryReader, SessionReader) run on a
    pool of their own, planned for their parameters as the request sessions' statements
    are: a listing filtered by a rare category or a common tag took 27-37 ms under the
    search's generic plans against 0.5-0.6 ms under custom ones (100k rows)."""
    return {**server_settings(settings), "application_name": "engram-reads"}


async def _keep_session(conn: Any) -> None:
    """Release without the reset query (a round trip): a search sets nothing."""


class SearchReader:
    """An asyncpg pool on the engine's database, for the search statements and the other
    single read statements on every request's path (the API key lookup): a Fetcher."""

    def __init__(self, pool: Any, wait_seconds: float, statement_seconds: float) -> None:
        self._pool = pool
        self._wait = wait_seconds
        self._statement_seconds = statement_seconds

    @classmethod
    async def open(cls, engine: AsyncEngine, settings: Settings,
                   session_settings: dict[str, str] | None = None) -> SearchReader:
        """A pool whose connections start with `session_settings` (the search's, unless
        given: the memory endpoints' reads pass `memory_read_settings`)."""
        bound = settings.db_statement_timeout_seconds
        pool = await asyncpg.create_pool(
            asyncpg_dsn(engine),
            min_size=1,
            max_size=settings.db_pool_size,
            timeout=CONNECT_TIMEOUT_SECONDS,
            command_timeout=db_timeout.client_timeout(bound),
            server_settings={**(session_settings or search_server_settings(settings)),
                             **db_timeout.server_settings(bound)},
            reset=_keep_session,
            init=db_tcp.pool_init(settings.db_tcp_timeout_seconds),
        )
        return cls(pool, settings.db_pool_timeout_seconds, bound)

    async def fetch(self, query: str, *args: Any) -> Sequence[Sequence[Any]]:
        try:
            return await self._fetch(query, *args)
        except _STALE as exc:
            # The statement only reads, so it is safe to run again. The pool's other idle
            # connections are likely stale too (a server restart): replace them all.
            log.info("search connection lost (%s); retrying on a new one", exc)
            await self._pool.expire_connections()
            return await self._fetch(query, *args)

    async def _fetch(self, query: str, *args: Any) -> Sequence[Sequence[Any]]:
        waited = asyncio.timeout(self._wait)
        try:
            # Not acquire(timeout=): that wraps every acquire in a task (asyncio.wait_for),
            # on the search's path twice a request.
            async with waited:
                connection = await self._pool.acquire()
        except TimeoutError as exc:
            if waited.expired():
                raise pool_wait_expired(self._wait) from exc
            # A new connection the server did not answer within CONNECT_TIMEOUT_SECONDS:
            # a database that stopped answering, not a busy pool (a frozen server's
            # requests had answered database_busy, "no connection free within 30 s",
            # after 10 s, and logged nothing; an observability probe).
            log.warning("the database did not answer a new read connection within %g s",
                        CONNECT_TIMEOUT_SECONDS)
            raise DatabaseUnavailable("the database did not answer a new connection; "
                                      "retry later") from exc
        try:
            rows: Sequence[Sequence[Any]] = await connection.fetch(query, *args)
        except TimeoutError as exc:
            # The server did not answer (it would have cancelled the statement itself
            # first): the connection still waits for that answer, so it is not reused.
            connection.terminate()
            log.warning("a read statement had no answer from the database (bounded at %g s)",
                        self._statement_seconds)
            raise statement_timed_out(self._statement_seconds) from exc
        finally:
            await self._give_back(connection)
        return rows

    async def _give_back(self, connection: Any) -> None:
        try:
            await self._pool.release(connection, timeout=RELEASE_SECONDS)
        except TimeoutError:
            # asyncpg has terminated it; what the request was doing (a cut, an error)
            # goes on unwinding as it was.
            log.warning("a read connection did not answer the cancel of its statement "
                        "within %.0f s; closed", RELEASE_SECONDS)

    async def close(self) -> None:
        try:
            await asyncio.wait_for(self._pool.close(), CLOSE_SECONDS)
        except TimeoutError:
            log.warning("read connections still in use after %.1f s; closed",
                        CLOSE_SECONDS)
            self._pool.terminate()
