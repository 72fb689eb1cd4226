"""A synchronous run the database's outage cuts answers 503 naming the run, not the bare
"retry later" of a request that changed nothing: the groups it wrote before stay written.

Found by an operator probe: a run killed with its database after 4 of 7 groups answered
503 database_unavailable with only a request id, and the run showed `running` for a
minute, nothing saying it had archived 205 memories."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses

from app.db import create_engine, create_sessionmaker
from app.resources import Resources
from tests.conftest import TenantKey, make_client
from tests.fakes.pg_forwarder import forwarding, tcp_url, unix_socket_path
from tests.integration.consolidation.conftest import GatedLLM, memory, seed


async def test_a_run_cut_by_the_database_going_away_names_itself_in_its_503(
    resources: Resources, tenant: TenantKey, database_url: str,
) -> None:
    async with make_client(resources, tenant.headers) as client:
        await seed(client, [memory(f"note {i}", i) for i in range(4)])
    llm = GatedLLM()
    async with contextlib.AsyncExitStack() as outage:
        port = await outage.enter_async_context(
            forwarding(unix_socket_path(database_url), "127.0.0.1"))
        engine = create_engine(tcp_url("127.0.0.1", port), resources.settings)
        through = dataclasses.replace(resources, engine=engine,
                                      sessionmaker=create_sessionmaker(engine), llm=llm,
                                      background=[], reader=None, reads=None)
        try:
            async with make_client(through, tenant.headers) as cut:
                running = asyncio.create_task(cut.post("/v1/consolidations", json={
                    "user_id": "u1", "strategy": "llm"}))
                await asyncio.wait_for(llm.started.wait(), 10)
                await outage.aclose()  # every connection through it breaks; none is taken
                llm.release.set()
                resp = await asyncio.wait_for(running, 30)
        finally:
            await engine.dispose()

    assert resp.status_code == 503, resp.text
    body = resp.json()
    assert body["type"].endswith("/database_unavailable")
    async with make_client(resources, tenant.headers) as client:
        [run] = (await client.get("/v1/consolidations")).json()["items"]
    assert f"consolidation run {run['id']}" in body["detail"]
    assert f"GET /v1/consolidations/{run['id']}" in body["detail"]
