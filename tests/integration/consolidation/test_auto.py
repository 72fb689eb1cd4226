"""Automatic synthesize-only consolidation: every N memories written in a scope enqueue
a job; the job runs in the worker; a failing enqueue never fails the write."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.consolidation import auto
from app.consolidation.runs import ConsolidationRunner
from app.resources import Resources
from app.worker.jobs import default_registry
from app.worker.queue import QUEUE_SCHEMA
from app.worker.runner import Worker
from tests.conftest import TenantKey, make_client
from tests.integration.consolidation.conftest import memory, seed, summaries, wait_for_run


@pytest.fixture
def auto_resources(resources: Resources) -> Resources:
    settings = resources.settings.model_copy(update={"auto_consolidate_every": 3})
    return dataclasses.replace(resources, settings=settings, background=[])


@pytest.fixture
async def auto_client(auto_resources: Resources,
                      tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(auto_resources, tenant.headers) as c:
        yield c


async def written(resources: Resources, tenant: TenantKey) -> dict[str, int]:
    async with resources.engine.connect() as conn:
        rows = (await conn.execute(
            text("SELECT scope_key, written FROM scope_write_counters WHERE tenant_id = :t"),
            {"t": tenant.tenant_id})).all()
    return {r.scope_key: r.written for r in rows}


async def wait_for_auto_run(client: httpx.AsyncClient) -> dict[str, Any]:
    for _ in range(200):
        runs = (await client.get("/v1/consolidations")).json()["items"]
        if runs:
            return await wait_for_run(client, runs[0]["id"])
        await asyncio.sleep(0.05)
    raise AssertionError("no automatic run appeared")


async def test_every_nth_write_in_a_scope_runs_a_synthesize_only_consolidation(
    auto_client: httpx.AsyncClient, auto_resources: Resources, tenant: TenantKey,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="engram")
    worker = Worker(auto_resources, default_registry(), poll_interval=timedelta(seconds=1))
    await worker.start()
    try:
        ids = await seed(auto_client, [memory(f"note {i}", i) for i in range(2)])
        await seed(auto_client, [memory("unscoped", 0, user_id=None)] * 3)
        assert await written(auto_resources, tenant) == {'["u1",null,null,null]': 2}
        await asyncio.sleep(0.2)
        assert (await auto_client.get("/v1/consolidations")).json()["items"] == []

        third = await auto_client.post("/v1/memories/batch",
                                       json={"items": [memory("note 2", 2)]},
                                       headers={"X-Request-ID": "write-3"})
        assert third.status_code == 201, third.text
        ids += [m["id"] for m in third.json()["items"]]

        run = await wait_for_auto_run(auto_client)
        assert (run["trigger"], run["status"]) == ("auto", "succeeded")
        # Started by the job the third write queued: the job's id, after the write's.
        assert re.fullmatch(r"write-3\.job-[0-9]+", run["request_id"]), run["request_id"]
        assert run["request"]["mode"] == "synthesize_only"
        assert run["request"]["user_id"] == "u1"
        for trigger, ids_listed in (("auto", [run["id"]]), ("api", [])):
            page = await auto_client.get("/v1/consolidations", params={"trigger": trigger})
            assert [r["id"] for r in page.json()["items"]] == ids_listed
        (summary,) = await summaries(auto_client, user_id="u1")
        assert summary["summary_of"] == ids[:2]
        listed = await auto_client.get("/v1/memories", params={"user_id": "u1"})
        assert {m["id"] for m in listed.json()["items"]} >= set(ids)
        # The log names the scope's columns, not the user's id, which an erasure of the
        # user cannot reach there.
        (line,) = [r.getMessage() for r in caplog.records
                   if r.getMessage().startswith(f"automatic consolidation {run['id']}")]
        assert line.endswith("of a scope (user_id): succeeded, 1 summaries"), line
        assert "u1" not in line
    finally:
        await worker.stop()


async def test_an_automatic_run_cut_by_the_worker_stopping_is_queued_again(
    auto_client: httpx.AsyncClient, auto_resources: Resources, tenant: TenantKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A probe of two replicas: SIGTERM cut a replica's automatic run at its 40th group
    of 600; pgqueuer drops a cancelled job, so nothing ran the rest, and 836 facts waited
    for the scope's next 3,000 writes."""
    started = asyncio.Event()
    real_run_now = ConsolidationRunner.run_now

    async def stalled(self: ConsolidationRunner, *args: Any, **kwargs: Any) -> Any:
        started.set()
        await asyncio.sleep(60)

    monkeypatch.setattr(ConsolidationRunner, "run_now", stalled)
    worker = Worker(auto_resources, default_registry(), poll_interval=timedelta(seconds=1))
    await worker.start()
    try:
        ids = await seed(auto_client, [memory(f"note {i}", i) for i in range(3)])
        await asyncio.wait_for(started.wait(), 15)
    finally:
        await worker.stop(grace_seconds=0.2)

    async with auto_resources.engine.connect() as conn:
        queued = (await conn.execute(text(
            f"SELECT payload FROM {QUEUE_SCHEMA}.pgqueuer WHERE entrypoint = :job "
            "AND status = 'queued'"), {"job": auto.AUTO_JOB})).scalars().all()
    assert [json.loads(p)["user_id"] for p in queued
            if json.loads(p)["tenant_id"] == str(tenant.tenant_id)] == ["u1"]

    monkeypatch.setattr(ConsolidationRunner, "run_now", real_run_now)
    worker = Worker(auto_resources, default_registry(), poll_interval=timedelta(seconds=1))
    await worker.start()
    try:
        run = await wait_for_auto_run(auto_client)
    finally:
        await worker.stop()
    assert (run["trigger"], run["status"]) == ("auto", "succeeded")
    (summary,) = await summaries(auto_client, user_id="u1")
    assert set(summary["summary_of"]) < set(ids)


async def test_a_failing_enqueue_never_fails_the_write(
    auto_client: httpx.AsyncClient, auto_resources: Resources, tenant: TenantKey,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken_enqueue(session: AsyncSession, *args: Any, **kwargs: Any) -> None:
        await session.execute(text("SELECT 1 / 0"))  # a real database error

    monkeypatch.setattr(auto, "enqueue", broken_enqueue)

    ids = await seed(auto_client, [memory(f"note {i}", i) for i in range(3)])
    single = await auto_client.post("/v1/memories", json=memory("one more", 9))

    assert single.status_code == 201
    for memory_id in [*ids, single.json()["id"]]:
        assert (await auto_client.get(f"/v1/memories/{memory_id}")).status_code == 200
    # The savepoint took the count back with the failed enqueue.
    assert await written(auto_resources, tenant) == {'["u1",null,null,null]': 1}
    assert (await auto_client.get("/v1/consolidations")).json()["items"] == []


async def test_auto_consolidation_is_off_by_default(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    assert resources.settings.auto_consolidate_every == 0
    await seed(client, [memory(f"note {i}", i) for i in range(5)])
    assert await written(resources, tenant) == {}


async def test_a_trigger_while_the_scope_s_run_is_running_queues_one_more(
    auto_client: httpx.AsyncClient, auto_resources: Resources, tenant: TenantKey,
) -> None:
    """A running run has read its candidates: skipping the trigger (its key was held)
    left the rows written meanwhile unsummarised until N more writes came, for ever in a
    scope gone quiet. One more run waits behind it; never more than one."""
    prefix = f"{auto.AUTO_JOB}:{tenant.tenant_id}:%"

    async def jobs() -> list[tuple[str, str]]:
        async with auto_resources.engine.connect() as conn:
            rows = await conn.execute(text(
                "SELECT dedupe_key, status::text FROM pgqueuer.pgqueuer "
                "WHERE dedupe_key LIKE :p ORDER BY id"), {"p": prefix})
            return [(r[0].rsplit(":", 1)[-1], r[1]) for r in rows]

    try:
        await seed(auto_client, [memory(f"note {i}", i) for i in range(3)])
        ((scope, status),) = await jobs()
        assert status == "queued"
        async with auto_resources.engine.begin() as conn:  # a worker has picked it
            await conn.execute(text("UPDATE pgqueuer.pgqueuer SET status = 'picked' "
                                    "WHERE dedupe_key LIKE :p"), {"p": prefix})

        await seed(auto_client, [memory(f"later {i}", 10 + i) for i in range(3)])
        assert await jobs() == [(scope, "picked"), ("next", "queued")]
        await seed(auto_client, [memory(f"latest {i}", 20 + i) for i in range(3)])
        assert await jobs() == [(scope, "picked"), ("next", "queued")]
    finally:
        async with auto_resources.engine.begin() as conn:
            await conn.execute(text("DELETE FROM pgqueuer.pgqueuer WHERE dedupe_key LIKE :p"),
                               {"p": prefix})


async def test_erasing_a_scope_forgets_its_write_counts_and_no_other(
    auto_resources: Resources, auto_client: httpx.AsyncClient, tenant: TenantKey,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by an exploratory probe of erasure: the count of `["ivan",null,null,null]`
    outlived `DELETE /v1/memories?user_id=ivan`, and went into tenant exports."""
    await seed(auto_client, [memory("ivan's note", 0, user_id="ivan"),
                             memory("ivan's agent note", 1, user_id="ivan", agent_id="a1"),
                             memory("bob's note", 2, user_id="bob")])
    await seed(auto_client, [memory("ivan's tagged note", 3, user_id="ivan",
                                    metadata={"ticket": "ZEBRA-7731"})])
    caplog.set_level(logging.INFO, logger="engram.memories")

    tagged = await auto_client.delete("/v1/memories", params={
        "user_id": "ivan", "metadata": json.dumps({"ticket": "ZEBRA-7731"})})
    assert tagged.status_code == 200, tagged.text
    # A delete narrowed past the scope leaves its counts; the log names which filters it
    # matched, not their keys or values.
    assert len(await written(auto_resources, tenant)) == 3
    assert "ZEBRA" not in caplog.text
    assert "ticket" not in caplog.text
    assert "matching user_id, metadata" in caplog.text

    erased = await auto_client.delete("/v1/memories", params={"user_id": "ivan"})

    assert erased.status_code == 200, erased.text
    assert await written(auto_resources, tenant) == {'["bob",null,null,null]': 1}
