"""Consolidation fixtures: seeding memories over HTTP, a fake LLM on 127.0.0.1, resources
that use it, and a background worker."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from app.providers.llm import ChatCompletionsClient
from app.resources import Resources
from app.worker.jobs import default_registry
from app.worker.runner import Worker
from tests.conftest import TenantKey, make_client
from tests.fakes.llm_server import FakeLLMServer

BASE_TIME = datetime(2026, 1, 1, tzinfo=UTC)


def memory(content: str, minute: int, *, category: str = "general", importance: float = 0.5,
           user_id: str | None = "u1", **extra: Any) -> dict[str, Any]:
    """A memory created `minute` minutes after BASE_TIME (so order is fixed)."""
    created = (BASE_TIME + timedelta(minutes=minute)).isoformat()
    return {"content": content, "category": category, "importance": importance,
            "user_id": user_id, "created_at": created, **extra}


async def seed(client: httpx.AsyncClient, items: list[dict[str, Any]]) -> list[str]:
    resp = await client.post("/v1/memories/batch", json={"items": items})
    assert resp.status_code == 201, resp.text
    return [m["id"] for m in resp.json()["items"]]


async def consolidate(client: httpx.AsyncClient, expect: int = 200,
                      **body: Any) -> dict[str, Any]:
    resp = await client.post("/v1/consolidations", json=body)
    assert resp.status_code == expect, resp.text
    result: dict[str, Any] = resp.json()
    return result


async def get_memory(client: httpx.AsyncClient, memory_id: str) -> dict[str, Any]:
    resp = await client.get(f"/v1/memories/{memory_id}")
    assert resp.status_code == 200, resp.text
    found: dict[str, Any] = resp.json()
    return found


async def summaries(client: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    resp = await client.get("/v1/memories", params={"fact_role": "summary", "limit": 500,
                                                    **params})
    assert resp.status_code == 200, resp.text
    items: list[dict[str, Any]] = resp.json()["items"]
    return items


async def wait_for_run(client: httpx.AsyncClient, run_id: str,
                       seconds: float = 15.0) -> dict[str, Any]:
    deadline = asyncio.get_running_loop().time() + seconds
    while True:
        resp = await client.get(f"/v1/consolidations/{run_id}")
        assert resp.status_code == 200, resp.text
        run: dict[str, Any] = resp.json()
        if run["status"] != "running":
            return run
        assert asyncio.get_running_loop().time() < deadline, f"run still running: {run}"
        await asyncio.sleep(0.05)


@pytest.fixture
def llm_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


def llm_resources_for(resources: Resources, server: FakeLLMServer,
                      **client_options: Any) -> Resources:
    options: dict[str, Any] = {"timeout": 2.0, "max_retries": 0, **client_options}
    llm = ChatCompletionsClient(base_url=server.base_url, model="fake", **options)
    return dataclasses.replace(resources, llm=llm, background=[])


@pytest.fixture
async def llm_resources(resources: Resources,
                        llm_server: FakeLLMServer) -> AsyncIterator[Resources]:
    res = llm_resources_for(resources, llm_server)
    yield res
    assert isinstance(res.llm, ChatCompletionsClient)
    await res.llm.aclose()


@pytest.fixture
async def llm_client(llm_resources: Resources,
                     tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(llm_resources, tenant.headers) as c:
        yield c


@pytest.fixture
async def worker(resources: Resources) -> AsyncIterator[Worker]:
    running = Worker(resources, default_registry(), poll_interval=timedelta(seconds=1))
    await running.start()
    yield running
    await running.stop()


class GatedLLM:
    """An in-process `LLMClient` that holds every call until `release` is set, so a test
    can keep a run in flight for exactly as long as it needs."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()
        self.calls = 0

    async def complete(self, system: str, user: str) -> str:
        from tests.fakes.llm_server import fake_answer

        self.calls += 1
        self.started.set()
        await self.release.wait()
        return fake_answer(system, user)
