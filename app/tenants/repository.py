"""SQL for tenants and API keys."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import func, select, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession

from app.models import ApiKey, Tenant


class TenantRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def tenant_for_key_hash(self, key_hash: bytes) -> uuid.UUID | None:
        stmt = select(ApiKey.tenant_id).where(
            ApiKey.key_hash == key_hash, ApiKey.revoked_at.is_(None)
        )
        return (await self.session.execute(stmt)).scalar_one_or_none()

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
