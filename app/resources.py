"""Process-wide resources: the database (embedded or not), the engine, the embedder."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from functools import cached_property

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db import create_engine, create_sessionmaker
from app.embedded_db import EmbeddedPostgres, start_embedded
from app.embedding_space.service import check_on_start
from app.migrate import upgrade_to_head
from app.providers.embedder import Embedder, build_embedder, load_embedder, probe_embedder
from app.providers.llm import LLMClient, build_llm_client
from app.restore_lock import refuse_during_restore
from app.search.config import build_limits, build_pipeline
from app.search.pipeline import SearchPipeline
from app.search.query_vectors import QueryVectorCache
from app.search.reader import SearchReader, memory_read_settings
from app.search.repository import RetrievalLimits
from app.settings import Settings
from app.tenants.concurrency import TenantSlots
from app.tenants.rate_limit import RateLimit, TenantRateLimiter

log = logging.getLogger("engram")

DISPOSE_SECONDS = 5.0


@dataclass
class Resources:
    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    embedder: Embedder
    embedded: EmbeddedPostgres | None = None
    database_label: str = "external"
    background: list[asyncio.Task[None]] = field(default_factory=list)
    # The LLM consolidation ops use; None when none is configured.
    llm: LLMClient | None = None
    # Opened by build_resources, else on the first search (see search_reader()).
    reader: SearchReader | None = None
    # The memory endpoints' reads (get, list): the same kind of pool, custom plans.
    reads: SearchReader | None = None
    _reader_lock: asyncio.Lock = field(default_factory=asyncio.Lock, repr=False)

    @cached_property
    def search_pipeline(self) -> SearchPipeline:
        return build_pipeline(self.settings)

    @cached_property
    def query_vectors(self) -> QueryVectorCache:
        return QueryVectorCache(self.settings.search_query_cache_size)

    @cached_property
    def rate_limiter(self) -> TenantRateLimiter:
        return TenantRateLimiter(RateLimit.of(self.settings.tenant_rate_limit,
                                              self.settings.tenant_rate_burst))

    @cached_property
    def tenant_slots(self) -> TenantSlots:
        return TenantSlots(self.settings.tenant_max_concurrent_requests)

    @cached_property
    def search_limits(self) -> RetrievalLimits:
        return build_limits(self.settings)

    async def search_reader(self) -> SearchReader:
        if self.reader is None:
            async with self._reader_lock:
                if self.reader is None:
                    self.reader = await SearchReader.open(self.engine, self.settings)
        return self.reader

    async def memory_reader(self) -> SearchReader:
        if self.reads is None:
            async with self._reader_lock:
                if self.reads is None:
                    self.reads = await SearchReader.open(
                        self.engine, self.settings, memory_read_settings(self.settings))
        return self.reads

    async def close(self) -> None:
        for task in self.background:
            task.cancel()
        await asyncio.gather(*self.background, return_exceptions=True)
        await self.embedder.aclose()
        close_llm = getattr(self.llm, "aclose", None)
        if close_llm is not None:
            await close_llm()
        # Each bounded, so a database that stopped answering (its connections open, its
        # backends silent) cannot hold the process up: the read pools by
        # SearchReader.close, side by side; the engine's idle connections here, where
        # asyncpg's close of each waited its command timeout (35 s), one after another.
        await asyncio.gather(*(pool.close() for pool in (self.reader, self.reads)
                               if pool is not None))
        try:
            await asyncio.wait_for(self.engine.dispose(), DISPOSE_SECONDS)
        except TimeoutError:
            log.warning("the database's connections did not close within %.0f s; they "
                        "end with the process", DISPOSE_SECONDS)
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


async def _migrate(url: str, settings: Settings) -> None:
    """Upgrade on connections of their own: a migration's index build may run for
    minutes, past the requests' statement timeout."""
    engine = create_engine(url, settings, bounded=False)
    try:
        await upgrade_to_head(
            engine, lock_timeout_seconds=settings.migration_lock_timeout_seconds)
    finally:
        await engine.dispose()


async def build_resources(settings: Settings, *, migrate: bool = True) -> Resources:
    url, embedded = await open_database(settings)
    engine = create_engine(url, settings)
    embedder: Embedder | None = None
    try:
        # Before the migration, which would wait on the tables a restore replaces.
        await refuse_during_restore(engine, "start the service")
        if migrate:
            await _migrate(url, settings)
        embedder = build_embedder(settings)
        await load_embedder(embedder)
        await probe_embedder(embedder)
        # Before anything is served: a search over another model's vectors would answer
        # at random, and a write would mix two models.
        await check_on_start(engine, embedder)
    except BaseException:
        if embedder is not None:
            await embedder.aclose()
        await engine.dispose()
        if embedded is not None:
            await asyncio.to_thread(embedded.stop)
        raise
    label = f"embedded PostgreSQL in {embedded.pgdata}" if embedded else "ENGRAM_DATABASE_URL"
    resources = Resources(settings, engine, create_sessionmaker(engine), embedder, embedded,
                          label, llm=build_llm_client(settings))
    try:
        await resources.search_reader()
        await resources.memory_reader()
    except BaseException:
        await resources.close()
        raise
    return resources
