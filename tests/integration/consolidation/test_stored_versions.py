"""Runs another version of the service stored, as a replica meets them in a rolling
deploy: one written by a newer version (a field this one does not know) is shown
without it and never run here, its job waiting for a replica that knows the field; one
whose stored request no longer reads is given up at once, naming the field."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import text

from app.consolidation.jobs import BUSY_RETRIES, run_queued
from app.resources import Resources
from app.worker.registry import RetryLater
from tests.integration.consolidation.conftest import consolidate, memory, seed
from tests.integration.consolidation.test_queued_jobs import (
    assert_failed_without_starting,
    assert_untouched,
    get_run,
    queue,
)

NEWER = "queued by a newer version of the service; this one does not know future_filter"


async def store(resources: Resources, run_id: str, column: str, expression: str) -> None:
    """Rewrite a stored run's JSON column as another version would have written it."""
    async with resources.engine.begin() as conn:
        await conn.execute(text(f"UPDATE consolidation_runs SET {column} = {expression} "
                                "WHERE id = :id"), {"id": run_id})


async def test_a_run_a_newer_version_wrote_is_shown_without_the_fields_it_added(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    await seed(client, [memory(f"note {i}", i) for i in range(3)])
    run = await consolidate(client, user_id="u1", dry_run=True)
    await store(resources, run["id"], "request",
                """request || '{"future_filter": {"x": 1}}'""")
    await store(resources, run["id"], "composition",
                "jsonb_set(composition, '{selector,future_knob}', '3')")

    shown = await get_run(client, run["id"])
    listed = await client.get("/v1/consolidations")

    assert "future_filter" not in shown["request"]
    assert shown["request"] == run["request"]
    assert shown["composition"] == run["composition"]
    assert listed.status_code == 200, listed.text
    assert [r["id"] for r in listed.json()["items"]] == [run["id"]]


async def test_a_queued_run_from_a_newer_version_waits_and_is_not_run_here(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    queued = await queue(client, resources)
    await store(resources, queued.run_id, "request",
                """request || '{"future_filter": {"x": 1}}'""")

    with pytest.raises(RetryLater) as waiting:
        await run_queued(queued.context(resources, 1), queued.payload)
    run = await get_run(client, queued.run_id)

    assert waiting.value.reason == NEWER
    assert (run["status"], run["started_at"], run["error"]) == ("running", None, None)
    await assert_untouched(client, queued.source_ids)


async def test_a_queued_run_no_replica_of_its_version_took_is_given_up(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    queued = await queue(client, resources)
    await store(resources, queued.run_id, "request",
                """request || '{"future_filter": {"x": 1}}'""")

    await run_queued(queued.context(resources, BUSY_RETRIES), queued.payload)

    assert_failed_without_starting(await get_run(client, queued.run_id),
                                   f"{NEWER}, and no replica that does took it")
    await assert_untouched(client, queued.source_ids)


async def test_a_queued_run_whose_stored_request_no_longer_reads_is_given_up_at_once(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    queued = await queue(client, resources)
    await store(resources, queued.run_id, "request",
                """jsonb_set(request, '{group_threshold}', '"lots"')""")

    await run_queued(queued.context(resources, 1), queued.payload)

    async with resources.engine.connect() as conn:
        status, error, started = (await conn.execute(text(
            "SELECT status, error, started_at FROM consolidation_runs WHERE id = :id"),
            {"id": queued.run_id})).one()
    assert (status, started) == ("failed", None)
    assert error.startswith("its stored request no longer reads: group_threshold: "), error
    await assert_untouched(client, queued.source_ids)
