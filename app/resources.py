"""Process-wide resources: the database (embedded or not), the engine, the embedder."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db import create_engine, create_sessionmaker
from app.embedded_db import EmbeddedPostgres, start_embedded
from app.migrate import upgrade_to_head
from app.providers.embedder import Embedder, build_embedder
from app.settings import Settings

log = logging.getLogger("engram")


@dataclass
class Resources:
    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    embedder: Embedder
    embedded: EmbeddedPostgres | None = None
    database_label: str = "external"
    background: list[asyncio.Task[None]] = field(default_factory=list)

    async def close(self) -> None:
        for task in self.background:
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        await self.embedder.aclose()
        await self.engine.dispose()
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)


async def open_database(settings: Settings) -> tuple[str, EmbeddedPostgres | None]:
    if settings.async_database_url is not None:
        return settings.async_database_url, None
    embedded = await asyncio.to_thread(
        start_embedded,
        settings.data_dir,
        shared_buffers_mb=settings.embedded_shared_buffers_mb,
        maintenance_work_mem_mb=settings.embedded_maintenance_work_mem_mb,
    )
    return embedded.url, embedded


async def build_resources(settings: Settings, *, migrate: bool = True) -> Resources:
    url, embedded = await open_database(settings)
    engine = create_engine(url, settings)
    try:
        if migrate:
            await upgrade_to_head(engine)
        embedder = build_embedder(settings)
        load = getattr(embedder, "load", None)
        if load is not None:
            await load()
    except BaseException:
        await engine.dispose()
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)
        raise
    label = f"embedded PostgreSQL in {embedded.pgdata}" if embedded else "ENGRAM_DATABASE_URL"
    return Resources(settings, engine, create_sessionmaker(engine), embedder, embedded, label)
