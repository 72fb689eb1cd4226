"""The queued run's job (`run_queued`), driven directly with the context the worker
builds: a second delivery does nothing, a request that no longer composes is given up, a
busy scope is retried later and then given up, and a try that fails before the run
starts is retried and, on the last try, recorded. Also what a run does when its lock
cannot be taken or its connection dies, and the group outcomes of a queued run whose
embedder fails, whose op fits nothing, or whose sources change under it.

No worker runs here (the HTTP client does not start the lifespan): each test queues a run
with POST `async: true` and plays the worker's part itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.consolidation.jobs import BUSY_RETRIES, run_queued
from app.consolidation.locks import ScopeLock, lock_key
from app.consolidation.repository import ConsolidationRepository
from app.consolidation.runs import RUN_JOB, ScopeBusy
from app.db import create_engine, create_sessionmaker
from app.providers.embedder import Vector
from app.providers.hash_embedder import HashEmbedder
from app.resources import Resources
from app.worker.jobs import default_registry
from app.worker.registry import JobContext, RetryLater
from tests.conftest import TenantKey, make_client
from tests.integration.consolidation.conftest import (
    GatedLLM,
    get_memory,
    memory,
    seed,
    summaries,
)

MAX_TRIES = next(spec.max_attempts for spec in default_registry() if spec.name == RUN_JOB)
NO_LLM = ("needs an LLM and none is configured (set ENGRAM_LLM_BASE_URL); the simple "
          "strategy and the extractive op work without one")
BUSY = ("is running on this scope; runs on one scope never interleave, retry when it has "
        "finished")
NEVER_STARTED = "the run never started; its last try failed: "


@dataclasses.dataclass
class Queued:
    """A run queued by POST `async: true`, and its job as the worker would take it."""

    run_id: str
    job_id: int
    payload: dict[str, Any]
    source_ids: list[str]

    def context(self, resources: Resources, attempt: int) -> JobContext:
        # As app/worker/runner.py builds it: pgqueuer's attempts + 1 of the spec's tries.
        return JobContext(resources, self.job_id, attempt, MAX_TRIES)


async def queue(client: httpx.AsyncClient, resources: Resources, *,
                items: list[dict[str, Any]] | None = None, **body: Any) -> Queued:
    ids = await seed(client, items or [memory(f"note {i}", i) for i in range(3)])
    resp = await client.post("/v1/consolidations",
                             json={"user_id": "u1", "async": True, **body})
    assert resp.status_code == 202, resp.text
    run_id = resp.json()["id"]
    async with resources.engine.connect() as conn:
        (row,) = (await conn.execute(text(
            "SELECT id, payload FROM pgqueuer.pgqueuer WHERE entrypoint = :job "
            "AND convert_from(payload, 'UTF8')::jsonb ->> 'run_id' = :run_id"),
            {"job": RUN_JOB, "run_id": run_id})).all()
    return Queued(run_id, int(row.id), json.loads(row.payload), ids)


async def get_run(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    resp = await client.get(f"/v1/consolidations/{run_id}")
    assert resp.status_code == 200, resp.text
    run: dict[str, Any] = resp.json()
    return run


async def assert_untouched(client: httpx.AsyncClient, ids: Sequence[str]) -> None:
    """Nothing archived, nothing written."""
    for memory_id in ids:
        found = await get_memory(client, memory_id)
        assert (found["archived_at"], found["consolidation_id"]) == (None, None)
    assert await summaries(client, include_archived="true") == []


def assert_failed_without_starting(run: dict[str, Any], error: str) -> None:
    assert (run["status"], run["error"]) == ("failed", error)
    assert run["started_at"] is None
    assert run["finished_at"] is not None
    assert run["groups"] == []
    assert (run["consolidated"], run["created"], run["deleted"]) == (0, 0, 0)


def unreachable_engine(resources: Resources) -> AsyncEngine:
    """An engine on a port nothing listens on: every connection is refused."""
    return create_engine("postgresql+asyncpg://engram@127.0.0.1:1/engram", resources.settings)


# A second delivery --------------------------------------------------------------------


async def test_a_second_delivery_of_a_finished_run_does_nothing(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    queued = await queue(client, resources)
    await run_queued(queued.context(resources, 1), queued.payload)
    done = await get_run(client, queued.run_id)
    assert (done["status"], done["created"], done["deleted"]) == ("succeeded", 1, 2)
    (group,) = done["groups"]
    (summary,) = await summaries(client, user_id="u1")

    # Redelivered (its worker's heartbeat went stale, say): the run is not "running", so
    # the job returns before taking the scope's lock (this engine cannot even connect).
    engine = unreachable_engine(resources)
    try:
        no_lock = dataclasses.replace(resources, engine=engine, background=[])
        await run_queued(queued.context(no_lock, 2), queued.payload)
    finally:
        await engine.dispose()

    assert await get_run(client, queued.run_id) == done
    assert await summaries(client, user_id="u1", include_archived="true") == [summary]
    for memory_id in queued.source_ids:
        archived_by = queued.run_id if memory_id in group["removed_ids"] else None
        assert (await get_memory(client, memory_id))["consolidation_id"] == archived_by


async def test_a_second_delivery_of_a_given_up_run_does_not_revive_it(
    resources: Resources, tenant: TenantKey,
) -> None:
    llm = GatedLLM()
    llm.release.set()
    with_llm = dataclasses.replace(resources, llm=llm, background=[])
    async with make_client(with_llm, tenant.headers) as client:
        queued = await queue(client, with_llm, strategy="llm")
        # First delivered to a worker with no LLM: given up.
        await run_queued(queued.context(resources, 1), queued.payload)
        failed = await get_run(client, queued.run_id)
        assert (failed["status"], failed["error"]) == (
            "failed", f"strategy: strategy 'llm' {NO_LLM}")

        # Then to one with an LLM: the run stays failed and nothing runs.
        await run_queued(queued.context(with_llm, 2), queued.payload)

        assert await get_run(client, queued.run_id) == failed
        assert llm.calls == 0
        await assert_untouched(client, queued.source_ids)


# A request that no longer composes ----------------------------------------------------


@pytest.mark.parametrize(
    ("body", "error"),
    [({"strategy": "llm"}, f"strategy: strategy 'llm' {NO_LLM}"),
     ({"op": {"name": "llm_synthesis"}}, f"op: op 'llm_synthesis' {NO_LLM}")],
    ids=["strategy", "op"],
)
async def test_a_queued_run_that_no_longer_composes_is_given_up_at_once(
    resources: Resources, tenant: TenantKey, body: dict[str, Any], error: str,
) -> None:
    llm = GatedLLM()
    with_llm = dataclasses.replace(resources, llm=llm, background=[])
    async with make_client(with_llm, tenant.headers) as client:
        queued = await queue(client, with_llm, **body)

        # The worker runs without an LLM (the settings changed since it was queued): on
        # its first try, with tries to spare, the job gives up instead of retrying.
        assert resources.llm is None
        await run_queued(queued.context(resources, 1), queued.payload)

        assert_failed_without_starting(await get_run(client, queued.run_id), error)
        assert llm.calls == 0
        await assert_untouched(client, queued.source_ids)
        # It never took the scope, and failed it no longer counts as running there.
        again = await client.post("/v1/consolidations", json={"user_id": "u1"})
        assert again.status_code == 200, again.text
        assert again.json()["status"] == "succeeded"


# A busy scope -------------------------------------------------------------------------


@pytest.fixture
async def held_scope(resources: Resources, tenant: TenantKey) -> AsyncIterator[ScopeLock]:
    """The u1 scope's lock of this tenant, held as a running run would hold it."""
    lock = ScopeLock(resources.engine, lock_key(tenant.tenant_id, ("u1", None, None, None)))
    yield lock
    await lock.release()


async def test_a_busy_scope_makes_the_job_retry_later_with_a_growing_delay(
    client: httpx.AsyncClient, resources: Resources, held_scope: ScopeLock,
) -> None:
    queued = await queue(client, resources)
    assert await held_scope.try_acquire() is not None

    for attempt, seconds in [(1, 2), (2, 4), (14, 28), (15, 30), (16, 30),
                             (BUSY_RETRIES - 1, 30)]:
        with pytest.raises(RetryLater) as retry:
            await run_queued(queued.context(resources, attempt), queued.payload)
        assert retry.value.delay == timedelta(seconds=seconds), attempt
        assert retry.value.reason == f"another consolidation run {BUSY}"
        assert isinstance(retry.value.__cause__, ScopeBusy)

    run = await get_run(client, queued.run_id)
    assert (run["status"], run["error"], run["started_at"]) == ("running", None, None)
    await assert_untouched(client, queued.source_ids)

    # Once the scope is free, the next try runs it.
    await held_scope.release()
    await run_queued(queued.context(resources, BUSY_RETRIES - 1), queued.payload)
    done = await get_run(client, queued.run_id)
    assert (done["status"], done["created"], done["deleted"]) == ("succeeded", 1, 2)
    assert done["started_at"] is not None


@pytest.mark.parametrize("attempt", [BUSY_RETRIES, MAX_TRIES], ids=["busy-retries", "last-try"])
async def test_a_scope_still_busy_after_the_busy_retries_is_given_up(
    resources: Resources, tenant: TenantKey, attempt: int,
) -> None:
    llm = GatedLLM()
    held = dataclasses.replace(resources, llm=llm, background=[])
    async with make_client(held, tenant.headers) as client:
        queued = await queue(client, held)
        # Another run holds the scope, waiting on its LLM.
        holder = asyncio.create_task(client.post("/v1/consolidations",
                                                 json={"user_id": "u1", "strategy": "llm"}))
        try:
            await asyncio.wait_for(llm.started.wait(), 10)
            (holder_id,) = [r["id"] for r in (await client.get("/v1/consolidations")).json()
                            ["items"] if r["id"] != queued.run_id]

            await run_queued(queued.context(held, attempt), queued.payload)

            assert_failed_without_starting(
                await get_run(client, queued.run_id),
                f"gave up waiting for the scope: another consolidation run ({holder_id}) {BUSY}")
            await assert_untouched(client, queued.source_ids)
        finally:
            llm.release.set()
            answer = await asyncio.wait_for(holder, 10)
        # The holder was left alone and finished; everything written is its own.
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "succeeded"
        (summary,) = await summaries(client, user_id="u1")
        assert summary["consolidation_id"] == holder_id


# A try that fails before the run starts -----------------------------------------------


def breaker_name(tenant: TenantKey) -> str:
    return f"break_lock_{tenant.tenant_id.hex}"


@pytest.fixture
async def failing_lock_engine(resources: Resources, tenant: TenantKey,
                              database_url: str) -> AsyncIterator[AsyncEngine]:
    """An engine on the real database whose `pg_try_advisory_lock(bigint)` raises: a
    schema ahead of pg_catalog on its search_path holds one that does."""
    schema = breaker_name(tenant)
    async with resources.engine.begin() as conn:
        await conn.execute(text(f"CREATE SCHEMA {schema}"))
        await conn.execute(text(f"""
            CREATE FUNCTION {schema}.pg_try_advisory_lock(bigint) RETURNS boolean
            LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'injected failure taking the scope lock'; END $$"""))
    engine = create_async_engine(database_url, connect_args={"server_settings": {
        "search_path": f"{schema}, pg_catalog, public", "application_name": schema}})
    try:
        yield engine
    finally:
        await engine.dispose()
        async with resources.engine.begin() as conn:
            await conn.execute(text(f"DROP SCHEMA {schema} CASCADE"))


async def open_backends(resources: Resources, tenant: TenantKey) -> int:
    """How many server backends the failing engine's connections still have (a closed
    connection's backend may take a moment to exit)."""
    application = breaker_name(tenant)
    deadline = asyncio.get_running_loop().time() + 5
    while True:
        async with resources.engine.connect() as conn:
            count = int(await conn.scalar(text(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = :name"),
                {"name": application}))
        if count == 0 or asyncio.get_running_loop().time() > deadline:
            return count
        await asyncio.sleep(0.02)


async def test_a_failed_try_is_retried_and_the_last_one_records_why(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
    failing_lock_engine: AsyncEngine,
) -> None:
    queued = await queue(client, resources)
    broken = dataclasses.replace(resources, engine=failing_lock_engine, background=[])

    with pytest.raises(asyncpg.RaiseError, match="injected failure taking the scope lock"):
        await run_queued(queued.context(broken, MAX_TRIES - 1), queued.payload)
    run = await get_run(client, queued.run_id)
    assert (run["status"], run["error"], run["started_at"]) == ("running", None, None)
    # The connection the lock was tried on was closed, not handed back to the pool.
    assert await open_backends(resources, tenant) == 0

    with pytest.raises(asyncpg.RaiseError, match="injected failure taking the scope lock"):
        await run_queued(queued.context(broken, MAX_TRIES), queued.payload)

    assert_failed_without_starting(
        await get_run(client, queued.run_id),
        f"{NEVER_STARTED}RaiseError: injected failure taking the scope lock")
    assert await open_backends(resources, tenant) == 0
    await assert_untouched(client, queued.source_ids)
    # No lock was left behind: the scope runs again.
    again = await client.post("/v1/consolidations", json={"user_id": "u1"})
    assert again.status_code == 200, again.text


async def test_the_recorded_cause_is_cut_to_1000_characters(
    client: httpx.AsyncClient, resources: Resources, failing_lock_engine: AsyncEngine,
) -> None:
    queued = await queue(client, resources)
    long = "x" * 2000
    async with failing_lock_engine.begin() as conn:
        await conn.execute(text(f"""
            CREATE OR REPLACE FUNCTION pg_try_advisory_lock(bigint) RETURNS boolean
            LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '{long}'; END $$"""))
    broken = dataclasses.replace(resources, engine=failing_lock_engine, background=[])

    with pytest.raises(asyncpg.RaiseError) as raised:
        await run_queued(queued.context(broken, MAX_TRIES), queued.payload)

    assert str(raised.value) == long  # what propagates is the whole exception
    run = await get_run(client, queued.run_id)
    assert (run["status"], run["started_at"]) == ("failed", None)
    assert run["error"] == f"{NEVER_STARTED}RaiseError: {long}"[:1000]
    assert len(run["error"]) == 1000


async def test_when_the_database_is_down_the_last_try_reraises_and_leaves_the_run(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    queued = await queue(client, resources)
    engine = unreachable_engine(resources)
    down = dataclasses.replace(resources, engine=engine,
                               sessionmaker=create_sessionmaker(engine), background=[])
    try:
        # The failure cannot be recorded either; what propagates is the original error
        # (the sweep marks the run once its job is gone).
        with pytest.raises(ConnectionRefusedError):
            await run_queued(queued.context(down, MAX_TRIES), queued.payload)
    finally:
        await engine.dispose()

    run = await get_run(client, queued.run_id)
    assert (run["status"], run["error"], run["started_at"]) == ("running", None, None)
    await assert_untouched(client, queued.source_ids)


# What happens once the run has started ------------------------------------------------


async def backend_gone(resources: Resources, pid: int) -> None:
    deadline = asyncio.get_running_loop().time() + 5
    while True:
        async with resources.engine.connect() as conn:
            alive = await conn.scalar(text("SELECT count(*) FROM pg_stat_activity "
                                           "WHERE pid = :pid"), {"pid": pid})
        if not alive:
            return
        assert asyncio.get_running_loop().time() < deadline, f"backend {pid} still there"
        await asyncio.sleep(0.02)


async def lock_holder(resources: Resources, tenant: TenantKey, run_id: str) -> int:
    async with resources.sessionmaker() as session:
        record = await ConsolidationRepository(session, tenant.tenant_id).get_run(
            uuid.UUID(run_id))
    assert record is not None
    assert record.lock_pid is not None
    return record.lock_pid


async def test_a_run_whose_connection_dies_mid_run_fails_saying_why_and_frees_the_scope(
    resources: Resources, tenant: TenantKey,
) -> None:
    llm = GatedLLM()
    held = dataclasses.replace(resources, llm=llm, background=[])
    async with make_client(held, tenant.headers) as client:
        queued = await queue(client, held, strategy="llm")
        job = asyncio.create_task(run_queued(queued.context(held, 1), queued.payload))
        try:
            await asyncio.wait_for(llm.started.wait(), 10)
            pid = await lock_holder(resources, tenant, queued.run_id)
            async with resources.engine.connect() as conn:
                assert await conn.scalar(text("SELECT pg_terminate_backend(:pid)"),
                                         {"pid": pid})
            await backend_gone(resources, pid)
        finally:
            llm.release.set()
            # A started run records its own failure: the job returns, it does not raise.
            await asyncio.wait_for(job, 10)

        run = await get_run(client, queued.run_id)
        assert (run["status"], run["created"], run["deleted"]) == ("failed", 0, 0)
        assert run["started_at"] is not None
        assert [(g["outcome"], g["error"], g["summary_id"], g["removed_ids"])
                for g in run["groups"]] == [("failed", "cut_off", None, [])]
        await assert_untouched(client, queued.source_ids)
        # `error` says why the run failed (docs/consolidation.md): the driver's error on the
        # lost connection (which one depends on where the write was), not the task group
        # it surfaced through.
        assert run["error"].split(":")[0] in {"InterfaceError", "InternalClientError",
                                              "ConnectionDoesNotExistError"}, run["error"]
        assert "TaskGroup" not in run["error"], run["error"]
        # The dead connection took its lock with it: the scope runs again.
        again = await client.post("/v1/consolidations", json={"user_id": "u1"})
        assert again.status_code == 200, again.text
        assert again.json()["created"] == 1


@pytest.mark.parametrize("redelivered_to", ["same-settings", "no-llm"])
async def test_a_redelivery_while_the_run_still_runs_elsewhere_leaves_it_running(
    resources: Resources, tenant: TenantKey, redelivered_to: str,
) -> None:
    llm = GatedLLM()
    held = dataclasses.replace(resources, llm=llm, background=[])
    # A worker whose settings no longer compose the run (no LLM) must not fail it either.
    other = held if redelivered_to == "same-settings" else dataclasses.replace(held, llm=None)
    async with make_client(held, tenant.headers) as client:
        queued = await queue(client, held, strategy="llm")
        # The first delivery started the run and holds its scope, waiting on the LLM.
        first = asyncio.create_task(run_queued(queued.context(held, BUSY_RETRIES - 1),
                                               queued.payload))
        try:
            await asyncio.wait_for(llm.started.wait(), 10)
            # Its worker stalled past the heartbeat timeout, so pgqueuer hands the job to
            # another worker (a stale re-pick keeps the job's attempts); the scope is busy
            # with this very run.
            with contextlib.suppress(RetryLater):
                await run_queued(queued.context(other, BUSY_RETRIES), queued.payload)

            during = await get_run(client, queued.run_id)
            assert (during["status"], during["error"]) == ("running", None), during
        finally:
            llm.release.set()
            await asyncio.wait_for(first, 10)
        done = await get_run(client, queued.run_id)
        assert (done["status"], done["error"], done["created"]) == ("succeeded", None, 1)


class FailingEmbedder(HashEmbedder):
    """The hash embedder, but embedding a summary fails."""

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        raise RuntimeError("embedding service unavailable")


async def test_a_queued_run_whose_summary_cannot_be_embedded_leaves_the_group_alone(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    queued = await queue(client, resources)
    no_embedding = dataclasses.replace(resources, embedder=FailingEmbedder(384), background=[])

    await run_queued(queued.context(no_embedding, 1), queued.payload)

    run = await get_run(client, queued.run_id)
    assert (run["status"], run["error"]) == (
        "failed", "1 of 1 groups failed; each was left exactly as it was")
    assert run["started_at"] is not None
    assert run["progress"] == {"groups_done": 1, "groups_total": 1}
    (group,) = run["groups"]
    assert (group["outcome"], group["error"], group["detail"]) == (
        "failed", "embedding_failed", "embedding service unavailable")
    assert (group["summary_id"], group["removed_ids"], group["folded_ids"]) == (None, [], [])
    assert (run["consolidated"], run["created"], run["deleted"]) == (0, 0, 0)
    await assert_untouched(client, queued.source_ids)


async def test_a_queued_run_whose_op_fits_nothing_skips_the_group(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    queued = await queue(client, resources, items=[memory(f"{i}" * 300, i) for i in range(3)],
                         op={"name": "concatenate", "max_chars": 200})

    await run_queued(queued.context(resources, 1), queued.payload)

    run = await get_run(client, queued.run_id)
    # A group its op could not summarise is reported on the group; the run succeeds.
    assert (run["status"], run["error"]) == ("succeeded", None)
    assert run["progress"] == {"groups_done": 1, "groups_total": 1}
    (group,) = run["groups"]
    assert (group["outcome"], group["error"], group["detail"]) == (
        "skipped", "op_nothing_fits", "no entry fits in 200 characters")
    assert (group["summary_id"], group["removed_ids"], group["folded_ids"]) == (None, [], [])
    assert (run["consolidated"], run["created"], run["deleted"]) == (0, 0, 0)
    await assert_untouched(client, queued.source_ids)


@pytest.mark.parametrize("change", ["patch", "delete", "archive", "summarise"])
async def test_a_source_changed_while_the_llm_works_skips_the_group(
    resources: Resources, tenant: TenantKey, change: str,
) -> None:
    llm = GatedLLM()
    held = dataclasses.replace(resources, llm=llm, background=[])
    mode = "synthesize_only" if change == "summarise" else "archive"
    async with make_client(held, tenant.headers) as client:
        # The memories are also in the narrower u1 + a1 scope, which has a lock of its own.
        queued = await queue(client, held, strategy="llm", mode=mode,
                             items=[memory(f"note {i}", i, agent_id="a1") for i in range(3)])
        job = asyncio.create_task(run_queued(queued.context(held, 1), queued.payload))
        covering = None
        try:
            await asyncio.wait_for(llm.started.wait(), 10)
            (pending,) = (await get_run(client, queued.run_id))["groups"]
            assert pending["outcome"] == "pending"
            changed = pending["folded_ids"][0]
            if change == "patch":
                resp = await client.patch(f"/v1/memories/{changed}",
                                          json={"content": "note edited meanwhile"})
                assert resp.status_code == 200, resp.text
            elif change == "delete":
                resp = await client.delete(f"/v1/memories/{changed}")
                assert resp.status_code == 204, resp.text
            else:  # a run on an overlapping scope folds the same memories first
                resp = await client.post("/v1/consolidations", json={
                    "user_id": "u1", "agent_id": "a1", "mode": mode})
                assert resp.status_code == 200, resp.text
                assert resp.json()["groups"][0]["folded_ids"] == pending["folded_ids"]
                overlapping = resp.json()["id"]
                covering = resp.json()["groups"][0]["summary_id"]
        finally:
            llm.release.set()
            await asyncio.wait_for(job, 10)

        run = await get_run(client, queued.run_id)
        # A skipped group does not fail the run.
        assert (run["status"], run["error"]) == ("succeeded", None)
        (group,) = run["groups"]
        detail = {"patch": f"memory {changed} changed since it was selected",
                  "delete": f"memory {changed} was deleted",
                  "archive": f"memory {changed} was archived or expired",
                  "summarise": f"summary {covering} of another run has covered these "
                               "memories since they were selected"}[change]
        assert (group["outcome"], group["error"], group["detail"]) == (
            "skipped", "sources_changed", detail)
        assert (group["summary_id"], group["removed_ids"], group["folded_ids"]) == (None, [], [])
        assert (run["consolidated"], run["created"], run["deleted"]) == (0, 0, 0)
        if change in ("archive", "summarise"):
            # Folded once, by the other run.
            (summary,) = await summaries(client, include_archived="true")
            assert summary["consolidation_id"] == overlapping
        else:
            await assert_untouched(client, [i for i in queued.source_ids if i != changed])
