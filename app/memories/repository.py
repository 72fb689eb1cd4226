"""SQL for memories. Every statement is confined to the repository's tenant."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Select, Table, and_, delete, func, insert, or_, select, tuple_, update
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from app.models import Memory
from app.models.vector import vector_text

_TABLE = cast(Table, Memory.__table__)
# The row dicts are keyed by attribute; a Core insert wants column names (`metadata_`
# is the column `metadata`).
_COLUMN = {a.key: a.columns[0].key for a in sa_inspect(Memory).column_attrs}
# From this many rows a batch's vectors are put in their text form off the event loop.
_TEXT_OFF_LOOP_ROWS = 16


def _vector_texts(vectors: Sequence[Any]) -> list[Any]:
    return [vector_text(v) if isinstance(v, list) else v for v in vectors]


@dataclass(frozen=True)
class MemoryFilter:
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    namespace: str | None = None
    tags: Sequence[str] | None = None
    categories: Sequence[str] | None = None
    fact_role: str | None = None
    include_archived: bool = False


def live(now: Any = None) -> Any:
    """Rows a reader may see at all: not expired."""
    moment = now if now is not None else func.now()
    return or_(Memory.expires_at.is_(None), Memory.expires_at > moment)


class MemoryRepository:
    def __init__(self, session: AsyncSession, tenant_id: uuid.UUID) -> None:
        self.session = session
        self.tenant_id = tenant_id

    def _select(self) -> Select[Memory]:
        return select(Memory).where(Memory.tenant_id == self.tenant_id)

    async def insert_many(self, rows: Sequence[dict[str, Any]]) -> None:
        # One multi-row statement: the statement triggers (the term statistics of migration
        # 0004) then fire once for the batch. Executed with a list of rows and RETURNING,
        # SQLAlchemy renders them into one INSERT per 1,000 ("insertmanyvalues") from a
        # cached compilation; `.values(rows)` compiled a new statement every time, ~150 ms
        # of the event loop for 500 rows, during which no other request moved. Through the
        # table, not the ORM entity: the ORM's bulk insert splits the rows into one
        # statement per set of non-None columns.
        if not rows:
            return
        params = [{_COLUMN.get(k, k): v for k, v in row.items()} | {"tenant_id": self.tenant_id}
                  for row in rows]
        if len(rows) >= _TEXT_OFF_LOOP_ROWS:
            # A vector's text form costs 50-110 us of Python. Made on a thread, which
            # gives the loop the GIL back every few ms, the longest stretch the event loop
            # stood still during a 500-row insert went from 44-90 to 7-23 ms.
            texts = await asyncio.to_thread(_vector_texts, [p.get("embedding") for p in params])
            for p, text in zip(params, texts, strict=True):
                p["embedding"] = text
        await self.session.execute(insert(_TABLE).returning(_TABLE.c.id), params)

    async def get(self, memory_id: uuid.UUID, *, for_update: bool = False) -> Memory | None:
        stmt = self._select().where(Memory.id == memory_id, live())
        if for_update:
            stmt = stmt.with_for_update()
        return (await self.session.scalars(stmt)).one_or_none()

    async def page(
        self,
        filters: MemoryFilter,
        *,
        limit: int,
        after: tuple[datetime, uuid.UUID] | None = None,
    ) -> list[Memory]:
        stmt = self._select().where(live(), *self._filter_predicates(filters))
        if after is not None:
            stmt = stmt.where(tuple_(Memory.created_at, Memory.id) < tuple_(*after))
        stmt = stmt.order_by(Memory.created_at.desc(), Memory.id.desc()).limit(limit)
        return list((await self.session.scalars(stmt)).all())

    @staticmethod
    def _filter_predicates(filters: MemoryFilter) -> list[Any]:
        preds: list[Any] = []
        for column, value in (
            (Memory.user_id, filters.user_id),
            (Memory.agent_id, filters.agent_id),
            (Memory.session_id, filters.session_id),
            (Memory.namespace, filters.namespace),
        ):
            if value is not None:
                preds.append(column == value)
        if filters.tags:
            preds.append(Memory.tags.contains(list(filters.tags)))
        if filters.categories:
            preds.append(Memory.category.in_(list(filters.categories)))
        if filters.fact_role is not None:
            preds.append(Memory.fact_role == filters.fact_role)
        if not filters.include_archived:
            preds.append(Memory.archived_at.is_(None))
        return preds

    async def update(self, memory_id: uuid.UUID, values: dict[str, Any]) -> Memory | None:
        stmt = (
            update(Memory)
            .where(and_(Memory.tenant_id == self.tenant_id, Memory.id == memory_id), live())
            .values(**values, updated_at=func.now())
            .returning(Memory)
            .execution_options(synchronize_session=False)
        )
        return (await self.session.scalars(stmt)).one_or_none()

    async def delete(self, memory_id: uuid.UUID) -> bool:
        # An expired memory is absent to DELETE as to GET and PATCH: otherwise the answer
        # (204 or 404) would depend on whether the maintenance purge had run yet.
        stmt = (
            delete(Memory)
            .where(Memory.tenant_id == self.tenant_id, Memory.id == memory_id, live())
            .returning(Memory.id)
        )
        return (await self.session.execute(stmt)).first() is not None


async def purge_expired(engine: AsyncEngine, batch: int = 1000) -> int:
    """Delete the memories past their expiry, across tenants (a maintenance job, not a
    request); how many. No reader can see them any more (`live`), but they still sat in
    the HNSW and full-text indexes, which a search then read past, and in BM25's term
    statistics. `batch` rows a transaction, so no round holds many locks or makes the
    statistics triggers fold a huge change at once; rows a request has locked are skipped
    and left for the next round, so neither waits for the other."""
    expired = (
        select(Memory.id)
        .where(Memory.expires_at <= func.now())
        .order_by(Memory.expires_at)
        .limit(batch)
        .with_for_update(skip_locked=True)
    )
    stmt = delete(Memory).where(Memory.id.in_(expired.scalar_subquery()))
    total = 0
    while True:
        async with engine.begin() as conn:
            removed = int((await conn.execute(stmt)).rowcount or 0)
        total += removed
        if removed < batch:
            return total
