"""The restore's lock: a restore holds it alone for its whole run, a backup shares it
for its dump, and every start (the service's, a CLI command's) looks at it first.

The rule that a restore runs with nothing else on the database had been checked once,
at the restore's start (an exploratory probe): a service started meanwhile waited on the
replaced tables and then served, a `keys create` waited and then wrote into what the
restore was replacing, and a backup failed with pg_dump's "cache lookup failed". A restore
begun during a backup waited for the whole dump, saying nothing. Each now says what is
running. A session-level advisory lock, so a command killed outright lets it go with its
connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

_KEY = "hashtextextended('engram:restore', 0)"
_LOCK = text(f"SELECT pg_try_advisory_lock({_KEY})")
_UNLOCK = text(f"SELECT pg_advisory_unlock({_KEY})")
_SHARE = text(f"SELECT pg_try_advisory_lock_shared({_KEY})")
_UNSHARE = text(f"SELECT pg_advisory_unlock_shared({_KEY})")


class RestoreRunning(RuntimeError):
    """A restore is replacing the database's contents."""


class BackupRunning(RuntimeError):
    """A backup is dumping the database."""


_RESTORING = "a `restore` is running on this database"


async def refuse_during_restore(engine: AsyncEngine, what: str) -> None:
    """Raise RestoreRunning, saying to `what` once it is done, while a restore runs."""
    async with _autocommit(engine) as conn:
        if not await conn.scalar(_SHARE):
            raise RestoreRunning(f"{_RESTORING}; {what} once it is done")
        await conn.scalar(_UNSHARE)


@asynccontextmanager
async def restoring(engine: AsyncEngine) -> AsyncIterator[None]:
    """Hold the lock alone for the block; BackupRunning while a backup shares it."""
    async with _autocommit(engine) as conn:
        if not await conn.scalar(_LOCK):
            raise BackupRunning("a `backup` is running on this database; let it finish, "
                                "then restore again")
        try:
            yield
        finally:
            await conn.scalar(_UNLOCK)


@asynccontextmanager
async def backing_up(engine: AsyncEngine) -> AsyncIterator[None]:
    """Share the lock for the block; RestoreRunning while a restore holds it."""
    async with _autocommit(engine) as conn:
        if not await conn.scalar(_SHARE):
            raise RestoreRunning(f"{_RESTORING}; back up once it is done")
        try:
            yield
        finally:
            await conn.scalar(_UNSHARE)


@asynccontextmanager
async def _autocommit(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    # A connection of its own, outside any transaction: the lock is the session's.
    async with engine.connect() as conn:
        yield await conn.execution_options(isolation_level="AUTOCOMMIT")
