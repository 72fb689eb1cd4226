"""The rolling summary: folds move the cursor with the summary, once per turn; the
summariser's health over a real HTTP LLM that fails, times out and answers garbage; the
bounded backlog; and the fold job run by the worker and queued again by the sweep."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Iterator, Sequence
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.providers.llm import ChatCompletionsClient
from app.resources import Resources
from app.sessions import folder as folder_module
from app.sessions.context import estimate_tokens
from app.sessions.folder import FOLD_JOB
from app.sessions.jobs import requeue_stalled_folds
from app.sessions.summariser import ExtractiveSummariser, SummaryFailed
from app.sessions.types import TurnView
from app.worker.jobs import default_registry
from app.worker.runner import Worker
from tests.conftest import TenantKey, make_client, sample
from tests.fakes.llm_server import (
    Deterministic,
    EchoAuthorization,
    Fail,
    FakeLLMServer,
    Garbage,
    Hang,
    Reply,
)
from tests.integration.sessions.conftest import (
    SMALL,
    GatedSummariser,
    append,
    fold,
    folder_with,
    get_json,
    new_id,
    with_settings,
)

FACTS = ["Dana's flight to Lisbon is on 12 March.", "The budget is 4200 euros.",
         "Dana prefers the Alfama hotel.", "Book a table for 3 at Ramiro.",
         "Dana's sister Eva joins on 14 March.", "The return flight is TP 1350.",
         "Dana is allergic to peanuts.", "Pay the deposit by 1 March.",
         "Eva's phone is 555 0100.", "The museum opens at 10 on Sundays."]


async def say(client: httpx.AsyncClient, sid: str, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        await append(client, sid, FACTS[i % len(FACTS)] + f" (turn {i + 1})",
                     role="user" if i % 2 == 0 else "assistant")


class CountingSummariser:
    """Extractive, counting what it was asked to fold."""

    name = "counting"

    def __init__(self) -> None:
        self.folded: list[list[int]] = []

    async def fold(self, summary: str | None, turns: Sequence[TurnView], max_chars: int) -> str:
        self.folded.append([t.seq for t in turns])
        return await ExtractiveSummariser().fold(summary, turns, max_chars)


async def test_a_fold_saves_the_summary_and_the_cursor_and_the_context_uses_both(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    sid = new_id()
    await say(small_client, sid, 7)
    before = await get_json(small_client, f"/v1/sessions/{sid}")
    assert before["backlog"]["due"] == 1

    outcome = await fold(small, tenant, sid)

    assert (outcome.folds, outcome.retry_after) == (1, None)
    session = await get_json(small_client, f"/v1/sessions/{sid}")
    assert session["cursor"] == 4
    assert session["counts"] == {"turns": 7, "unsummarised": 3, "summarised": 4, "dropped": 0}
    assert session["backlog"]["due"] == 0
    assert session["summary_updated_at"] is not None
    context = await get_json(small_client, f"/v1/sessions/{sid}/context")
    assert context["mode"] == "rolling_summary"
    assert [t["seq"] for t in context["turns"]] == [5, 6, 7]
    summary = context["summary"]
    for fact in ("Lisbon is on 12 March", "4200 euros", "Alfama", "Ramiro"):
        assert fact in summary
    assert "Eva joins" not in summary  # turn 5 is not folded yet
    assert context["warning"] is None
    assert context["tokens"] == (-(-len(summary) // 4)
                                 + sum(t["tokens"] for t in context["turns"]))


async def test_each_turn_is_folded_once_in_order_across_folds(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    sid = new_id()
    counting = CountingSummariser()
    folder = folder_with(small, tenant, sid, counting)
    await say(small_client, sid, 7)
    assert (await folder.run()).folds == 1
    assert (await folder.run()).folds == 0  # nothing due: a second delivery does nothing
    await say(small_client, sid, 7, start=7)  # 10 unsummarised: two folds due
    assert (await folder.run()).folds == 2

    assert counting.folded == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]]
    session = await get_json(small_client, f"/v1/sessions/{sid}")
    assert (session["cursor"], session["counts"]["unsummarised"]) == (12, 2)
    summary = (await get_json(small_client, f"/v1/sessions/{sid}/context"))["summary"]
    assert summary.index("(turn 1)") < summary.index("(turn 5)") < summary.index("(turn 9)")
    # Told again at turn 11, the flight is kept once, at its newest telling.
    assert summary.count("Lisbon") == 1
    assert summary.index("(turn 10)") < summary.index("Lisbon")


async def test_the_summary_leaves_room_for_recent_turns_within_the_budget(
    resources: Resources, tenant: TenantKey,
) -> None:
    res = with_settings(resources, **{**SMALL, "session_budget_tokens": 60})
    sid = new_id()
    async with make_client(res, tenant.headers) as client:
        await say(client, sid, 7)
        await fold(res, tenant, sid)
        context = await get_json(client, f"/v1/sessions/{sid}/context")
    assert context["summary"] is not None
    assert context["tokens"] <= 60
    assert context["omitted_turns"] == 3 - len(context["turns"])
    assert context["omitted_turns"] > 0
    # What is shown is the newest, without a hole.
    assert [t["seq"] for t in context["turns"]] == list(range(8 - len(context["turns"]), 8))


@pytest.fixture
def llm_server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as server:
        yield server


@pytest.fixture
async def llm_small(small: Resources, llm_server: FakeLLMServer) -> AsyncIterator[Resources]:
    llm = ChatCompletionsClient(base_url=llm_server.base_url, model="fake", timeout=0.5,
                                max_retries=0)
    res = with_settings(small, session_summariser="llm", session_retry_seconds=0.01,
                        session_probe_seconds=0.05)
    yield dataclasses.replace(res, llm=llm)
    await llm.aclose()


async def events(client: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await get_json(
        client, f"/v1/sessions/{sid}/events?limit=500"))["items"]
    return list(reversed(items))  # oldest first


async def test_the_llm_summariser_folds_through_the_http_endpoint(
    llm_small: Resources, llm_server: FakeLLMServer, tenant: TenantKey,
) -> None:
    sid = new_id()
    async with make_client(llm_small, tenant.headers) as client:
        await say(client, sid, 6)
        llm_server.script(Reply("Dana flies to Lisbon on 12 March with 4200 euros."))
        outcome = await fold(llm_small, tenant, sid)
        context = await get_json(client, f"/v1/sessions/{sid}/context")

    assert outcome.folds == 1
    assert context["summary"] == "Dana flies to Lisbon on 12 March with 4200 euros."
    sent = llm_server.requests[-1].messages
    assert "(none yet)" in sent[1]["content"]
    assert "user: Dana's flight to Lisbon is on 12 March. (turn 1)" in sent[1]["content"]
    assert "turn 5" not in sent[1]["content"]


@pytest.mark.parametrize("failure", [EchoAuthorization(400), Garbage(
    b"<html>proxy error: upstream sk-operator-SECRET-123 rejected</html>")])
async def test_the_llm_endpoints_answer_never_reaches_the_tenant(
    small: Resources, llm_server: FakeLLMServer, tenant: TenantKey,
    caplog: pytest.LogCaptureFixture, failure: EchoAuthorization | Garbage,
) -> None:
    # Found by an exploratory probe: a provider's 400 that echoed the request's
    # Authorization put the operator's LLM key in the tenant's session events, health
    # and context (the payload an agent pastes into its prompt).
    secret = "sk-operator-SECRET-123"
    llm = ChatCompletionsClient(base_url=llm_server.base_url, model="fake", timeout=0.5,
                                max_retries=0, api_key=secret)
    res = dataclasses.replace(with_settings(small, session_summariser="llm"), llm=llm)
    sid = new_id()
    try:
        async with make_client(res, tenant.headers) as client:
            await say(client, sid, 7)
            llm_server.script(failure)
            with caplog.at_level("DEBUG", logger="engram.llm"):
                outcome = await fold(res, tenant, sid)
            session = await get_json(client, f"/v1/sessions/{sid}")
            context = await get_json(client, f"/v1/sessions/{sid}/context")
            logged = await events(client, sid)
    finally:
        await llm.aclose()

    assert outcome.folds == 0
    said = repr((session, context, logged))
    assert session["health"]["last_error"].startswith(
        "llm_http_error" if isinstance(failure, EchoAuthorization) else "llm_bad_response")
    assert secret not in said
    assert "Invalid request" not in said
    assert "proxy error" not in said
    # The operator's log keeps what the endpoint said, without the key: at WARNING the
    # failure (and an error code, had it one), the answer itself only at DEBUG (it may
    # hold users' text, in its body or in its error's message).
    [warning] = [r.getMessage() for r in caplog.records
                 if r.name == "engram.llm" and r.levelname == "WARNING"
                 and "the LLM answered" in r.getMessage()]
    [debug] = [r.getMessage() for r in caplog.records
               if r.name == "engram.llm" and r.levelname == "DEBUG"
               and "answer began" in r.getMessage()]
    assert ("Invalid request" in debug) or ("proxy error" in debug)
    assert warning == ("the LLM answered HTTP 400" if isinstance(failure, EchoAuthorization)
                       else "the LLM answered a body that is not JSON")
    for line in (warning, debug):
        assert secret not in line
    assert "[the API key]" in debug


async def test_health_walks_retry_degraded_recovering_healthy_and_says_so(
    llm_small: Resources, llm_server: FakeLLMServer, tenant: TenantKey,
) -> None:
    sid = new_id()
    async with make_client(llm_small, tenant.headers) as client:
        await say(client, sid, 7)

        llm_server.script(Fail(500))
        first = await fold(llm_small, tenant, sid)
        session = await get_json(client, f"/v1/sessions/{sid}")
        assert (first.folds, first.retry_after) == (0, timedelta(seconds=0.01))
        assert session["health"]["state"] == "retry"
        assert session["health"]["consecutive_failures"] == 1
        assert "llm_http_error" in session["health"]["last_error"]
        assert session["cursor"] == 0
        # Still summarising: the context is the (empty) summary and the turns.
        assert (await get_json(client, f"/v1/sessions/{sid}/context"))["mode"] == \
            "rolling_summary"

        llm_server.script(Hang(2.0))  # past the client's 0.5 s timeout
        second = await fold(llm_small, tenant, sid)
        session = await get_json(client, f"/v1/sessions/{sid}")
        assert second.retry_after == timedelta(seconds=0.05)  # the probe interval
        assert session["health"]["state"] == "degraded"
        assert "llm_timeout" in session["health"]["last_error"]
        context = await get_json(client, f"/v1/sessions/{sid}/context")
        assert (context["strategy"], context["mode"]) == ("rolling_summary", "truncation")
        assert context["summary"] is None
        assert [t["seq"] for t in context["turns"]] == list(range(1, 8))
        assert context["health"]["state"] == "degraded"

        llm_server.script(Garbage())
        await fold(llm_small, tenant, sid)
        session = await get_json(client, f"/v1/sessions/{sid}")
        assert session["health"]["state"] == "degraded"
        assert session["health"]["consecutive_failures"] == 3
        assert "llm_bad_response" in session["health"]["last_error"]

        # Back: the first success starts recovering, the second (next fold) heals.
        await say(client, sid, 4, start=7)  # 11 unsummarised: two folds due
        llm_server.script(Deterministic(), Deterministic())
        healed = await fold(llm_small, tenant, sid)
        session = await get_json(client, f"/v1/sessions/{sid}")
        context = await get_json(client, f"/v1/sessions/{sid}/context")
        log = await events(client, sid)

    assert healed.folds == 2
    assert session["health"]["state"] == "healthy"
    assert session["cursor"] == 8
    assert context["mode"] == "rolling_summary"
    assert "Eva joins" in context["summary"]
    # The rolling part: the second fold was given the first fold's summary.
    previous = llm_server.requests[-1].messages[1]["content"].split("\n\n")[0]
    assert "Lisbon" in previous
    assert "Eva joins" not in previous
    changes = [(e["detail"]["from"], e["detail"]["to"]) for e in log
               if e["kind"] == "health_changed"]
    assert changes == [("healthy", "retry"), ("retry", "degraded"),
                       ("degraded", "recovering"), ("recovering", "healthy")]
    assert log[0]["detail"]["error"] == "llm_http_error"
    assert log[1]["detail"]["error"] == "llm_timeout"


async def test_a_failure_while_recovering_degrades_again(
    llm_small: Resources, llm_server: FakeLLMServer, tenant: TenantKey,
) -> None:
    sid = new_id()
    async with make_client(llm_small, tenant.headers) as client:
        await say(client, sid, 11)  # two folds due
        llm_server.script(Fail(500), Fail(503))
        await fold(llm_small, tenant, sid)
        await fold(llm_small, tenant, sid)
        llm_server.script(Deterministic(), Fail(500))
        outcome = await fold(llm_small, tenant, sid)
        session = await get_json(client, f"/v1/sessions/{sid}")

    assert outcome.folds == 1
    assert session["health"]["state"] == "degraded"
    assert session["cursor"] == 4


@pytest.mark.parametrize(("asked", "waits"), [(60, 60), (0.001, 0.01), (86400, 3600)])
async def test_a_rate_limited_llm_is_asked_again_no_sooner_than_it_said(
    llm_small: Resources, llm_server: FakeLLMServer, tenant: TenantKey,
    asked: float, waits: float,
) -> None:
    """Found by a sessions probe: on a 429 with Retry-After: 60 the next fold came on the
    health policy's schedule (0.5 s, 1 s, ...). Shorter than the policy's delay, the
    policy's stands; a day is taken as an hour."""
    sid = new_id()
    llm_server.default = Fail(429, retry_after=asked)
    async with make_client(llm_small, tenant.headers) as client:
        await say(client, sid, 6)
    outcome = await fold(llm_small, tenant, sid)

    assert outcome.folds == 0
    assert outcome.retry_after == timedelta(seconds=waits)


async def test_a_full_backlog_drops_the_oldest_fold_and_records_it(
    llm_small: Resources, llm_server: FakeLLMServer, tenant: TenantKey,
) -> None:
    sid = new_id()
    llm_server.default = Fail(500)
    async with make_client(llm_small, tenant.headers) as client:
        await say(client, sid, 7)
        await fold(llm_small, tenant, sid)
        await fold(llm_small, tenant, sid)  # degraded
        # Up to backlog_max (2) folds wait: 10 unsummarised turns.
        await say(client, sid, 3, start=7)
        assert (await get_json(client, f"/v1/sessions/{sid}"))["backlog"]["due"] == 2
        # The third due fold pushes the oldest out: turns 1-4 leave unsummarised.
        await say(client, sid, 4, start=10)
        session = await get_json(client, f"/v1/sessions/{sid}")
        context = await get_json(client, f"/v1/sessions/{sid}/context")
        dropped = [e for e in await events(client, sid) if e["kind"] == "backlog_overflow"]

        assert session["cursor"] == 4
        assert session["counts"] == {"turns": 14, "unsummarised": 10, "summarised": 0,
                                     "dropped": 4}
        assert session["backlog"] == {"due": 2, "max": 2}
        assert [(e["detail"]["first_turn"], e["detail"]["last_turn"]) for e in dropped] == \
            [(1, 4)]
        assert dropped[0]["detail"]["health"] == "degraded"
        # Truncation while degraded shows the log's newest turns, dropped ones included.
        assert context["mode"] == "truncation"
        assert (context["omitted_turns"], len(context["turns"])) == (0, 14)

        llm_server.default = Deterministic()
        healed = await fold(llm_small, tenant, sid)
        context = await get_json(client, f"/v1/sessions/{sid}/context")
        session = await get_json(client, f"/v1/sessions/{sid}")

    assert healed.folds == 2
    assert session["health"]["state"] == "healthy"
    assert session["counts"] == {"turns": 14, "unsummarised": 2, "summarised": 8,
                                 "dropped": 4}
    # The dropped turns were never sent to the summariser: its two folds got 5-8, 9-12.
    sent = [r.messages[1]["content"].split("oldest first:\n\n")[1]
            for r in llm_server.requests[-2:]]
    assert [[n for n in range(1, 15) if f"(turn {n})" in body] for body in sent] == \
        [[5, 6, 7, 8], [9, 10, 11, 12]]
    assert "(turn 9)" in context["summary"]


class Refusing:
    """A summariser that is down."""

    name = "refusing"

    async def fold(self, summary: str | None, turns: Sequence[TurnView], max_chars: int) -> str:
        raise SummaryFailed("llm_http_error", "the LLM answered 500")


async def test_a_fold_whose_turns_were_dropped_meanwhile_is_discarded(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    sid = new_id()
    await say(small_client, sid, 6)
    for _ in range(2):  # degraded: from now on the backlog is bounded
        await folder_with(small, tenant, sid, Refusing()).run()
    assert (await get_json(small_client, f"/v1/sessions/{sid}"))["health"]["state"] == \
        "degraded"
    gated = GatedSummariser()
    folder = folder_with(small, tenant, sid, gated)
    running = asyncio.create_task(folder.run())
    await asyncio.wait_for(gated.started.wait(), 5)
    # Meanwhile the backlog overflows: the fold of turns 1-4 in flight is dropped.
    await say(small_client, sid, 8, start=6)
    assert (await get_json(small_client, f"/v1/sessions/{sid}"))["cursor"] == 4
    folder.summariser = ExtractiveSummariser()
    gated.release.set()
    outcome = await asyncio.wait_for(running, 10)

    context = await get_json(small_client, f"/v1/sessions/{sid}/context")
    assert "stale" not in (context["summary"] or "")
    assert outcome.folds == 2  # turns 5-8 and 9-12, read again after the discard
    assert (await get_json(small_client, f"/v1/sessions/{sid}"))["cursor"] == 12


async def test_a_good_answer_whose_fold_was_dropped_meanwhile_still_counts_for_health(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    """Found by a sessions probe: under a steady stream of turns each overflow dropped
    the fold in flight, whose answer was thrown away and counted as nothing, so a
    degraded session never recovered while every answer of the LLM was good (18 of 20
    discarded, 124 of 128 turns dropped unsummarised)."""
    sid = new_id()
    await say(small_client, sid, 6)
    for _ in range(2):
        await folder_with(small, tenant, sid, Refusing()).run()
    gated = GatedSummariser()
    folder = folder_with(small, tenant, sid, gated)
    running = asyncio.create_task(folder.run())
    await asyncio.wait_for(gated.started.wait(), 5)
    await say(small_client, sid, 8, start=6)  # the fold in flight is dropped
    folder.summariser = Refusing()  # and the next one fails
    gated.release.set()
    outcome = await asyncio.wait_for(running, 10)

    assert (outcome.folds, outcome.retry_after is not None) == (0, True)
    changes = [(e["detail"]["from"], e["detail"]["to"]) for e in reversed(
        (await get_json(small_client, f"/v1/sessions/{sid}/events"))["items"])
        if e["kind"] == "health_changed"]
    assert changes[-2:] == [("degraded", "recovering"), ("recovering", "degraded")]
    assert "stale" not in ((await get_json(
        small_client, f"/v1/sessions/{sid}/context"))["summary"] or "")


class Verbose:
    """A summariser that answers at full length in Chinese (a token a character)."""

    name = "verbose"

    async def fold(self, summary: str | None, turns: Sequence[TurnView], max_chars: int) -> str:
        return "\n".join(["会议记录" * 10] * (max_chars // 40))


async def test_a_summary_in_a_script_of_a_token_a_character_leaves_room_for_turns(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    """Found by a sessions probe: a 3,500-character Chinese summary (within the default
    4,000 characters) was 3,500 tokens against the default 2,000-token budget, so the
    context held it and no recent turn."""
    sid = new_id()
    await say(small_client, sid, 6)
    verbose = Verbose()
    assert (await folder_with(small, tenant, sid, verbose).run()).folds == 1

    context = await get_json(small_client, f"/v1/sessions/{sid}/context")
    limit = small.settings.session_summary_max_chars // 4
    # Its newest whole lines (41 tokens each) that fit.
    assert limit - 41 < estimate_tokens(context["summary"]) <= limit
    assert [t["seq"] for t in context["turns"]] == [5, 6]
    assert context["tokens"] <= small.settings.session_budget_tokens


async def test_turns_in_another_script_folded_after_an_english_summary_stay_in_it(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    """Found by an exploratory probe: the summariser was asked for the characters the
    summary and the turns make on average, which for an English summary and Chinese turns
    was too many tokens, and the cut that followed lost the summary's end: the turns just
    folded, already past the cursor, were in neither the summary nor the recent turns."""
    sid = new_id()
    for i in range(60):
        await append(small_client, sid, f"Dana booked train {i} to Porto at 9:{i:02d} for "
                     f"the offsite and paid {i}0 euros for it. " * 2)
    assert (await fold(small, tenant, sid)).folds > 0
    english = (await get_json(small_client, f"/v1/sessions/{sid}/context"))["summary"]
    limit = small.settings.session_summary_max_chars // 4
    assert estimate_tokens(english) > limit // 2
    # Each line within a quarter of the summary's tokens, as one turn's line is held to.
    chinese = [f"第{n}次会议" + "预算四千二百欧元周三出发" * 20 for n in range(8)]
    for content in chinese:
        await append(small_client, sid, content)
    assert (await fold(small, tenant, sid)).folds > 0

    session = await get_json(small_client, f"/v1/sessions/{sid}")
    context = await get_json(small_client, f"/v1/sessions/{sid}/context")
    summary = context["summary"]
    assert estimate_tokens(summary) <= limit
    # Every turn past the cursor's last fold is in the summary or among the recent turns.
    folded = session["cursor"] - 60
    recent = {t["content"] for t in context["turns"]}
    assert folded >= 4
    assert chinese[folded - 1] in summary
    assert all(c in summary or c in recent for c in chinese[:folded][-2:])
    assert summary.split("\n")[-1] == f"- user: {chinese[folded - 1]}"


FACT_LINES = [f"- Fact {n:02d}: Dana booked room {n} at the Alfama hotel for 12 March."
              for n in range(50)]
SHANGHAI = "- 新\uff1a用户下周三去上海出差\uff0c需要浦东机场附近的酒店。"  # the probe's line


async def test_an_llm_answer_within_both_caps_is_saved_whole_after_chinese_turns(
    llm_small: Resources, llm_server: FakeLLMServer, tenant: TenantKey,
) -> None:
    """Found by an exploratory probe: an English summary, then Chinese turns: the fold
    asked for the characters the two make on average (2,837 in the probe) and cut the
    LLM's answer (3,167 characters, 811 tokens, under both caps) at its end to them, so
    the line of the turns just folded was lost, and they were in neither the summary nor
    the recent turns."""
    res = with_settings(llm_small, session_fold_threshold=4)
    english = "\n".join(FACT_LINES)
    answer = f"{english}\n{SHANGHAI}"
    assert len(answer) < 4000
    assert estimate_tokens(answer) < 1000
    chinese = ("用户下周三去上海出差\uff0c需要浦东机场附近的酒店。" * 11)[:250]
    sid = new_id()
    async with make_client(res, tenant.headers) as client:
        await append(client, sid, "Dana is planning the Lisbon offsite for 12 March.")
        await append(client, sid, "Noted: the Alfama hotel, 50 rooms.", role="assistant")
        await append(client, sid, chinese)
        await append(client, sid, chinese[::-1], role="assistant")
        llm_server.script(Reply(english))
        assert (await fold(res, tenant, sid)).folds == 1
        assert (await get_json(client, f"/v1/sessions/{sid}/context"))["summary"] == english
        await append(client, sid, "Dana also needs a hotel in Shanghai.")
        await append(client, sid, "I will look near Pudong airport.", role="assistant")
        llm_server.script(Reply(answer))
        assert (await fold(res, tenant, sid)).folds == 1
        session = await get_json(client, f"/v1/sessions/{sid}")
        context = await get_json(client, f"/v1/sessions/{sid}/context")

    assert session["cursor"] == 4
    assert context["summary"] == answer
    prompt = llm_server.requests[-1].messages[1]["content"]
    asked = int(prompt.split("at most ", 1)[1].split(" ", 1)[0])
    assert asked < len(answer)  # what the cut at the end had kept


async def test_an_llm_answer_whose_last_line_is_past_the_caps_fails_the_fold(
    llm_small: Resources, llm_server: FakeLLMServer, tenant: TenantKey,
) -> None:
    """Its last line holds the turns just folded: a cut of it lost some of them with the
    cursor past them. The fold fails instead, and its turns stay unsummarised."""
    sid = new_id()
    async with make_client(llm_small, tenant.headers) as client:
        await say(client, sid, 6)
        llm_server.script(Reply("Dana flies to Lisbon on 12 March. " * 150))
        outcome = await fold(llm_small, tenant, sid)
        session = await get_json(client, f"/v1/sessions/{sid}")
        context = await get_json(client, f"/v1/sessions/{sid}/context")

    assert (outcome.folds, outcome.retry_after is not None) == (0, True)
    assert (session["cursor"], session["health"]["state"]) == (0, "retry")
    assert session["health"]["last_error"].startswith("llm_answer_too_long: its last line "
                                                      "alone is 5099 characters")
    assert context["summary"] is None
    assert [t["seq"] for t in context["turns"]] == [1, 2, 3, 4, 5, 6]


async def test_a_burst_of_turns_is_folded_whole_while_the_summariser_is_healthy(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    """The backlog's bound is for a summariser that is down. Applied while it was healthy,
    a burst (a transcript imported) lost its oldest turns from the summary, and a steady
    stream moved the cursor under each fold in flight, which was then discarded: nothing
    was ever summarised."""
    sid = new_id()
    gated = GatedSummariser()
    folder = folder_with(small, tenant, sid, gated)
    await say(small_client, sid, 6)
    running = asyncio.create_task(folder.run())
    await asyncio.wait_for(gated.started.wait(), 5)
    await say(small_client, sid, 24, start=6)  # 7 folds due, against backlog_max 2
    session = await get_json(small_client, f"/v1/sessions/{sid}")
    assert (session["cursor"], session["counts"]["dropped"]) == (0, 0)
    folder.summariser = ExtractiveSummariser()
    gated.release.set()
    outcome = await asyncio.wait_for(running, 10)

    # The fold in flight was kept, and every due fold after it ran.
    assert outcome.folds == 7
    session = await get_json(small_client, f"/v1/sessions/{sid}")
    assert (session["cursor"], session["counts"]["dropped"]) == (28, 0)
    kinds = [e["kind"] for e in (await get_json(
        small_client, f"/v1/sessions/{sid}/events"))["items"]]
    assert "backlog_overflow" not in kinds


@pytest.mark.parametrize("delete", ["session", "user"])
async def test_a_fold_in_flight_when_the_session_is_deleted_and_begun_again_is_discarded(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey, delete: str,
) -> None:
    """The new session under the old id has the old one's cursor and strategy, so only
    its birth tells them apart: the old turns' summary went into it, and its own first
    turns were counted as summarised."""
    sid = new_id()
    gated = GatedSummariser()
    folder = folder_with(small, tenant, sid, gated)
    for n in range(6):
        await append(small_client, sid, f"alice's secret {n + 1}", user_id="alice")
    running = asyncio.create_task(folder.run())
    await asyncio.wait_for(gated.started.wait(), 5)
    target = f"/v1/sessions/{sid}" if delete == "session" else "/v1/sessions?user_id=alice"
    assert (await small_client.delete(target)).status_code in (200, 204)
    for n in range(6):
        await append(small_client, sid, f"bob's note {n + 1}", user_id="bob")
    folder.summariser = ExtractiveSummariser()
    gated.release.set()
    outcome = await asyncio.wait_for(running, 10)

    context = await get_json(small_client, f"/v1/sessions/{sid}/context")
    assert "stale" not in (context["summary"] or "")
    assert "alice" not in (context["summary"] or "")
    assert outcome.folds == 1  # bob's turns 1-4, read again after the discard
    session = await get_json(small_client, f"/v1/sessions/{sid}")
    assert (session["user_id"], session["cursor"]) == ("bob", 4)
    assert "bob's note 1" in (context["summary"] or "")


async def test_an_unexpected_summariser_error_changes_nothing_and_reaches_the_job(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    class Broken:
        name = "broken"

        async def fold(self, summary: str | None, turns: Sequence[TurnView],
                       max_chars: int) -> str:
            raise RuntimeError("a bug")

    sid = new_id()
    await say(small_client, sid, 6)
    folder = folder_with(small, tenant, sid, Broken())
    with pytest.raises(RuntimeError):
        await folder.run()
    session = await get_json(small_client, f"/v1/sessions/{sid}")
    assert (session["cursor"], session["health"]["state"]) == (0, "healthy")


async def test_a_queue_that_fails_never_fails_the_append(
    small_client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("queue down")

    monkeypatch.setattr(folder_module, "enqueue", broken)
    sid = new_id()
    await say(small_client, sid, 7)
    session = await get_json(small_client, f"/v1/sessions/{sid}")
    assert session["counts"]["turns"] == 7
    assert session["backlog"]["due"] == 1


async def queued_folds(resources: Resources, tenant: TenantKey, sid: str) -> int:
    async with resources.engine.connect() as conn:
        count = await conn.scalar(
            text("SELECT count(*) FROM pgqueuer.pgqueuer WHERE entrypoint = :job "
                 "AND dedupe_key = :key"),
            {"job": FOLD_JOB, "key": f"{FOLD_JOB}:{tenant.tenant_id}:{sid}"})
    return int(count or 0)


async def test_appends_past_the_threshold_queue_one_fold_job(
    small: Resources, small_client: httpx.AsyncClient, tenant: TenantKey,
) -> None:
    sid = new_id()
    await say(small_client, sid, 5)
    assert await queued_folds(small, tenant, sid) == 0
    await say(small_client, sid, 3, start=5)
    assert await queued_folds(small, tenant, sid) == 1


async def test_the_worker_folds_in_the_background_and_the_sweep_requeues(
    small: Resources, tenant: TenantKey,
) -> None:
    sid = new_id()
    async with make_client(small, tenant.headers) as client:
        await say(client, sid, 7)
        # The job is gone (as after its last try): only the sweep can queue it again.
        async with small.engine.begin() as conn:
            await conn.execute(text("DELETE FROM pgqueuer.pgqueuer WHERE dedupe_key = :key"),
                               {"key": f"{FOLD_JOB}:{tenant.tenant_id}:{sid}"})
        assert await requeue_stalled_folds(small) >= 1
        assert await queued_folds(small, tenant, sid) == 1

        worker = Worker(small, default_registry(), poll_interval=timedelta(seconds=1))
        await worker.start()
        try:
            for _ in range(100):
                session = await get_json(client, f"/v1/sessions/{sid}")
                if session["cursor"]:
                    break
                await asyncio.sleep(0.1)
        finally:
            await worker.stop()
    assert session["cursor"] == 4
    assert session["health"]["state"] == "healthy"


async def test_folds_and_events_are_counted_in_the_metrics(
    llm_small: Resources, llm_server: FakeLLMServer, tenant: TenantKey,
) -> None:
    before = (sample("engram_session_folds_total", outcome="saved"),
              sample("engram_session_folds_total", outcome="failed"),
              sample("engram_session_events_total", kind="health_changed"))
    sid = new_id()
    async with make_client(llm_small, tenant.headers) as client:
        await say(client, sid, 7)
        llm_server.script(Fail(500))
        await fold(llm_small, tenant, sid)  # failed: healthy -> retry
        await fold(llm_small, tenant, sid)  # saved: retry -> healthy
        exposed = (await client.get("/metrics")).text

    after = (sample("engram_session_folds_total", outcome="saved"),
             sample("engram_session_folds_total", outcome="failed"),
             sample("engram_session_events_total", kind="health_changed"))
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 2]
    assert 'engram_session_folds_total{outcome="saved"}' in exposed
