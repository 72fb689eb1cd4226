"""A suspended tenant's session folds: the fold job does nothing (no summariser call) and
leaves the fold due, the sweep does not queue it again while the suspension lasts, and
after `resume` the sweep's next pass queues it and the fold runs."""

from __future__ import annotations

import httpx
from sqlalchemy import text

from app.resources import Resources
from app.sessions.jobs import run_fold
from app.tenants.service import resume, suspend
from app.worker.registry import JobContext
from tests.conftest import TenantKey
from tests.integration.sessions.conftest import (
    append,
    flagged,
    fold_due_since,
    get_json,
    new_id,
)


async def cursor(resources: Resources, tenant: TenantKey, sid: str) -> object:
    async with resources.engine.connect() as conn:
        return await conn.scalar(
            text("SELECT cursor FROM sessions WHERE tenant_id = :t AND session_id = :s"),
            {"t": tenant.tenant_id, "s": sid})


async def test_a_suspended_tenant_s_fold_waits_until_it_is_resumed(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    sid = new_id()
    for i in range(7):  # past the threshold of 6: a fold is due
        await append(small_client, sid, f"Dana booked table {i} at Ramiro.")
    due = await fold_due_since(small, tenant, sid)
    assert due is not None
    job = JobContext(small, job_id=1, attempt=1, max_attempts=3)
    payload = {"tenant_id": str(tenant.tenant_id), "session_id": sid}

    await suspend(small.engine, tenant.name, "paused")
    await run_fold(job, payload)

    assert await cursor(small, tenant, sid) == 0
    assert await fold_due_since(small, tenant, sid) == due
    assert (tenant.tenant_id, sid) not in await flagged(small)

    await resume(small.engine, tenant.name)
    assert (tenant.tenant_id, sid) in await flagged(small)
    await run_fold(job, payload)

    session = await get_json(small_client, f"/v1/sessions/{sid}")
    assert session["cursor"] == 4
    assert session["health"]["state"] == "healthy"
    assert await fold_due_since(small, tenant, sid) is None
