"""Two runs on one scope never interleave: while one runs, a second gets 409 at once."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx

from app.resources import Resources
from tests.conftest import TenantKey, make_client
from tests.integration.consolidation.conftest import GatedLLM, consolidate, memory, seed


async def test_a_second_run_on_a_busy_scope_is_409_and_other_scopes_proceed(
    resources: Resources, tenant: TenantKey,
) -> None:
    llm = GatedLLM()
    held = dataclasses.replace(resources, llm=llm, background=[])
    async with make_client(held, tenant.headers) as client:
        await seed(client, [memory(f"note {i}", i) for i in range(4)]
                   + [memory(f"other {i}", i, user_id="u2") for i in range(4)])
        first = asyncio.create_task(client.post("/v1/consolidations",
                                                json={"user_id": "u1", "strategy": "llm"}))
        await asyncio.wait_for(llm.started.wait(), 10)
        (running,) = (await client.get("/v1/consolidations")).json()["items"]
        assert running["status"] == "running"
        assert running["started_at"] is not None

        for body in ({"user_id": "u1"}, {"user_id": "u1", "categories": ["general"]},
                     {"user_id": "u1", "async": True}):
            busy = await client.post("/v1/consolidations", json=body)
            assert busy.status_code == 409, busy.text
            assert running["id"] in busy.json()["detail"]
        # A dry run writes nothing, so it does not wait for the lock.
        assert (await consolidate(client, user_id="u1", dry_run=True))["status"] == "planned"
        # Another scope is another lock.
        other = await consolidate(client, user_id="u2")
        assert other["status"] == "succeeded"

        llm.release.set()
        done = await asyncio.wait_for(first, 10)
        assert done.status_code == 200
        assert done.json()["status"] == "succeeded"
        # The scope is free again.
        assert (await consolidate(client, user_id="u1"))["status"] == "succeeded"


async def test_runs_on_one_scope_from_many_requests_never_fold_a_memory_twice(
    client: httpx.AsyncClient,
) -> None:
    await seed(client, [memory(f"note {i}", i) for i in range(30)])

    answers = await asyncio.gather(*(
        client.post("/v1/consolidations", json={"user_id": "u1"}) for _ in range(4)))

    statuses = sorted(a.status_code for a in answers)
    assert 200 in statuses
    assert set(statuses) <= {200, 409}
    folded = [i for a in answers if a.status_code == 200
              for g in a.json()["groups"] for i in g["removed_ids"]]
    assert len(folded) == len(set(folded))
