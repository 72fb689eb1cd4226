"""A summary lives where its sources lived: a run folds each scope (user, agent, session,
namespace) apart, so what it archives stays findable, as the summary, in every search
and listing that found it before."""

from __future__ import annotations

from typing import Any

import httpx

from tests.integration.consolidation.conftest import consolidate, get_memory, memory, seed


async def listed(client: httpx.AsyncClient, **params: Any) -> list[dict[str, Any]]:
    resp = await client.get("/v1/memories", params={"limit": 500, **params})
    assert resp.status_code == 200, resp.text
    items: list[dict[str, Any]] = resp.json()["items"]
    return items


async def searched(client: httpx.AsyncClient, query: str, **scope: Any) -> list[str]:
    resp = await client.post("/v1/search", json={"query": query, "top_k": 20, **scope})
    assert resp.status_code == 200, resp.text
    return [r["memory"]["id"] for r in resp.json()["results"]]


async def test_a_users_run_folds_each_namespace_apart(client: httpx.AsyncClient) -> None:
    where = {"user_id": "nsu", "agent_id": "bot"}
    work = await seed(client, [
        memory(f"Work fact {i}: the deploy window is Tuesday at {i} pm", i,
               namespace="work", **where) for i in range(3)])
    home = await seed(client, [
        memory(f"Home fact {i}: the cat Miso eats at {i} pm", 10 + i,
               namespace="home", **where) for i in range(3)])
    work_scope = {**where, "session_id": None, "namespace": "work"}
    home_scope = {**where, "session_id": None, "namespace": "home"}

    result = await consolidate(client, user_id="nsu", mode="archive")

    assert [g["scope"] for g in result["groups"]] == [home_scope, work_scope]
    for group, ids, scope, word in zip(result["groups"], (home, work),
                                       (home_scope, work_scope), ("Home", "Work"), strict=True):
        assert {group["kept_id"], *group["removed_ids"]} == set(ids)
        summary = await get_memory(client, group["summary_id"])
        assert {k: summary[k] for k in scope} == scope
        assert summary["content"].count(word) == 2
        assert summary["content"].count("fact") == 2
        # The namespace's listing and search now find its kept fact and its summary.
        in_scope = await listed(client, user_id="nsu", namespace=scope["namespace"])
        assert {m["id"] for m in in_scope} == {group["kept_id"], group["summary_id"]}
        found = await searched(client, "what time", user_id="nsu", agent_id="bot",
                               namespace=scope["namespace"])
        assert group["summary_id"] in found
        assert set(found) <= {group["kept_id"], group["summary_id"]}


async def test_a_category_run_never_folds_two_users_together(
    client: httpx.AsyncClient,
) -> None:
    dave = await seed(client, [memory(f"Dave secret {i}", i, category="mix", user_id="dave")
                               for i in range(3)])
    erin = await seed(client, [memory(f"Erin secret {i}", 10 + i, category="mix",
                                      user_id="erin") for i in range(3)])
    # A user with too few of them keeps all, however many the category holds in all.
    lone = await seed(client, [memory(f"Finn secret {i}", 20 + i, category="mix",
                                      user_id="finn") for i in range(2)])

    result = await consolidate(client, categories=["mix"], mode="archive")

    assert [g["scope"]["user_id"] for g in result["groups"]] == ["dave", "erin"]
    for group, ids, name in zip(result["groups"], (dave, erin), ("Dave", "Erin"), strict=True):
        assert {group["kept_id"], *group["removed_ids"]} == set(ids)
        summary = await get_memory(client, group["summary_id"])
        assert summary["user_id"] == name.lower()
        assert summary["content"].count(name) == 2
        assert summary["content"].count("secret") == 2
        found = await searched(client, f"{name} secret", user_id=name.lower())
        assert group["summary_id"] in found
    for memory_id in lone:
        assert (await get_memory(client, memory_id))["archived_at"] is None
    assert {m["id"] for m in await listed(client, user_id="finn")} == set(lone)
