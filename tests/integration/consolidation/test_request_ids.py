"""A consolidation run made in a request passes the request's X-Request-ID on to the LLM,
so the LLM endpoint's logs lead back to the call that caused them."""

from __future__ import annotations

import httpx

from tests.fakes.llm_server import FakeLLMServer
from tests.integration.consolidation.conftest import memory, seed


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
