"""Golden runs over HTTP: fixed memories in, exact groups, summaries and removed ids out,
for each named strategy (the LLM is a deterministic fake server on 127.0.0.1)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.fakes.llm_server import FakeLLMServer
from tests.integration.consolidation.conftest import (
    consolidate,
    get_memory,
    memory,
    seed,
    summaries,
)


async def seed_golden(client: httpx.AsyncClient) -> dict[str, str]:
    names = ["w1", "w2", "w3", "w4", "f1", "f2", "t1", "t2", "t3", "other"]
    items = [
        memory("Ships the parser on Friday.", 0, category="work", importance=0.9),
        memory("Standup moved to 9:30.", 1, category="work", importance=0.2),
        memory("Alice owns the billing service.", 2, category="work", importance=0.5),
        memory("Sprint review is on 2026-02-03.", 3, category="work", importance=0.5),
        memory("Likes ramen.", 4, category="food"),
        memory("Dislikes olives.", 5, category="food"),
        memory("went somewhere nice once", 6, category="travel"),
        memory("enjoys long train rides", 7, category="travel"),
        memory("prefers a window seat", 8, category="travel"),
        memory("Another user's note.", 9, category="work", user_id="u2"),
    ]
    return dict(zip(names, await seed(client, items), strict=True))


def group_view(result: dict[str, Any], ids: dict[str, str]) -> list[tuple[Any, ...]]:
    name = {v: k for k, v in ids.items()}
    return [(g["category"], name[g["kept_id"]], [name[i] for i in g["removed_ids"]],
             g["mode"], g["outcome"]) for g in result["groups"]]


async def assert_folded(client: httpx.AsyncClient, result: dict[str, Any],
                        ids: dict[str, str], expected_texts: dict[str, str]) -> None:
    written = {s["category"]: s for s in await summaries(client, user_id="u1")}
    assert {c: s["content"] for c, s in written.items()} == expected_texts
    for group in result["groups"]:
        summary = written[group["category"]]
        assert summary["id"] == group["summary_id"]
        assert summary["summary_of"] == group["removed_ids"]
        assert summary["source"] == "summary"
        assert summary["fact_role"] == "summary"
        assert summary["importance"] == 0.7
        assert summary["user_id"] == "u1"
        assert summary["consolidation_id"] == result["id"]
        for removed in group["removed_ids"]:
            assert (await get_memory(client, removed))["archived_at"] is not None
        assert (await get_memory(client, group["kept_id"]))["archived_at"] is None
    for untouched in ("f1", "f2", "other"):
        assert (await get_memory(client, ids[untouched]))["archived_at"] is None


async def test_simple_strategy_golden(client: httpx.AsyncClient) -> None:
    ids = await seed_golden(client)

    result = await consolidate(client, user_id="u1", strategy="simple")

    assert result["status"] == "succeeded"
    assert group_view(result, ids) == [
        ("travel", "t3", ["t1", "t2"], "concatenate", "written"),
        ("work", "w1", ["w2", "w3", "w4"], "concatenate", "written"),
    ]
    assert (result["consolidated"], result["created"], result["deleted"]) == (5, 2, 5)
    # f1 and f2 are the only two "food" memories, below the threshold of 3: no candidates.
    assert result["candidates"] == 7
    assert result["remainder"] == 0
    assert result["progress"] == {"groups_done": 2, "groups_total": 2}
    assert result["request"]["strategy"] == "simple"
    assert result["request"]["async"] is False
    assert result["composition"]["op"]["name"] == "concatenate"
    await assert_folded(client, result, ids, {
        "travel": "- went somewhere nice once\n- enjoys long train rides",
        "work": "- Standup moved to 9:30.\n- Alice owns the billing service.\n"
                "- Sprint review is on 2026-02-03.",
    })


async def test_llm_strategy_golden(llm_client: httpx.AsyncClient,
                                   llm_server: FakeLLMServer) -> None:
    ids = await seed_golden(llm_client)

    result = await consolidate(llm_client, user_id="u1", strategy="llm")

    assert group_view(result, ids) == [
        ("travel", "t3", ["t1", "t2"], "llm_synthesis", "written"),
        ("work", "w1", ["w2", "w3", "w4"], "llm_synthesis", "written"),
    ]
    assert len(llm_server.requests) == 2
    await assert_folded(llm_client, result, ids, {
        "travel": "Summary: went somewhere nice once enjoys long train rides",
        "work": "Summary: Standup moved to 9:30. Alice owns the billing service. "
                "Sprint review is on 2026-02-03.",
    })


async def test_dual_mode_strategy_golden(llm_client: httpx.AsyncClient,
                                         llm_server: FakeLLMServer) -> None:
    ids = await seed_golden(llm_client)

    result = await consolidate(llm_client, user_id="u1", strategy="dual_mode")

    # work is fact-dense (times, names, dates): extractive, no LLM call; travel is
    # sparse: one abstractive call per entry.
    assert group_view(result, ids) == [
        ("travel", "t3", ["t1", "t2"], "sparse:abstractive", "written"),
        ("work", "w1", ["w2", "w3", "w4"], "dense:extractive", "written"),
    ]
    assert len(llm_server.requests) == 2
    await assert_folded(llm_client, result, ids, {
        "travel": "- Summary: went somewhere nice once\n- Summary: enjoys long train rides",
        "work": "- Standup moved to 9:30.\n- Alice owns the billing service.\n"
                "- Sprint review is on 2026-02-03.",
    })
