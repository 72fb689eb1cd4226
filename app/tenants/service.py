"""An operator's tenant commands (not endpoints): deleting a tenant with everything it
holds, setting its own limits, suspending and resuming it."""

from __future__ import annotations

import uuid

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db import create_sessionmaker
from app.errors import Conflict, NotFound
from app.memories.repository import purge_tenant
from app.models import DEFAULT_TENANT_ID
from app.sessions.repository import purge_tenant_sessions
from app.tenants.repository import LimitChange, Standing, TenantRepository, TenantSummary
from app.worker.queue import drop_tenant_jobs


async def deletable(engine: AsyncEngine, name: str) -> TenantSummary:
    """The tenant `delete_tenant` would delete, with what it holds; refused as it would be."""
    tenant = await summary(engine, name)
    if tenant.id == DEFAULT_TENANT_ID:
        raise Conflict("the default tenant is who every call acts as with authentication "
                       "off, so it is not deleted; delete its memories and sessions through "
                       "the API, or remove the data dir")
    return tenant


DELETING = ("being deleted (tenants delete); if that was cut short, run it again, or "
            "`tenants resume` to keep what is left")


async def delete_tenant(engine: AsyncEngine, name: str) -> TenantSummary:
    """Delete the tenant named `name`; what it held when the delete began.

    Its memories and sessions go first in bounded transactions (a tenant may hold
    millions of rows, and one cascade would fold them all in one statement), then its
    row, whose cascade takes the keys, consolidation runs, idempotency keys, counters and
    anything written meanwhile. First the tenant is suspended, in a transaction of its
    own: a delete cut short (Ctrl-C, a crash) had left a working tenant holding a part of
    its data, its agents reading and writing it, with nothing to show it (a probe). Now
    its keys are refused (403 `tenant_suspended`) from the start, and `tenants list`
    shows why."""
    tenant = await deletable(engine, name)
    async with create_sessionmaker(engine)() as session, session.begin():
        await TenantRepository(session).suspend(name, DELETING)
    await drop_tenant_jobs(engine, tenant.id)  # else they would fail, and retry, for nothing
    await purge_tenant(engine, tenant.id)
    await purge_tenant_sessions(engine, tenant.id)
    async with create_sessionmaker(engine)() as session, session.begin():
        await TenantRepository(session).delete(tenant.id)
    return tenant


async def set_limits(engine: AsyncEngine, name: str, change: LimitChange) -> TenantSummary:
    """Give the tenant the limits `change` names (None: the service's default again). A
    running service reads them with the tenant's next request's key: no restart."""
    async with create_sessionmaker(engine)() as session, session.begin():
        if not await TenantRepository(session).set_limits(name, change):
            raise NotFound(f"no tenant named {name!r}")
    return await summary(engine, name)


async def suspend(engine: AsyncEngine, name: str, reason: str | None) -> TenantSummary:
    """Refuse the tenant's keys from its next request on (403 `tenant_suspended`, the
    reason in the detail); what it holds and its keys are left as they are, and its
    background jobs do nothing while it lasts (`standing`). Suspending it again
    replaces the reason and keeps the time."""
    async with create_sessionmaker(engine)() as session, session.begin():
        if not await TenantRepository(session).suspend(name, reason):
            raise NotFound(f"no tenant named {name!r}")
    return await summary(engine, name)


async def standing(sessionmaker: async_sessionmaker[AsyncSession],
                   tenant_id: uuid.UUID) -> Standing:
    """Whether the tenant is active, suspended or gone: its background jobs ask before
    they do anything (an LLM call costs whoever runs the service, and a deleted tenant's
    job that went on failed on its foreign keys, retried for hours)."""
    async with sessionmaker() as session:
        return await TenantRepository(session).standing(tenant_id)


async def resume(engine: AsyncEngine, name: str) -> TenantSummary:
    """Accept the tenant's keys again from its next request on."""
    async with create_sessionmaker(engine)() as session, session.begin():
        if not await TenantRepository(session).resume(name):
            raise NotFound(f"no tenant named {name!r}")
    return await summary(engine, name)


async def summary(engine: AsyncEngine, name: str) -> TenantSummary:
    """The tenant named `name`, with what it holds."""
    async with create_sessionmaker(engine)() as session:
        found = await TenantRepository(session).summaries(name)
    if not found:
        raise NotFound(f"no tenant named {name!r}")
    return found[0]
