"""The restore's lock: a restore holds it alone for its whole run, a backup shares it
for its dump, and every start (the service's, a CLI command's) looks at it first.

The rule that a restore runs with nothing else on the database had been checked once,
at the restore's start (an exploratory probe): a service started meanwhile waited on the
replaced tables and then served, and a backup failed with pg_dump's "cache lookup
failed". A restore begun during a backup waited for the whole dump, saying nothing. Each
now says what is running. A session-level advisory lock, so a command killed outright
lets it go with its connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from sqlalchemy import TextClause, text
from sqlalchemy.ext.asyncio import AsyncEngine

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
    async with _held(engine, _SHARE, _UNSHARE,
                     RestoreRunning(f"{_RESTORING}; {what} once it is done")):
        pass


def restoring(engine: AsyncEngine) -> AbstractAsyncContextManager[None]:
    """Hold the lock alone for the block; BackupRunning while a backup shares it."""
    return _held(engine, _LOCK, _UNLOCK,
                 BackupRunning("a `backup` is running on this database; let it finish, "
                               "then restore again"))


def backing_up(engine: AsyncEngine) -> AbstractAsyncContextManager[None]:
    """Share the lock for the block; RestoreRunning while a restore holds it."""
    return _held(engine, _SHARE, _UNSHARE,
                 RestoreRunning(f"{_RESTORING}; back up once it is done"))


@asynccontextmanager
async def _held(engine: AsyncEngine, take: TextClause, release: TextClause,
                refused: Exception) -> AsyncIterator[None]:
    # On a connection of its own, outside any transaction: the lock is the session's.
    async with engine.connect() as conn:
        conn = await conn.execution_options(isolation_level="AUTOCOMMIT")
        if not await conn.scalar(take):
            raise refused
        try:
            yield
        finally:
            await conn.scalar(release)
