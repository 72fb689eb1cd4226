"""The consolidation runs' retention (app/consolidation/repository.py,
`purge_runs_finished_before`; ENGRAM_CONSOLIDATION_RUN_RETENTION_DAYS): a run that ended
before the cutoff goes once no memory names it, and a run a standing summary or an
archived fact names stays, whatever its age, with its revert intact."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import text

from app.consolidation.repository import purge_runs_finished_before
from app.maintenance import start_maintenance
from app.resources import Resources
from tests.conftest import TenantKey, sample
from tests.integration.consolidation.conftest import consolidate, memory, seed
from tests.integration.test_maintenance import wait_for


async def ended_days_ago(resources: Resources, tenant: TenantKey,
                         days: dict[str, float]) -> None:
    """Make each run of `days` (id -> days) look as if it ended that long ago."""
    async with resources.engine.begin() as conn:
        for run_id, ago in days.items():
            await conn.execute(text(
                "UPDATE consolidation_runs SET finished_at = now() - make_interval(secs => :s)"
                " WHERE tenant_id = :t AND id = CAST(:id AS uuid)"),
                {"s": ago * 86400, "t": tenant.tenant_id, "id": run_id})


async def run_status(client: httpx.AsyncClient, run_id: str) -> int:
    return (await client.get(f"/v1/consolidations/{run_id}")).status_code


async def test_old_runs_no_memory_names_are_deleted_and_the_others_kept(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    await seed(client, [memory(f"note {i} of {u}", i, user_id=u)
                        for u in ("kept", "reverted", "synth", "recent") for i in range(3)])
    kept = await consolidate(client, user_id="kept")
    reverted = await consolidate(client, user_id="reverted")
    assert (await client.post(f"/v1/consolidations/{reverted['id']}/revert")).status_code == 200
    synth = await consolidate(client, user_id="synth", mode="synthesize_only")
    (synth_group,) = synth["groups"]
    assert (await client.delete(f"/v1/memories/{synth_group['summary_id']}")).status_code == 204
    dry = await consolidate(client, user_id="kept", dry_run=True)
    nothing = await consolidate(client, user_id="nobody")
    recent = await consolidate(client, user_id="recent")
    assert (await client.post(f"/v1/consolidations/{recent['id']}/revert")).status_code == 200
    assert [r["created"] for r in (kept, reverted, synth, dry, nothing, recent)] == [
        1, 1, 1, 0, 0, 1]
    # The kept run ended first, so the walk meets it before the ones it deletes, and with
    # two runs a window it has to walk on past it.
    await ended_days_ago(resources, tenant, {
        kept["id"]: 45, reverted["id"]: 44, synth["id"]: 43, dry["id"]: 42,
        nothing["id"]: 41, recent["id"]: 29})

    removed = await purge_runs_finished_before(
        resources.engine, datetime.now(UTC) - timedelta(days=30), batch=2)

    assert removed >= 4
    statuses = {name: await run_status(client, run["id"]) for name, run in (
        ("kept", kept), ("reverted", reverted), ("synth", synth), ("dry", dry),
        ("nothing", nothing), ("recent", recent))}
    assert statuses == {"kept": 200, "reverted": 404, "synth": 404, "dry": 404,
                        "nothing": 404, "recent": 200}
    # What is kept still serves: the run's summary names it, and it reverts.
    (group,) = kept["groups"]
    summary = (await client.get(f"/v1/memories/{group['summary_id']}")).json()
    assert summary["consolidation_id"] == kept["id"]
    assert (await client.post(f"/v1/consolidations/{kept['id']}/revert")).status_code == 200


async def test_a_run_whose_summary_was_deleted_goes_at_the_next_round(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    """Named by its summary and by the facts it archived, then by neither once the summary
    is deleted (which brings the facts back)."""
    await seed(client, [memory(f"fact {i}", i) for i in range(3)])
    run = await consolidate(client, user_id="u1")
    (group,) = run["groups"]
    await ended_days_ago(resources, tenant, {run["id"]: 40})
    cutoff = datetime.now(UTC) - timedelta(days=30)

    await purge_runs_finished_before(resources.engine, cutoff)
    assert await run_status(client, run["id"]) == 200

    assert (await client.delete(f"/v1/memories/{group['summary_id']}")).status_code == 204
    await purge_runs_finished_before(resources.engine, cutoff)
    assert await run_status(client, run["id"]) == 404


async def test_the_service_purges_old_runs_in_the_background(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    run = await consolidate(client, user_id="nobody")
    await ended_days_ago(resources, tenant, {run["id"]: 8})
    counted = sample("engram_maintenance_deleted_total", what="consolidation_runs")
    settings = resources.settings.model_copy(update={"consolidation_run_retention_days": 7})
    own = replace(resources, settings=settings, background=[])
    start_maintenance(own)
    try:
        async def purged() -> bool:
            return await run_status(client, run["id"]) == 404

        await wait_for(purged, "the old run was not purged")
    finally:
        for task in own.background:
            task.cancel()
        await asyncio.gather(*own.background, return_exceptions=True)
    assert sample("engram_maintenance_deleted_total", what="consolidation_runs") >= counted + 1


async def test_no_run_is_purged_with_the_retention_off(
    resources: Resources, client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    run = await consolidate(client, user_id="nobody")
    await ended_days_ago(resources, tenant, {run["id"]: 400})
    settings = resources.settings.model_copy(update={"consolidation_run_retention_days": 0})
    own = replace(resources, settings=settings, background=[])
    start_maintenance(own)
    try:
        # Every other round runs at once on start; give them a moment.
        await asyncio.sleep(0.3)
    finally:
        for task in own.background:
            task.cancel()
        await asyncio.gather(*own.background, return_exceptions=True)
    assert await run_status(client, run["id"]) == 200
