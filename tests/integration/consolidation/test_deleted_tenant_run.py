"""A consolidation run whose tenant is deleted while its LLM call is in flight."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest
from sqlalchemy import text

from app.resources import Resources
from app.tenants.service import delete_tenant
from tests.conftest import create_tenant_key, make_client
from tests.integration.consolidation.conftest import GatedLLM, memory, seed


async def test_a_run_whose_tenant_was_deleted_meanwhile_ends_without_a_traceback(
    resources: Resources, caplog: pytest.LogCaptureFixture,
) -> None:
    doomed = await create_tenant_key(resources)
    llm = GatedLLM()
    held = dataclasses.replace(resources, llm=llm, background=[])
    async with make_client(held, doomed.headers) as client:
        await seed(client, [memory(f"note {i}", i) for i in range(4)])
        run = asyncio.create_task(client.post("/v1/consolidations",
                                              json={"user_id": "u1", "strategy": "llm"}))
        await asyncio.wait_for(llm.started.wait(), 10)
        await delete_tenant(resources.engine, doomed.name)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            llm.release.set()
            resp = await asyncio.wait_for(run, 10)
    # It used to answer 500 after two tracebacks (NoResultFound, "run vanished").
    assert resp.status_code == 404, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    assert "its tenant was deleted while it ran" in resp.json()["detail"]
    assert not [r for r in caplog.records if r.exc_info is not None or r.levelno >= logging.ERROR]
    assert any("its tenant was deleted while it ran" in r.getMessage() for r in caplog.records
               if r.name == "engram.consolidation")
    async with resources.engine.connect() as conn:
        assert await conn.scalar(text(
            "SELECT count(*) FROM memories WHERE tenant_id = :t"),
            {"t": doomed.tenant_id}) == 0
