"""A run cut off by a crash is never left running: the sweep marks it failed, keeps what
it committed, and leaves alone a run whose lock is still held. Nor is a queued run whose
job ended without starting it: its last try says why, or the sweep marks it."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import text

from app.consolidation.jobs import run_queued
from app.consolidation.locks import ScopeLock
from app.consolidation.registry import build_composition
from app.consolidation.repository import ConsolidationRepository, GroupWriter
from app.consolidation.runs import (
    CUT_OFF,
    NEVER_STARTED,
    RUN_JOB,
    ConsolidationRunner,
    fail_abandoned_runs,
    run_values,
)
from app.consolidation.schemas import ConsolidationRequest
from app.consolidation.service import compose
from app.db import create_engine
from app.ids import uuid7
from app.resources import Resources
from app.worker.jobs import default_registry
from app.worker.registry import JobContext
from app.worker.runner import Worker
from tests.conftest import TenantKey, make_client, sample
from tests.integration.consolidation.conftest import GatedLLM, memory, seed, summaries, wait_for_run


async def dead_backend_pid(resources: Resources) -> int:
    async with resources.engine.connect() as conn:
        pid = int(await conn.scalar(text("SELECT pg_backend_pid()")))
        await conn.invalidate()  # closes it: this backend exits
    return pid


async def record_run(resources: Resources, tenant_id: uuid.UUID, *, key: int, pid: int,
                     groups: list[list[str]]) -> uuid.UUID:
    request = ConsolidationRequest(user_id="u1")
    values = run_values(request, build_composition(), key, "api", run_id=uuid7(), pid=pid)
    values["groups"] = [{"category": "general", "kept_id": None, "summary_id": None,
                         "removed_ids": g, "folded_ids": g, "mode": None,
                         "outcome": "pending"} for g in groups]
    values["groups_total"] = len(groups)
    async with resources.sessionmaker() as session, session.begin():
        run = await ConsolidationRepository(session, tenant_id).insert_run(values)
    return run.id


async def test_a_run_whose_process_died_is_marked_failed_and_keeps_its_committed_groups(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    ids = await seed(client, [memory(f"note {i}", i) for i in range(6)])
    run_id = await record_run(resources, tenant.tenant_id, key=12345,
                              pid=await dead_backend_pid(resources),
                              groups=[ids[0:2], ids[2:4]])
    # The first group committed before the crash: its summary exists, sources archived.
    summary_id = uuid7()
    (vector,) = await resources.embedder.embed(["- note 0\n- note 1"])
    async with resources.engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        async with raw.transaction():
            writer = GroupWriter(raw, tenant.tenant_id)
            await writer.insert_summary({
                "id": summary_id, "content": "- note 0\n- note 1", "user_id": "u1",
                "agent_id": None, "session_id": None, "namespace": None,
                "category": "general", "tags": [], "importance": 0.7, "source": "summary",
                "fact_role": "summary", "summary_of": ids[0:2], "consolidation_id": run_id,
                "expires_at": None,
                "metadata": {}, "embedding": vector})
            assert await writer.archive(ids[0:2], run_id) == 2

    failed_before = sample("engram_consolidation_runs_total", trigger="api", status="failed")
    assert await fail_abandoned_runs(resources.sessionmaker) >= 1

    run = (await client.get(f"/v1/consolidations/{run_id}")).json()
    assert run["status"] == "failed"
    assert run["error"] == CUT_OFF
    assert sample("engram_consolidation_runs_total", trigger="api",
                  status="failed") >= failed_before + 1
    assert run["finished_at"] is not None
    assert [(g["outcome"], g["summary_id"], g["removed_ids"]) for g in run["groups"]] == [
        ("written", str(summary_id), ids[0:2]), ("failed", None, [])]
    assert (await client.get(f"/v1/memories/{summary_id}")).status_code == 200
    # It is now an ordinary failed archive run: revert undoes the committed group.
    assert (await client.post(f"/v1/consolidations/{run_id}/revert")).status_code == 200


async def test_a_run_whose_lock_is_still_held_is_left_running(
    resources: Resources, tenant: TenantKey,
) -> None:
    lock = ScopeLock(resources.engine, 67890)
    assert await lock.try_acquire()
    assert lock.pid is not None
    try:
        run_id = await record_run(resources, tenant.tenant_id, key=67890, pid=lock.pid,
                                  groups=[])
        await fail_abandoned_runs(resources.sessionmaker)
        async with resources.sessionmaker() as session:
            run = await ConsolidationRepository(session, tenant.tenant_id).get_run(run_id)
        assert run is not None
        assert run.status == "running"
    finally:
        await lock.release()
    await fail_abandoned_runs(resources.sessionmaker)
    async with resources.sessionmaker() as session:
        run = await ConsolidationRepository(session, tenant.tenant_id).get_run(run_id)
    assert run is not None
    assert run.status == "failed"


async def test_a_cancelled_run_marks_itself_failed(
    resources: Resources, tenant: TenantKey,
) -> None:
    llm = GatedLLM()
    held = dataclasses.replace(resources, llm=llm, background=[])
    async with make_client(held, tenant.headers) as client:
        await seed(client, [memory(f"note {i}", i) for i in range(4)])
        request = ConsolidationRequest(user_id="u1", strategy="llm")
        runner = ConsolidationRunner(held, tenant.tenant_id)
        task = asyncio.create_task(runner.run_now(request, compose(request, held)))
        await asyncio.wait_for(llm.started.wait(), 10)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

        (run,) = (await client.get("/v1/consolidations")).json()["items"]
        assert run["status"] == "failed"
        assert run["error"] == CUT_OFF
        # Its lock went with it: the scope can run again.
        llm.release.set()
        again = await client.post("/v1/consolidations", json={"user_id": "u1"})
        assert again.status_code == 200


async def queue_run(client: httpx.AsyncClient) -> str:
    """An async run, recorded and queued; no worker runs in these tests unless started."""
    await seed(client, [memory(f"note {i}", i) for i in range(3)])
    resp = await client.post("/v1/consolidations", json={"user_id": "u1", "async": True})
    assert resp.status_code == 202, resp.text
    run_id: str = resp.json()["id"]
    return run_id


async def run_job_ids(resources: Resources, run_id: str) -> list[int]:
    async with resources.engine.connect() as conn:
        rows = await conn.execute(text(
            "SELECT id FROM pgqueuer.pgqueuer WHERE entrypoint = :job "
            "AND convert_from(payload, 'UTF8')::jsonb ->> 'run_id' = :run_id"),
            {"job": RUN_JOB, "run_id": run_id})
        return [int(r.id) for r in rows]


async def test_a_queued_run_whose_job_is_gone_is_marked_failed_by_the_sweep(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    run_id = await queue_run(client)
    (job_id,) = await run_job_ids(resources, run_id)
    # pgqueuer deletes a job's row when it drops the job after its last try; here the
    # database was down through that try too, so the handler could not record anything.
    async with resources.engine.begin() as conn:
        await conn.execute(text("DELETE FROM pgqueuer.pgqueuer WHERE id = :id"),
                           {"id": job_id})

    assert await fail_abandoned_runs(resources.sessionmaker) >= 1

    run = (await client.get(f"/v1/consolidations/{run_id}")).json()
    assert (run["status"], run["error"], run["started_at"]) == ("failed", NEVER_STARTED, None)
    assert run["finished_at"] is not None
    assert await summaries(client, user_id="u1") == []
    # Failed, not running: the scope is free and a new run goes through.
    again = await client.post("/v1/consolidations", json={"user_id": "u1"})
    assert again.status_code == 200, again.text


async def test_a_queued_run_whose_job_still_waits_is_left_for_a_worker(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    run_id = await queue_run(client)

    await fail_abandoned_runs(resources.sessionmaker)

    run = (await client.get(f"/v1/consolidations/{run_id}")).json()
    assert (run["status"], run["started_at"]) == ("running", None)
    # A worker started later (none was enabled) still runs it.
    worker = Worker(resources, default_registry(), poll_interval=timedelta(seconds=1))
    await worker.start()
    try:
        done = await wait_for_run(client, run_id)
    finally:
        await worker.stop()
    assert done["status"] == "succeeded", done
    assert len(await summaries(client, user_id="u1")) == 1
    assert await run_job_ids(resources, run_id) == []


async def test_a_queued_runs_last_failed_try_marks_it_failed_with_the_cause(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    run_id = await queue_run(client)
    payload = {"tenant_id": str(tenant.tenant_id), "run_id": run_id}
    # Nothing listens on port 1: the run's own connection (for the scope lock) is refused.
    unreachable = create_engine("postgresql+asyncpg://engram@127.0.0.1:1/engram",
                                resources.settings)
    broken = dataclasses.replace(resources, engine=unreachable, background=[])
    try:
        with pytest.raises(ConnectionRefusedError):
            await run_queued(JobContext(broken, 1, attempt=1, max_attempts=3), payload)
        run = (await client.get(f"/v1/consolidations/{run_id}")).json()
        assert (run["status"], run["started_at"]) == ("running", None)  # it will retry

        with pytest.raises(ConnectionRefusedError):
            await run_queued(JobContext(broken, 1, attempt=3, max_attempts=3), payload)
    finally:
        await unreachable.dispose()

    run = (await client.get(f"/v1/consolidations/{run_id}")).json()
    assert run["status"] == "failed"
    assert run["error"].startswith("the run never started; its last try failed: "), run
    assert "Error" in run["error"]
    assert run["started_at"] is None
    assert await summaries(client, user_id="u1") == []
