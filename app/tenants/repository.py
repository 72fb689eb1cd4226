"""SQL for tenants and API keys."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from sqlalchemy import delete, func, select, text, update
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession

from app.db import Fetcher
from app.models import ApiKey, ChatSession, Memory, Tenant
from app.tenants.rate_limit import RateLimit
from app.unicode_forms import name_fold

Standing = Literal["active", "suspended", "gone"]

# ix_api_keys_key_hash; a key hash is unique per tenant, and SHA-256 collisions across
# tenants are not a concern, so at most one row. The tenant's own limits come in the
# same statement (its primary key), so a changed limit applies at the next request.
_OWNER_OF_KEY_HASH = (
    "SELECT k.tenant_id, t.rate_limit_per_second, t.rate_limit_burst, t.max_in_flight,"
    " t.max_memories_per_user, t.suspended_at, t.suspended_reason"
    " FROM api_keys k JOIN tenants t ON t.id = k.tenant_id"
    " WHERE k.key_hash = $1 AND k.revoked_at IS NULL LIMIT 1"
)


@dataclass(frozen=True)
class KeyOwner:
    tenant_id: uuid.UUID
    # The tenant's own limits; None: the service's default.
    rate_limit: RateLimit | None
    max_in_flight: int | None
    max_memories_per_user: int | None = None
    suspension: Suspension | None = None


@dataclass(frozen=True)
class Suspension:
    """Since when, and why, an operator has suspended a tenant."""

    since: datetime
    reason: str | None

    def since_text(self) -> str:
        return self.since.astimezone(UTC).isoformat(timespec="seconds")


class KeyLookup:
    """The API key lookup every authenticated request makes. One statement on the read
    pool (app/search/reader.py), not a session: through one it cost a pre-ping, BEGIN and
    COMMIT besides, 1.9-2.3 ms of every request (bench/auth.py)."""

    def __init__(self, db: Fetcher) -> None:
        self.db = db

    async def owner_of_key_hash(self, key_hash: bytes) -> KeyOwner | None:
        rows = await self.db.fetch(_OWNER_OF_KEY_HASH, key_hash)
        if not rows:
            return None
        (tenant_id, per_second, burst, max_in_flight, max_memories, suspended_at,
         reason) = rows[0]
        return KeyOwner(tenant_id,
                        None if per_second is None else RateLimit.of(per_second, burst),
                        max_in_flight, max_memories,
                        None if suspended_at is None else Suspension(suspended_at, reason))


@dataclass(frozen=True)
class TenantSummary:
    id: uuid.UUID
    name: str
    created_at: datetime
    active_keys: int
    memories: int
    sessions: int
    # The tenant's own limits (app/tenants/rate_limit.py, concurrency.py); None: the
    # service's default.
    rate_limit: RateLimit | None = None
    max_in_flight: int | None = None
    max_memories_per_user: int | None = None
    suspension: Suspension | None = None


class Keep(enum.Enum):
    KEEP = "keep"


KEEP = Keep.KEEP
"""A limit a change leaves as it is."""


@dataclass(frozen=True)
class LimitChange:
    """Which of a tenant's own limits to set: a value, None (the service's default), or
    KEEP."""

    rate: RateLimit | Keep | None = KEEP
    max_in_flight: int | Keep | None = KEEP
    max_memories_per_user: int | Keep | None = KEEP


class TenantRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def ensure_tenant(self, name: str) -> Tenant:
        await self.session.execute(
            insert(Tenant).values(id=uuid.uuid4(), name=name)
            .on_conflict_do_nothing(index_elements=["name"])
        )
        return (await self.session.scalars(select(Tenant).where(Tenant.name == name))).one()

    async def tenant_named_like(self, name: str) -> str | None:
        """The name of a tenant whose name differs from `name` only in letter case or
        Unicode form, if any, for a creation that more likely meant that tenant."""
        # Folded here, not by PostgreSQL's lower(): that never maps a capital sigma to
        # the final one, nor folds a composed accent with its decomposed form, so Greek
        # names ending in sigma, or "Café" typed on two platforms, made two tenants that
        # look alike (an exploratory probe).
        wanted = name_fold(name)
        names = await self.session.scalars(
            select(Tenant.name).where(Tenant.name != name).order_by(Tenant.name))
        return next((other for other in names if name_fold(other) == wanted), None)

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
        stmt = select(Tenant.id, Tenant.name, Tenant.created_at, keys, memories, sessions,
                      Tenant.rate_limit_per_second, Tenant.rate_limit_burst,
                      Tenant.max_in_flight, Tenant.max_memories_per_user,
                      Tenant.suspended_at, Tenant.suspended_reason)
        if name is not None:
            stmt = stmt.where(Tenant.name == name)
        rows = await self.session.execute(stmt.order_by(Tenant.name))
        return [TenantSummary(tid, tname, created, n_keys, n_memories, n_sessions,
                              None if rate is None else RateLimit.of(rate, burst), in_flight,
                              per_user,
                              None if since is None else Suspension(since, reason))
                for (tid, tname, created, n_keys, n_memories, n_sessions, rate, burst,
                     in_flight, per_user, since, reason) in rows.all()]

    async def suspend(self, name: str, reason: str | None) -> bool:
        """Suspend the tenant named `name` (again: the reason is replaced, the time kept);
        False when no tenant has the name."""
        result = await self.session.execute(
            update(Tenant).where(Tenant.name == name)
            .values(suspended_at=func.coalesce(Tenant.suspended_at, func.now()),
                    suspended_reason=reason)
            .returning(Tenant.id))
        return result.first() is not None

    async def standing(self, tenant_id: uuid.UUID) -> Standing:
        """Whether the tenant is active, suspended, or gone (deleted)."""
        suspended = await self.session.scalar(
            select(Tenant.suspended_at.is_not(None)).where(Tenant.id == tenant_id))
        return "gone" if suspended is None else "suspended" if suspended else "active"

    async def resume(self, name: str) -> bool:
        """Lift the tenant's suspension, if any; False when no tenant has the name."""
        result = await self.session.execute(
            update(Tenant).where(Tenant.name == name)
            .values(suspended_at=None, suspended_reason=None).returning(Tenant.id))
        return result.first() is not None

    async def set_limits(self, name: str, change: LimitChange) -> bool:
        """Set the limits `change` names (None: the service's default again), leave the
        others; False when no tenant has the name."""
        values: dict[str, object] = {}
        if change.rate is not KEEP:
            rate = change.rate
            values["rate_limit_per_second"] = None if rate is None else rate.per_second
            values["rate_limit_burst"] = None if rate is None else rate.burst
        if change.max_in_flight is not KEEP:
            values["max_in_flight"] = change.max_in_flight
        if change.max_memories_per_user is not KEEP:
            values["max_memories_per_user"] = change.max_memories_per_user
        if not values:
            return await self.get_tenant(name) is not None
        result = await self.session.execute(
            update(Tenant).where(Tenant.name == name).values(values).returning(Tenant.id))
        return result.first() is not None

    async def delete(self, tenant_id: uuid.UUID) -> bool:
        """Delete the tenant's row; the foreign keys cascade to whatever it still holds."""
        result = await self.session.execute(
            delete(Tenant).where(Tenant.id == tenant_id).returning(Tenant.id))
        return result.first() is not None


@dataclass(frozen=True, slots=True)
class Holdings:
    tenants: int
    memories: int
    sessions: int

    def __str__(self) -> str:
        return (f"{self.memories} memories and {self.sessions} sessions of "
                f"{self.tenants} tenants")


async def database_holdings(conn: AsyncConnection) -> Holdings:
    """What the whole database holds, read in `conn`'s snapshot. By table name, since a
    backup or a restore meets schemas this version's models may not describe (an older
    one, not migrated first; sessions came in a later revision)."""
    counts = {}
    for table in ("tenants", "memories", "sessions"):
        present = await conn.scalar(text("SELECT to_regclass(:t) IS NOT NULL"), {"t": table})
        counts[table] = (int(await conn.scalar(text(f"SELECT count(*) FROM {table}")) or 0)
                         if present else 0)
    return Holdings(counts["tenants"], counts["memories"], counts["sessions"])
