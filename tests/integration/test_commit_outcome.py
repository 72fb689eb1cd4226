"""A change whose COMMIT the database never answered may have been applied: the request
answers 503 outcome_unknown, never an answer that says nothing changed, and a create
retried with its Idempotency-Key is applied exactly once either way. Here the backend
is stopped (SIGSTOP) or killed (SIGTERM) at the moment the service sends COMMIT."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import event, text

from app.resources import Resources
from tests.conftest import TenantKey, count_memories, make_client

KEY = {"Idempotency-Key": "commit-in-the-dark"}


async def write_backend(res: Resources) -> int:
    """The backend of the engine's one connection, which the next request's writes use."""
    async with res.engine.connect() as conn:
        return int(await conn.scalar(text("SELECT pg_backend_pid()")) or 0)


def wait_gone(pid: int) -> None:
    """Until the backend `pid` has exited. Synchronous, since it also runs in the
    engine's commit event, before COMMIT is sent."""
    for _ in range(500):
        if not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.01)
    raise AssertionError(f"backend {pid} did not exit")


@contextmanager
def at_commit(res: Resources, act: Callable[[], None]) -> Iterator[None]:
    """`act` runs as the engine is about to send COMMIT (once)."""
    done: list[bool] = []

    def before_commit(_conn: Any) -> None:
        if not done:
            done.append(True)
            act()

    event.listen(res.engine.sync_engine, "commit", before_commit)
    try:
        yield
    finally:
        event.remove(res.engine.sync_engine, "commit", before_commit)
    assert done, "no COMMIT was sent"


def assert_outcome_unknown(resp: httpx.Response) -> None:
    assert resp.status_code == 503, resp.text
    assert resp.headers["content-type"].startswith("application/problem+json")
    assert resp.headers["retry-after"] == "1"
    body = resp.json()
    assert body["type"].endswith("/outcome_unknown")
    assert "may or may not have been applied" in body["detail"]


def create(client: httpx.AsyncClient) -> Any:
    return client.post("/v1/memories", json={"content": "committed in the dark"},
                       headers=KEY)


async def test_a_commit_the_server_never_answers_answers_outcome_unknown(
    bounded: Resources, resources: Resources, tenant: TenantKey,
) -> None:
    async with make_client(bounded, tenant.headers) as client:
        before = await count_memories(resources, tenant)
        frozen = await write_backend(bounded)
        try:
            with at_commit(bounded, lambda: os.kill(frozen, signal.SIGSTOP)):
                lost = await create(client)
        finally:
            os.kill(frozen, signal.SIGCONT)
        # Resumed, the backend reads the COMMIT the client sent before giving up, and
        # applies it: exactly why the answer could not say that nothing changed.
        await asyncio.to_thread(wait_gone, frozen)
        applied = await count_memories(resources, tenant)
        retried = await create(client)
        replacement = await write_backend(bounded)

    assert_outcome_unknown(lost)
    assert applied == before + 1
    assert retried.status_code == 201, retried.text
    assert retried.headers["idempotent-replayed"] == "true"
    assert await count_memories(resources, tenant) == before + 1
    assert replacement != frozen


async def test_a_connection_broken_mid_commit_answers_outcome_unknown(
    bounded: Resources, resources: Resources, tenant: TenantKey,
) -> None:
    async with make_client(bounded, tenant.headers) as client:
        before = await count_memories(resources, tenant)
        victim = await write_backend(bounded)

        def kill() -> None:
            os.kill(victim, signal.SIGTERM)  # what pg_terminate_backend sends
            wait_gone(victim)

        with at_commit(bounded, kill):
            lost = await create(client)
        applied = await count_memories(resources, tenant)
        retried = await create(client)

    assert_outcome_unknown(lost)
    # The backend died before it read the COMMIT: nothing was applied, and the retry
    # with the same key applies the create once.
    assert applied == before
    assert retried.status_code == 201, retried.text
    assert "idempotent-replayed" not in retried.headers
    assert await count_memories(resources, tenant) == before + 1


async def test_a_read_whose_commit_goes_unanswered_is_an_ordinary_timeout(
    bounded: Resources, tenant: TenantKey,
) -> None:
    """A GET changes nothing, so its lost COMMIT is the statement bound's 503."""
    async with make_client(bounded, tenant.headers) as client:
        frozen = await write_backend(bounded)
        try:
            with at_commit(bounded, lambda: os.kill(frozen, signal.SIGSTOP)):
                lost = await client.get("/v1/consolidations")
        finally:
            os.kill(frozen, signal.SIGCONT)
        after = await client.get("/v1/consolidations")

    assert lost.status_code == 503, lost.text
    assert lost.json()["type"].endswith("/database_timeout")
    assert after.status_code == 200, after.text
