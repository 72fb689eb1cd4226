"""Schema upgrades at start-up and the readiness check that the schema is at head."""

from __future__ import annotations

import asyncio
import functools
import logging
from pathlib import Path
from types import ModuleType

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from sqlalchemy import Connection, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.errors import LOCK_NOT_AVAILABLE, sqlstate

log = logging.getLogger("engram.migrate")

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Any constant works; it only has to be the same in every replica.
MIGRATION_LOCK_ID = 0x456E6772616D


class MissingVectorExtension(RuntimeError):
    pass


def alembic_config(url: str | None = None) -> Config:
    cfg = Config(str(PROJECT_ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(PROJECT_ROOT / "migrations"))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


@functools.cache
def _scripts() -> ScriptDirectory:
    # Read once: the migrations this process's code came with. Files replaced on disk
    # before a restart (a deploy) are the next process's; and a readiness probe read
    # the directory each time (~10 ms).
    return ScriptDirectory.from_config(alembic_config())


def head_revision() -> str | None:
    return _scripts().get_current_head()


def known_revision(revision: str) -> bool:
    """Whether this version's migrations include `revision` (a newer version's do not)."""
    try:
        return _scripts().get_revision(revision) is not None
    except CommandError:
        return False


def newer_schema(current: set[str]) -> str | None:
    """Why this version cannot run on a schema a newer version migrated, if it was."""
    unknown = sorted(r for r in current if not known_revision(r))
    if not unknown:
        return None
    return (f"the schema is at {', '.join(unknown)}, which this version of Engram (head "
            f"{head_revision()}) does not know: a newer version migrated it; run that version")


def utf8_encoded(connection: Connection) -> bool:
    """Whether the database is UTF8, as PostgreSQL's normalize() needs (the migrations
    that read text in a Unicode form leave another encoding's rows as they are)."""
    encoding = connection.exec_driver_sql("SHOW server_encoding").scalar()
    return str(encoding).upper() in {"UTF8", "UTF-8"}


def revision_module(revision: str) -> ModuleType:
    """A migration's module, for a later migration's downgrade to restore the SQL that
    revision wrote (a migration freezes its own SQL rather than import the current one)."""
    script = _scripts().get_revision(revision)
    if script is None:
        raise LookupError(f"no migration {revision}")
    module: ModuleType = script.module
    return module


def _upgrade(connection: Connection, revision: str) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = connection
    command.upgrade(cfg, revision)


def _downgrade(connection: Connection, revision: str) -> None:
    cfg = alembic_config()
    cfg.attributes["connection"] = connection
    command.downgrade(cfg, revision)


async def require_vector_extension(engine: AsyncEngine) -> None:
    async with engine.connect() as conn:
        available = await conn.scalar(
            text("SELECT count(*) FROM pg_available_extensions WHERE name = 'vector'")
        )
    if not available:
        raise MissingVectorExtension(
            "the PostgreSQL server at ENGRAM_DATABASE_URL has no `vector` extension; "
            "install pgvector 0.8 or newer on it (or unset ENGRAM_DATABASE_URL to use "
            "the embedded PostgreSQL)"
        )


class MigrationLockTimeout(RuntimeError):
    """A migration could not take a table's lock: long transactions held it."""


class SchemaNewer(RuntimeError):
    """The schema was migrated by a newer version of Engram than this one."""



async def upgrade_to_head(engine: AsyncEngine, revision: str = "head", *,
                          lock_timeout_seconds: float = 10.0, attempts: int = 6,
                          retry_delay_seconds: float = 2.0) -> None:
    """Upgrade under an advisory lock, so replicas starting together migrate once.

    A migration that alters a table waits for the transactions using it, and every
    statement on that table then queues behind the migration: one long transaction of
    an older replica in a rolling deploy would stall the whole fleet. So each attempt
    waits at most `lock_timeout_seconds` for a table's lock (0: without end), rolls
    back on giving up, and tries again later, the delay doubling, up to `attempts`.
    The advisory lock itself is waited for without a bound: another replica may be
    migrating for minutes (an index build).
    """
    await require_vector_extension(engine)
    # Alembic's own word for it was "Can't locate revision identified by '0028'".
    if (newer := newer_schema(await current_revisions(engine))) is not None:
        raise SchemaNewer(newer)
    for attempt in range(1, attempts + 1):
        try:
            async with engine.begin() as conn:
                await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"),
                                   {"id": MIGRATION_LOCK_ID})
                # Again under the lock: a newer version may have migrated while this
                # one waited for it.
                if (newer := newer_schema(await revisions_in(conn))) is not None:
                    raise SchemaNewer(newer)
                await conn.execute(text("SELECT set_config('lock_timeout', :ms, true)"),
                                   {"ms": f"{round(lock_timeout_seconds * 1000)}ms"})
                await conn.run_sync(_upgrade, revision)
            return
        except DBAPIError as exc:
            if sqlstate(exc) != LOCK_NOT_AVAILABLE:
                raise
            if attempt == attempts:
                raise MigrationLockTimeout(
                    f"a migration waited {lock_timeout_seconds:g} s for a table's lock "
                    f"{attempts} times and gave up; long transactions hold it (see "
                    "pg_stat_activity). Nothing was changed; start again once they end"
                ) from exc
            delay = min(30.0, retry_delay_seconds * 2 ** (attempt - 1))
            log.warning("a migration waited %g s for a table's lock (attempt %d of %d); "
                        "rolled back, trying again in %g s", lock_timeout_seconds, attempt,
                        attempts, delay)
            await asyncio.sleep(delay)


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(_downgrade, revision)


async def current_revisions(engine: AsyncEngine) -> set[str]:
    """The schema's revisions, read directly: cheap enough for every readiness probe, and
    without Alembic's migration context logging on each call."""
    async with engine.connect() as conn:
        return await revisions_in(conn)


async def revisions_in(conn: AsyncConnection) -> set[str]:
    exists = await conn.scalar(text("SELECT to_regclass('alembic_version') IS NOT NULL"))
    if not exists:
        return set()
    rows = await conn.execute(text("SELECT version_num FROM alembic_version"))
    return {row[0] for row in rows}
