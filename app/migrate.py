"""Schema upgrades at start-up and the readiness check that the schema is at head."""

from __future__ import annotations

import logging
from pathlib import Path
from types import ModuleType

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, text
from sqlalchemy.ext.asyncio import AsyncEngine

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


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def revision_module(revision: str) -> ModuleType:
    """A migration's module, for a later migration's downgrade to restore the SQL that
    revision wrote (a migration freezes its own SQL rather than import the current one)."""
    script = ScriptDirectory.from_config(alembic_config()).get_revision(revision)
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


async def upgrade_to_head(engine: AsyncEngine, revision: str = "head") -> None:
    """Upgrade under an advisory lock, so replicas starting together migrate once."""
    await require_vector_extension(engine)
    async with engine.begin() as conn:
        await conn.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": MIGRATION_LOCK_ID})
        await conn.run_sync(_upgrade, revision)


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    async with engine.begin() as conn:
        await conn.run_sync(_downgrade, revision)


async def current_revisions(engine: AsyncEngine) -> set[str]:
    """The schema's revisions, read directly: cheap enough for every readiness probe, and
    without Alembic's migration context logging on each call."""
    async with engine.connect() as conn:
        exists = await conn.scalar(text("SELECT to_regclass('alembic_version') IS NOT NULL"))
        if not exists:
            return set()
        rows = await conn.execute(text("SELECT version_num FROM alembic_version"))
        return {row[0] for row in rows}
