"""A suspended tenant's background consolidation: a queued run that has not started is
failed, saying why, with nothing written and no LLM call; an automatic run is skipped,
and so is a deleted tenant's."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from app.consolidation.jobs import run_auto, run_queued
from app.resources import Resources
from app.tenants.service import delete_tenant, resume, suspend
from app.worker.registry import JobContext
from tests.conftest import TenantKey, make_client
from tests.integration.consolidation.conftest import GatedLLM, memory, seed, summaries


async def test_a_queued_run_of_a_suspended_tenant_fails_before_it_starts(
    resources: Resources, tenant: TenantKey,
) -> None:
    llm = GatedLLM()
    held = dataclasses.replace(resources, llm=llm, background=[])
    async with make_client(held, tenant.headers) as client:
        await seed(client, [memory(f"note {i}", i) for i in range(4)])
        queued = await client.post("/v1/consolidations",
                                   json={"user_id": "u1", "strategy": "llm", "async": True})
        assert queued.status_code == 202, queued.text
        run_id = queued.json()["id"]

        await suspend(held.engine, tenant.name, "paused")
        # Bounded: a run that went ahead would wait on the gated LLM for ever.
        await asyncio.wait_for(run_queued(
            JobContext(held, job_id=1, attempt=1, max_attempts=3),
            {"tenant_id": str(tenant.tenant_id), "run_id": run_id}), 10)
        await resume(held.engine, tenant.name)

        run = (await client.get(f"/v1/consolidations/{run_id}")).json()
        assert (run["status"], run["started_at"], run["created"]) == ("failed", None, 0)
        assert "its tenant was suspended before the run started" in run["error"]
        assert not llm.started.is_set()
        assert await summaries(client, user_id="u1") == []
        listed = (await client.get("/v1/memories", params={"user_id": "u1"})).json()
        assert len(listed["items"]) == 4


async def test_an_automatic_run_of_a_suspended_tenant_is_skipped(
    resources: Resources, tenant: TenantKey,
) -> None:
    async with make_client(resources, tenant.headers) as client:
        await seed(client, [memory(f"note {i}", i) for i in range(4)])
        payload = {"tenant_id": str(tenant.tenant_id), "user_id": "u1"}
        job = JobContext(resources, job_id=1, attempt=1, max_attempts=3)

        await suspend(resources.engine, tenant.name, "paused")
        await run_auto(job, payload)
        await resume(resources.engine, tenant.name)
        assert (await client.get("/v1/consolidations")).json()["items"] == []
        assert await summaries(client, user_id="u1") == []

        # The same job once the tenant is resumed: it runs.
        await run_auto(job, payload)
        (run,) = (await client.get("/v1/consolidations")).json()["items"]
        assert (run["status"], run["created"]) == ("succeeded", 1)


async def test_an_automatic_run_of_a_deleted_tenant_is_dropped_not_retried(
    resources: Resources, tenant: TenantKey, caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by an exploratory probe: a job queued while its tenant was being deleted
    failed on the run's foreign key at every try, for about two hours of tracebacks."""
    async with make_client(resources, tenant.headers) as client:
        await seed(client, [memory(f"note {i}", i) for i in range(4)])
    await delete_tenant(resources.engine, tenant.name)
    caplog.set_level(logging.INFO)

    await run_auto(JobContext(resources, job_id=1, attempt=1, max_attempts=3),
                   {"tenant_id": str(tenant.tenant_id), "user_id": "u1"})

    assert "its tenant was deleted" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
