"""Faults: a database error inside a group's transaction, LLM failures, a prompt cap."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from app.providers.llm import ChatCompletionsClient
from app.resources import Resources
from tests.conftest import TenantKey, failing_trigger, make_client
from tests.fakes.llm_server import Behaviour, Fail, FakeLLMServer, Garbage, Hang, Reply
from tests.integration.consolidation.conftest import (
    consolidate,
    get_memory,
    llm_resources_for,
    memory,
    seed,
    summaries,
)


@pytest.fixture
async def archive_breaker(resources: Resources, tenant: TenantKey) -> AsyncIterator[None]:
    """A trigger that fails any archiving UPDATE of this tenant's memories: the error
    strikes after the group's summary insert and before its sources are archived."""
    async with failing_trigger(
            resources, f"break_archive_{tenant.tenant_id.hex}", "BEFORE UPDATE OF archived_at",
            "OLD.archived_at IS NULL AND NEW.archived_at IS NOT NULL "
            f"AND NEW.tenant_id = '{tenant.tenant_id}'",
            "RAISE EXCEPTION 'injected failure while archiving'"):
        yield


@pytest.mark.usefixtures("archive_breaker")
async def test_a_database_error_before_the_archive_leaves_the_group_as_it_was(
    client: httpx.AsyncClient,
) -> None:
    ids = await seed(client, [memory(f"note {i}", i, category=c)
                              for i, c in enumerate("aaabbb")])

    result = await consolidate(client, user_id="u1")

    assert result["status"] == "failed"
    assert result["error"] == "2 of 2 groups failed; each was left exactly as it was"
    assert [(g["outcome"], g["error"], g["summary_id"]) for g in result["groups"]] == [
        ("failed", "write_failed", None), ("failed", "write_failed", None)]
    assert "injected failure" in result["groups"][0]["detail"]
    assert (result["consolidated"], result["created"], result["deleted"]) == (0, 0, 0)
    assert result["progress"] == {"groups_done": 2, "groups_total": 2}
    for memory_id in ids:
        found = await get_memory(client, memory_id)
        assert (found["archived_at"], found["consolidation_id"]) == (None, None)
    assert await summaries(client, include_archived="true") == []


async def run_with_llm_behaviour(resources: Resources, tenant: TenantKey,
                                 server: FakeLLMServer, behaviour: Behaviour) -> dict[str, object]:
    server.script(behaviour)
    # Short only where the timeout is what is tested: a loaded machine (the full suite
    # beside other work) took the 0.3 s to answer a garbage body, which then read as a
    # timeout.
    res = llm_resources_for(resources, server,
                            timeout=0.3 if isinstance(behaviour, Hang) else 10.0)
    try:
        async with make_client(res, tenant.headers) as client:
            ids = await seed(client, [memory(f"note {i}", i) for i in range(4)])
            result = await consolidate(client, user_id="u1", strategy="llm")
            (written,) = await summaries(client, user_id="u1")
    finally:
        assert isinstance(res.llm, ChatCompletionsClient)
        await res.llm.aclose()
    (group,) = result["groups"]  # type: ignore[misc]
    assert group["removed_ids"] == ids[:3]
    assert written["content"] == "- note 0\n- note 1\n- note 2"
    return dict(group)


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [(Fail(500), "llm_http_error"), (Hang(3.0), "llm_timeout"), (Reply(""), "llm_empty_answer"),
     (Reply("  \n "), "llm_empty_answer"),
     (Garbage(b'{"choices": []}', (("Content-Encoding", "gzip"),)), "llm_bad_response"),
     (Garbage("[" * 200_000 + "]" * 200_000), "llm_bad_response")],
    ids=["http-500", "timeout", "empty", "blank", "undecodable", "nested-too-deep"],
)
async def test_llm_failures_fall_back_to_concatenation(
    resources: Resources, tenant: TenantKey, llm_server: FakeLLMServer,
    behaviour: Behaviour, reason: str,
) -> None:
    group = await run_with_llm_behaviour(resources, tenant, llm_server, behaviour)

    assert (group["mode"], group["detail"], group["outcome"]) == (
        "fallback:concatenate", reason, "written")


async def test_an_llm_answer_past_the_limit_archives_nothing_it_lost(
    llm_client: httpx.AsyncClient, llm_server: FakeLLMServer,
) -> None:
    """Found by an exploratory probe: an answer past `max_chars` was cut and every source
    archived, so the fact past the cut (a passport number) was found by no search."""
    ids = await seed(llm_client, [
        memory("Alice's passport number is 98765.", 0),
        memory("Alice likes green tea.", 1),
        memory("Alice lives in Paris.", 2),
        memory("Alice met Bob in Lyon.", 3, importance=0.9),
    ])
    llm_server.script(Reply("Alice discussed many things. " * 40
                            + "Alice's passport number is 98765."))

    run = await consolidate(llm_client, user_id="u1", op={"name": "llm_synthesis",
                                                          "max_chars": 1000})

    [group] = run["groups"]
    assert "Answer in at most 1000 characters." in \
        llm_server.requests[0].messages[1]["content"]
    assert (group["mode"], group["outcome"]) == ("fallback:concatenate", "written")
    assert group["detail"].startswith("llm_answer_too_long: ")
    assert group["removed_ids"] == ids[:3]
    [summary] = await summaries(llm_client, user_id="u1")
    assert "98765" in summary["content"]
    found = await llm_client.post("/v1/search", json={"query": "Alice passport number",
                                                      "user_id": "u1"})
    assert found.status_code == 200, found.text
    # The only active memory holding it (the kept one is about Bob).
    assert summary["id"] in [r["memory"]["id"] for r in found.json()["results"]]


async def test_a_prompt_cap_folds_only_what_fit_and_the_next_run_takes_the_rest(
    llm_client: httpx.AsyncClient, llm_server: FakeLLMServer,
) -> None:
    # Each entry is a 200-character bullet; a 1000-character prompt cap leaves room for
    # three after the system prompt and header.
    ids = await seed(llm_client, [memory(f"{i}" * 198, i) for i in range(7)])
    op = {"name": "llm_synthesis", "max_prompt_chars": 1000}

    first = await consolidate(llm_client, user_id="u1", op=op)

    (group,) = first["groups"]
    assert group["kept_id"] == ids[6]
    assert group["removed_ids"] == ids[:3]
    assert [m["summary_of"] for m in await summaries(llm_client, user_id="u1")] == [ids[:3]]
    for left in ids[3:6]:
        assert (await get_memory(llm_client, left))["archived_at"] is None

    second = await consolidate(llm_client, user_id="u1", op=op)

    assert second["groups"][0]["removed_ids"] == ids[3:6]
    assert second["groups"][0]["kept_id"] == ids[6]
    assert len(llm_server.requests) == 2
