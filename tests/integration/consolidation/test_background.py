"""Async runs go through the job queue and the worker; GET shows their progress."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import timedelta

import httpx

from app.resources import Resources
from app.worker.jobs import default_registry
from app.worker.runner import Worker
from tests.conftest import TenantKey, make_client
from tests.integration.consolidation.conftest import (
    GatedLLM,
    memory,
    seed,
    summaries,
    wait_for_run,
)


async def test_an_async_run_answers_202_and_completes_in_the_background(
    resources: Resources, tenant: TenantKey,
) -> None:
    llm = GatedLLM()
    held = dataclasses.replace(resources, llm=llm, background=[])
    worker = Worker(held, default_registry(), poll_interval=timedelta(seconds=1))
    await worker.start()
    try:
        async with make_client(held, tenant.headers) as client:
            await seed(client, [memory(f"note {i}", i, category=c)
                                for i, c in enumerate("aaabbb")])

            resp = await client.post("/v1/consolidations",
                                     json={"user_id": "u1", "strategy": "llm", "async": True})

            assert resp.status_code == 202, resp.text
            queued = resp.json()
            assert resp.headers["location"] == f"/v1/consolidations/{queued['id']}"
            assert (queued["status"], queued["started_at"]) == ("running", None)
            assert queued["request"]["async"] is True
            assert queued["progress"] == {"groups_done": 0, "groups_total": None}

            await asyncio.wait_for(llm.started.wait(), 10)
            during = (await client.get(f"/v1/consolidations/{queued['id']}")).json()
            assert during["status"] == "running"
            assert during["started_at"] is not None
            assert during["progress"]["groups_total"] == 2

            llm.release.set()
            done = await wait_for_run(client, queued["id"])
            assert done["status"] == "succeeded"
            assert done["progress"] == {"groups_done": 2, "groups_total": 2}
            assert done["created"] == 2
            assert len(await summaries(client, user_id="u1")) == 2
    finally:
        await worker.stop()


async def test_an_async_dry_run_is_planned_in_the_background(
    client: httpx.AsyncClient, worker: Worker,
) -> None:
    await seed(client, [memory(f"note {i}", i) for i in range(3)])

    resp = await client.post("/v1/consolidations",
                             json={"user_id": "u1", "dry_run": True, "async": True})

    assert resp.status_code == 202
    done = await wait_for_run(client, resp.json()["id"])
    assert done["status"] == "planned"
    assert len(done["groups"]) == 1
