"""A session as an agent uses it, with the real local all-MiniLM-L6-v2 model: the context
warns that a fold is near, the agent stores the critical fact as a memory of the session,
the fold summarises the turns, and a question worded differently from the fact finds it
through search in the session's scope (and not in another session's), also after the
session itself is deleted. Sessions embed nothing; the memories they lead to are."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.resources import Resources
from tests.conftest import TenantKey, local_model, make_client
from tests.integration.sessions.conftest import (
    SMALL,
    append,
    fold,
    get_json,
    new_id,
    with_settings,
)

pytestmark = pytest.mark.model

# Threshold 6, recent 2 (SMALL): the warning comes with turn 4, the fold is due at turn 6.
TURNS = [
    ("user", "I'm planning a trip to Lisbon in March with my sister."),
    ("assistant", "Lovely. What should I keep in mind when picking restaurants?"),
    ("user", "I'm severely allergic to peanuts, so please check every menu."),
    ("assistant", "Understood, I'll only suggest places that can guarantee no peanuts."),
    ("user", "We'd also like a hotel in the Alfama district."),
    ("assistant", "I'll look for hotels in Alfama."),
]
CRITICAL = "Dana is severely allergic to peanuts"
OTHER_FACTS = ["Dana wants a hotel in the Alfama district of Lisbon",
               "Dana's sister Eva is travelling with her in March"]


@pytest.fixture(scope="module")
async def model_resources(resources: Resources) -> AsyncIterator[Resources]:
    async with local_model(resources) as model:
        yield with_settings(model, **SMALL)


@pytest.fixture
async def model_client(model_resources: Resources,
                       tenant: TenantKey) -> AsyncIterator[httpx.AsyncClient]:
    async with make_client(model_resources, tenant.headers) as c:
        yield c


async def remember(client: httpx.AsyncClient, content: str, session_id: str) -> str:
    resp = await client.post("/v1/memories", json={
        "content": content, "user_id": "dana", "session_id": session_id, "importance": 0.9})
    assert resp.status_code == 201, resp.text
    memory_id: str = resp.json()["id"]
    return memory_id


async def search(client: httpx.AsyncClient, query: str, **scope: Any) -> list[dict[str, Any]]:
    resp = await client.post("/v1/search", json={"query": query, "explain": True, **scope})
    assert resp.status_code == 200, resp.text
    results: list[dict[str, Any]] = resp.json()["results"]
    return results


def contents(results: list[dict[str, Any]]) -> list[str]:
    return [r["memory"]["content"] for r in results]


async def test_the_fact_a_fold_warning_asked_for_is_found_by_a_paraphrase(
        model_resources: Resources, tenant: TenantKey,
        model_client: httpx.AsyncClient) -> None:
    sid, other = new_id(), new_id()
    answers = [await append(model_client, sid, content, role=role, user_id="dana")
               for role, content in TURNS[:4]]
    assert [a["warning"] is not None for a in answers] == [False, False, False, True]
    assert "POST /v1/memories" in answers[-1]["warning"]

    # The agent heeds it: the fact goes to memory, in the session's scope.
    await remember(model_client, CRITICAL, sid)
    for content in OTHER_FACTS:
        await remember(model_client, content, sid)
    await remember(model_client, "Dana is allergic to cats", other)

    for role, content in TURNS[4:]:
        await append(model_client, sid, content, role=role, user_id="dana")
    assert (await fold(model_resources, tenant, sid)).folds == 1
    context = await get_json(model_client, f"/v1/sessions/{sid}/context")
    assert context["mode"] == "rolling_summary"
    assert "allergic to peanuts" in context["summary"]
    assert [t["seq"] for t in context["turns"]] == [5, 6]

    # Worded differently from the fact ("food allergies", not "allergic to peanuts").
    question = "Does Dana have any food allergies?"
    found = await search(model_client, question, session_id=sid)
    assert contents(found)[0] == CRITICAL
    # Ranked first by the model: the fact's only shared word with the question is a name.
    assert found[0]["explanation"]["fusion"]["vector_rank"] == 1
    assert found[0]["explanation"]["fusion"]["vector_similarity"] > 0.6
    assert all(r["explanation"]["fusion"]["vector_similarity"] < 0.4 for r in found[1:])
    assert "Dana is allergic to cats" not in contents(found)
    assert CRITICAL not in contents(await search(model_client, question, session_id=other))

    # Deleting the session leaves the memories it led to.
    assert (await model_client.delete(f"/v1/sessions/{sid}")).status_code == 204
    assert contents(await search(model_client, question, session_id=sid))[0] == CRITICAL
