"""A consolidation run made in a request passes the request's X-Request-ID on to the LLM,
so the LLM endpoint's logs lead back to the call that caused them; an async run's job
runs under that id followed by its own. The run's record keeps the id it started
under."""

from __future__ import annotations

import re
from datetime import timedelta

import httpx

from app.resources import Resources
from app.worker.jobs import default_registry
from app.worker.runner import Worker
from tests.fakes.llm_server import FakeLLMServer
from tests.integration.consolidation.conftest import memory, seed, wait_for_run


async def test_the_llm_calls_of_a_run_carry_the_requests_id(
    llm_client: httpx.AsyncClient, llm_server: FakeLLMServer,
) -> None:
    await seed(llm_client, [memory(f"Alice's standup note {i}", i) for i in range(3)])

    resp = await llm_client.post("/v1/consolidations",
                                 json={"user_id": "u1", "strategy": "llm"},
                                 headers={"X-Request-ID": "trace-llm-1"})

    assert resp.status_code == 200, resp.text
    assert resp.json()["groups"][0]["mode"] == "llm_synthesis"
    assert llm_server.requests
    assert {r.request_id for r in llm_server.requests} == {"trace-llm-1"}
    # The run's record names the id, so its log lines can be found from it.
    assert resp.json()["request_id"] == "trace-llm-1"
    stored = await llm_client.get(f"/v1/consolidations/{resp.json()['id']}")
    assert stored.json()["request_id"] == "trace-llm-1"


async def test_an_async_runs_llm_calls_carry_the_queuing_requests_id_and_the_jobs(
    llm_resources: Resources, llm_client: httpx.AsyncClient, llm_server: FakeLLMServer,
) -> None:
    """The job runs under "<request id>.job-<job id>" (app/worker/runner.py), so the
    LLM's logs lead back to the request that queued the run, and to the job."""
    await seed(llm_client, [memory(f"Alice's standup note {i}", i) for i in range(3)])
    worker = Worker(llm_resources, default_registry(), poll_interval=timedelta(seconds=1))
    await worker.start()
    try:
        resp = await llm_client.post(
            "/v1/consolidations", json={"user_id": "u1", "strategy": "llm", "async": True},
            headers={"X-Request-ID": "trace-async-1"})
        assert resp.status_code == 202, resp.text
        assert resp.json()["request_id"] == "trace-async-1"
        run = await wait_for_run(llm_client, resp.json()["id"])
    finally:
        await worker.stop()

    assert run["status"] == "succeeded"
    # The queuing request's id, which the job's own id starts with.
    assert run["request_id"] == "trace-async-1"
    assert llm_server.requests
    (sent,) = {r.request_id for r in llm_server.requests}
    assert sent is not None
    assert re.fullmatch(r"trace-async-1\.job-[0-9]+", sent), sent
