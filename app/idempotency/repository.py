"""SQL for idempotency records."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from app.models import IdempotencyRecord


class IdempotencyRepository:
    def __init__(self, session: AsyncSession, tenant_id: uuid.UUID) -> None:
        self.session = session
        self.tenant_id = tenant_id

    async def claim(self, key: str, operation: str, request_hash: bytes) -> bool:
        """Insert the key; False when it exists. A concurrent claim of the same key waits
        on the unique index until the first transaction ends, which is what makes a
        concurrent duplicate wait for the first request's answer."""
        stmt = (
            insert(IdempotencyRecord)
            .values(tenant_id=self.tenant_id, key=key, operation=operation,
                    request_hash=request_hash)
            .on_conflict_do_nothing(index_elements=["tenant_id", "key"])
            .returning(IdempotencyRecord.key)
        )
        return (await self.session.execute(stmt)).first() is not None

    async def get(self, key: str) -> IdempotencyRecord | None:
        stmt = select(IdempotencyRecord).where(
            IdempotencyRecord.tenant_id == self.tenant_id, IdempotencyRecord.key == key
        ).with_for_update()
        return (await self.session.scalars(stmt)).one_or_none()

    async def reclaim(self, key: str, operation: str, request_hash: bytes) -> None:
        await self.session.execute(
            update(IdempotencyRecord)
            .where(IdempotencyRecord.tenant_id == self.tenant_id, IdempotencyRecord.key == key)
            .values(operation=operation, request_hash=request_hash, status_code=None,
                    response_body=None, created_at=func.now())
        )

    async def complete(self, key: str, status_code: int, body: str) -> None:
        await self.session.execute(
            update(IdempotencyRecord)
            .where(IdempotencyRecord.tenant_id == self.tenant_id, IdempotencyRecord.key == key)
            .values(status_code=status_code, response_body=body)
        )


async def purge_older_than(engine: AsyncEngine, cutoff: datetime) -> int:
    """Forget keys past their retention, across tenants (a maintenance job, not a request)."""
    async with engine.begin() as conn:
        result = await conn.execute(
            delete(IdempotencyRecord).where(IdempotencyRecord.created_at < cutoff)
        )
        return int(result.rowcount or 0)
