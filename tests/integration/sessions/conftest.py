"""Session fixtures: resources with small fold settings, appending over HTTP, and running
a session's fold in the test (the worker's job body, without the queue)."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.resources import Resources
from app.sessions.folder import FoldOutcome, SessionFolder
from app.sessions.jobs import folder_for
from app.sessions.repository import stalled_folds
from app.sessions.summariser import Summariser
from app.sessions.types import TurnView
from tests.conftest import TenantKey, make_client

# A fold is due at 6 unsummarised turns and takes the oldest 4, leaving 2; two folds may
# wait; two failures degrade the summariser, two successes make it healthy again.
SMALL = {"session_fold_threshold": 6, "session_recent_turns": 2, "session_backlog_max": 2,
         "session_degrade_after": 2, "session_recover_after": 2,
         "session_budget_tokens": 2000, "session_summariser": "extractive"}


def with_settings(resources: Resources, **changes: Any) -> Resources:
    return dataclasses.replace(resources, settings=resources.settings.model_copy(update=changes),
                               background=[])


@pytest.fixture
def small(resources: Resources) -> Resources:
    return with_settings(resources, **SMALL)


@pytest.fixture
async def small_client(small: Resources, tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(small, tenant.headers) as c:
        yield c


async def append(client: httpx.AsyncClient, session_id: str, content: str,
                 role: str = "user", expect: int = 201, **extra: Any) -> dict[str, Any]:
    resp = await client.post(f"/v1/sessions/{session_id}/turns",
                             json={"role": role, "content": content, **extra})
    assert resp.status_code == expect, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def get_json(client: httpx.AsyncClient, path: str) -> dict[str, Any]:
    resp = await client.get(path)
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


async def fold(resources: Resources, tenant: TenantKey, session_id: str) -> FoldOutcome:
    return await folder_for(resources, tenant.tenant_id, session_id).run()


def folder_with(resources: Resources, tenant: TenantKey, session_id: str,
                summariser: Summariser) -> SessionFolder:
    """The session's fold as the job builds it, with a summariser the test controls."""
    folder = folder_for(resources, tenant.tenant_id, session_id)
    folder.summariser = summariser
    return folder


def new_id() -> str:
    return f"s-{uuid.uuid4().hex[:10]}"


async def fold_due_since(resources: Resources, tenant: TenantKey, sid: str) -> object:
    async with resources.engine.connect() as conn:
        return await conn.scalar(
            text("SELECT fold_due_since FROM sessions WHERE tenant_id = :t AND session_id = :s"),
            {"t": tenant.tenant_id, "s": sid})


async def flagged(resources: Resources) -> set[tuple[uuid.UUID, str]]:
    """The sessions the sweep would queue a fold for."""
    async with resources.sessionmaker() as db:
        return set(await stalled_folds(db, 100_000))


class GatedSummariser:
    """Holds its fold until released, so a test can change the session meanwhile."""

    name = "gated"

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.release = asyncio.Event()

    async def fold(self, summary: str | None, turns: Sequence[TurnView], max_chars: int) -> str:
        self.started.set()
        await self.release.wait()
        return "stale: " + ",".join(str(t.seq) for t in turns)
