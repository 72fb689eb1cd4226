"""Choosing a session's strategy: creating a session with one, and switching an existing
session, with what each switch does to its folds."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.resources import Resources
from tests.conftest import TenantKey, make_client
from tests.integration.sessions.conftest import (
    GatedSummariser,
    append,
    fold,
    fold_due_since,
    folder_with,
    get_json,
    new_id,
)


async def configure(client: httpx.AsyncClient, sid: str, strategy: str,
                    expect: int) -> dict[str, object]:
    resp = await client.put(f"/v1/sessions/{sid}", json={"strategy": strategy})
    assert resp.status_code == expect, resp.text
    body: dict[str, object] = resp.json()
    return body


async def test_a_session_can_be_created_with_its_own_strategy(
    small_client: httpx.AsyncClient,
) -> None:
    sid = new_id()
    created = await configure(small_client, sid, "truncation", 201)
    again = await configure(small_client, sid, "truncation", 200)
    for i in range(8):
        await append(small_client, sid, f"turn {i}")
    session = await get_json(small_client, f"/v1/sessions/{sid}")

    assert created["strategy"] == "truncation"
    assert created["counts"] == {"turns": 0, "unsummarised": 0, "summarised": 0, "dropped": 0}
    assert again == created
    # The service's default is rolling_summary; this session never folds.
    assert (session["strategy"], session["cursor"], session["backlog"]["due"]) == \
        ("truncation", 0, 0)
    events = await get_json(small_client, f"/v1/sessions/{sid}/events")
    assert events["items"] == []


async def test_switching_to_a_rolling_summary_folds_the_log_within_the_backlog(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    sid = new_id()
    await configure(small_client, sid, "truncation", 201)
    for i in range(20):
        await append(small_client, sid, f"Fact {i}: the code is {1000 + i}.")
    assert await fold_due_since(small, tenant, sid) is None

    switched = await configure(small_client, sid, "rolling_summary", 200)

    # 20 unsummarised: 4 folds due of 4 turns, 2 may wait: turns 1-8 are dropped.
    assert switched["strategy"] == "rolling_summary"
    assert switched["counts"] == {"turns": 20, "unsummarised": 12, "summarised": 0,
                                  "dropped": 8}
    assert switched["backlog"] == {"due": 2, "max": 2}
    assert await fold_due_since(small, tenant, sid) is not None
    events = (await get_json(small_client, f"/v1/sessions/{sid}/events"))["items"]
    # One event for the folds dropped at once: one a fold flooded the bounded log (a
    # session probe's 1,100-turn switch kept only those, its strategy_changed pushed out).
    assert [e["kind"] for e in reversed(events)] == ["strategy_changed", "backlog_overflow"]
    assert events[-1]["detail"] == {"from": "truncation", "to": "rolling_summary"}
    assert events[0]["detail"] == {"first_turn": 1, "last_turn": 8, "folds": 2,
                                   "backlog_max": 2, "health": "healthy"}

    assert (await fold(small, tenant, sid)).folds == 2
    context = await get_json(small_client, f"/v1/sessions/{sid}/context")
    assert "1008" in context["summary"]
    assert "1007" not in context["summary"]
    assert [t["seq"] for t in context["turns"]] == [17, 18, 19, 20]


async def test_leaving_a_rolling_summary_stops_folding_and_clears_the_flag(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    sid = new_id()
    for i in range(7):
        await append(small_client, sid, f"turn {i}")
    assert await fold_due_since(small, tenant, sid) is not None

    switched = await configure(small_client, sid, "none", 200)
    outcome = await fold(small, tenant, sid)

    assert outcome.folds == 0
    assert await fold_due_since(small, tenant, sid) is None
    assert (switched["strategy"], switched["backlog"]["due"], switched["cursor"]) == \
        ("none", 0, 0)
    context = await get_json(small_client, f"/v1/sessions/{sid}/context")
    assert (context["mode"], context["turns"]) == ("none", [])


@pytest.mark.parametrize(("body", "field"), [
    ({"strategy": "summarise"}, "strategy"),
    ({}, "strategy"),
    ({"strategy": "none", "budget": 5}, "budget"),
    ({"strategy": None}, "strategy"),
])
async def test_a_bad_configuration_is_422_and_creates_nothing(
    client: httpx.AsyncClient, body: dict[str, object], field: str,
) -> None:
    sid = new_id()
    resp = await client.put(f"/v1/sessions/{sid}", json=body)
    assert resp.status_code == 422
    assert field in [e["field"] for e in resp.json()["errors"]]
    assert (await client.get(f"/v1/sessions/{sid}")).status_code == 404


async def test_another_tenants_session_is_not_reconfigured(
    resources: Resources, client: httpx.AsyncClient, other_tenant: TenantKey,
) -> None:
    sid = new_id()
    await configure(client, sid, "truncation", 201)
    async with make_client(resources, other_tenant.headers) as other:
        assert (await configure(other, sid, "none", 201))["strategy"] == "none"
    assert (await get_json(client, f"/v1/sessions/{sid}"))["strategy"] == "truncation"


async def test_a_fold_in_flight_when_the_strategy_switches_is_discarded(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    sid = new_id()
    gated = GatedSummariser()
    folder = folder_with(small, tenant, sid, gated)
    for i in range(6):
        await append(small_client, sid, f"turn {i}")
    running = asyncio.create_task(folder.run())
    await asyncio.wait_for(gated.started.wait(), 5)
    await configure(small_client, sid, "truncation", 200)
    gated.release.set()

    outcome = await asyncio.wait_for(running, 10)

    assert outcome.folds == 0
    session = await get_json(small_client, f"/v1/sessions/{sid}")
    assert (session["cursor"], session["summary_updated_at"]) == (0, None)
    assert await fold_due_since(small, tenant, sid) is None


async def test_events_of_one_request_list_in_the_order_they_happened(
    small_client: httpx.AsyncClient,
) -> None:
    # One PUT records a switch, then the six folds it dropped, in one transaction.
    sid = new_id()
    await configure(small_client, sid, "truncation", 201)
    for i in range(36):
        await append(small_client, sid, f"turn {i}")
    await configure(small_client, sid, "rolling_summary", 200)

    events = (await get_json(small_client, f"/v1/sessions/{sid}/events"))["items"]
    oldest_first = list(reversed(events))
    assert oldest_first[0]["kind"] == "strategy_changed"
    assert [(e["kind"], e["detail"].get("first_turn"), e["detail"].get("folds"))
            for e in oldest_first[1:]] == [("backlog_overflow", 1, 6)]
