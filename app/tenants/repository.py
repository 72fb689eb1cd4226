"""SQL for tenants and API keys."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import Fetcher
from app.models import ApiKey, ChatSession, Memory, Tenant

# ix_api_keys_key_hash; a key hash is unique per tenant, and SHA-256 collisions across
# tenants are not a concern, so at most one row.
_TENANT_FOR_KEY_HASH = (
    "SELECT tenant_id FROM api_keys WHERE key_hash = $1 AND revoked_at IS NULL LIMIT 1"
)


class KeyLookup:
    """The API key lookup every authenticated request makes. One statement on the read
    pool (app/search/reader.py), not a session: through one it cost a pre-ping, BEGIN and
    COMMIT besides, 1.9-2.3 ms of every request (bench/auth.py)."""

    def __init__(self, db: Fetcher) -> None:
        self.db = db

    async def tenant_for_key_hash(self, key_hash: bytes) -> uuid.UUID | None:
        rows = await self.db.fetch(_TENANT_FOR_KEY_HASH, key_hash)
        return rows[0][0] if rows else None


@dataclass(frozen=True)
class TenantSummary:
    id: uuid.UUID
    name: str
    created_at: datetime
    active_keys: int
    memories: int
    sessions: int


class TenantRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def ensure_tenant(self, name: str) -> Tenant:
        await self.session.execute(
            insert(Tenant).values(id=uuid.uuid4(), name=name)
            .on_conflict_do_nothing(index_elements=["name"])
        )
        return (await self.session.scalars(select(Tenant).where(Tenant.name == name))).one()

    async def get_tenant(self, name: str) -> Tenant | None:
        return (
            await self.session.scalars(select(Tenant).where(Tenant.name == name))
        ).one_or_none()

    async def add_key(self, tenant_id: uuid.UUID, name: str | None, prefix: str,
                      key_hash: bytes) -> ApiKey:
        key = ApiKey(tenant_id=tenant_id, id=uuid.uuid4(), name=name, prefix=prefix,
                     key_hash=key_hash)
        self.session.add(key)
        await self.session.flush()
        return key

    async def list_keys(self, tenant_id: uuid.UUID | None) -> Sequence[tuple[ApiKey, str]]:
        stmt = select(ApiKey, Tenant.name).join(Tenant, Tenant.id == ApiKey.tenant_id)
        if tenant_id is not None:
            stmt = stmt.where(ApiKey.tenant_id == tenant_id)
        stmt = stmt.order_by(Tenant.name, ApiKey.created_at)
        return [(row[0], row[1]) for row in (await self.session.execute(stmt)).all()]

    async def revoke(self, key_id: uuid.UUID) -> bool:
        result = await self.session.execute(
            update(ApiKey).where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None))
            .values(revoked_at=func.now()).returning(ApiKey.id)
        )
        return result.first() is not None

    async def summaries(self, name: str | None = None) -> list[TenantSummary]:
        """Every tenant (or the one named) with its active keys, memories and sessions, by
        name."""
        keys = (select(func.count()).select_from(ApiKey)
                .where(ApiKey.tenant_id == Tenant.id, ApiKey.revoked_at.is_(None))
                .scalar_subquery())
        memories = (select(func.count()).select_from(Memory)
                    .where(Memory.tenant_id == Tenant.id).scalar_subquery())
        sessions = (select(func.count()).select_from(ChatSession)
                    .where(ChatSession.tenant_id == Tenant.id).scalar_subquery())
        stmt = select(Tenant.id, Tenant.name, Tenant.created_at, keys, memories, sessions)
        if name is not None:
            stmt = stmt.where(Tenant.name == name)
        rows = await self.session.execute(stmt.order_by(Tenant.name))
        return [TenantSummary(*row) for row in rows.all()]

    async def delete(self, tenant_id: uuid.UUID) -> bool:
        """Delete the tenant's row; the foreign keys cascade to whatever it still holds."""
        result = await self.session.execute(
            delete(Tenant).where(Tenant.id == tenant_id).returning(Tenant.id))
        return result.first() is not None
