"""A session keeps its newest ENGRAM_SESSION_MAX_EVENTS events: a client that keeps
sending turns with the wrong identity, or a summariser that keeps failing and recovering,
does not grow the log for as long as the session lives."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from app.resources import Resources
from app.sessions.summariser import ExtractiveSummariser, SummaryFailed
from app.sessions.types import TurnView
from tests.conftest import TenantKey, make_client
from tests.integration.sessions.conftest import (
    SMALL,
    append,
    folder_with,
    get_json,
    new_id,
    with_settings,
)


async def events(client: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (
        await get_json(client, f"/v1/sessions/{sid}/events?limit=500"))["items"]
    return items


async def test_refused_turns_keep_only_the_newest_events(
    resources: Resources, tenant: TenantKey,
) -> None:
    bounded = with_settings(resources, session_max_events=3)
    one, two = new_id(), new_id()
    async with make_client(bounded, tenant.headers) as client:
        for sid in (one, two):
            await append(client, sid, "I am u1.", user_id="u1")
        for n in range(2, 7):
            await append(client, one, f"I am u{n}.", user_id=f"u{n}", expect=409)
        for n in range(2, 4):
            await append(client, two, f"I am u{n}.", user_id=f"u{n}", expect=409)

        kept = await events(client, one)
        other = await events(client, two)
        session = await get_json(client, f"/v1/sessions/{one}")

    assert [e["detail"]["fields"] for e in kept] == [
        {"user_id": "u6"}, {"user_id": "u5"}, {"user_id": "u4"}]
    # The bound is per session, and the turns are not events: none was lost.
    assert [e["detail"]["fields"] for e in other] == [
        {"user_id": "u3"}, {"user_id": "u2"}]
    assert session["counts"]["turns"] == 1


class Failing:
    name = "failing"

    async def fold(self, summary: str | None, turns: Sequence[TurnView], max_chars: int) -> str:
        raise SummaryFailed("llm_timeout", "the summariser did not answer")


async def test_a_flapping_summariser_keeps_only_the_newest_health_changes(
    resources: Resources, tenant: TenantKey,
) -> None:
    """The fold job's events (app/sessions/folder.py) are bounded as the requests' are."""
    bounded = with_settings(resources, **SMALL, session_max_events=2)
    sid = new_id()
    async with make_client(bounded, tenant.headers) as client:
        for i in range(11):  # two folds due
            await append(client, sid, f"Alice mentions fact number {i}.")
        for _ in range(2):  # healthy -> retry -> degraded
            failed = await folder_with(bounded, tenant, sid, Failing()).run()
            assert failed.retry_after is not None
        healed = await folder_with(bounded, tenant, sid, ExtractiveSummariser()).run()
        log = await events(client, sid)
        session = await get_json(client, f"/v1/sessions/{sid}")

    assert healed.folds == 2
    assert session["health"]["state"] == "healthy"
    # Four changes happened; the two newest are kept.
    assert [(e["detail"]["from"], e["detail"]["to"]) for e in log] == [
        ("recovering", "healthy"), ("degraded", "recovering")]
