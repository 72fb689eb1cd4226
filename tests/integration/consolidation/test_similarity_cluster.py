"""The `similarity_cluster` selector over HTTP, on the embeddings the real local model
stored: near-duplicates grouped, within `max_distance` of the kept memory and within its
category, then folded by an archive run."""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from app.consolidation import repository
from app.consolidation.schemas import ConsolidationRequest
from app.consolidation.types import Partitioning
from app.models import Memory
from app.resources import Resources
from tests.conftest import TenantKey, create_tenant_key, local_model, make_client
from tests.integration.consolidation.conftest import consolidate, get_memory, memory, seed

pytestmark = pytest.mark.model

# Cosine distances from "Alice likes ramen." with all-MiniLM-L6-v2: "really likes" 0.022,
# "loves" 0.027, "a bowl of" 0.142, "dislikes olives" 0.50.
FACTS = {
    "kept": memory("Alice likes ramen.", 0, category="food", importance=0.9),
    "really": memory("Alice really likes ramen.", 1, category="food"),
    "loves": memory("Alice loves ramen.", 2, category="food"),
    "bowl": memory("Alice enjoys a bowl of ramen.", 3, category="food"),
    "olives": memory("Alice dislikes olives.", 4, category="food"),
    "elsewhere": memory("Alice likes ramen a lot.", 5, category="notes"),
}


@pytest.fixture(scope="module")
async def model_resources(resources: Resources) -> AsyncIterator[Resources]:
    async with local_model(resources, batch_size=16) as model:
        yield model


@pytest.fixture
async def client(model_resources: Resources) -> AsyncIterator[httpx.AsyncClient]:
    tenant = await create_tenant_key(model_resources)
    async with make_client(model_resources, tenant.headers) as c:
        yield c


def selector(max_distance: float) -> dict[str, object]:
    return {"name": "similarity_cluster", "max_distance": max_distance}


async def test_near_duplicates_are_grouped_within_the_distance_and_the_category(
    client: httpx.AsyncClient,
) -> None:
    ids = dict(zip(FACTS, await seed(client, list(FACTS.values())), strict=True))
    name = {v: k for k, v in ids.items()}

    planned = await consolidate(client, user_id="u1", dry_run=True, group_threshold=2,
                                selector=selector(0.1))

    assert planned["status"] == "planned", planned["error"]
    assert [(g["category"], name[g["kept_id"]], [name[i] for i in g["removed_ids"]])
            for g in planned["groups"]] == [("food", "kept", ["really", "loves"])]

    folded = await consolidate(client, user_id="u1", group_threshold=2,
                               selector=selector(0.15))

    assert folded["status"] == "succeeded", folded["error"]
    (group,) = folded["groups"]
    assert (name[group["kept_id"]], [name[i] for i in group["removed_ids"]]) == (
        "kept", ["really", "loves", "bowl"])
    for removed in ("really", "loves", "bowl"):
        assert (await get_memory(client, ids[removed]))["archived_at"] is not None
    for untouched in ("kept", "olives", "elsewhere"):
        assert (await get_memory(client, ids[untouched]))["archived_at"] is None
    summary = await get_memory(client, group["summary_id"])
    assert summary["summary_of"] == group["removed_ids"]


async def test_near_duplicates_of_one_document_fold_into_a_summary_found_by_its_metadata(
    client: httpx.AsyncClient,
) -> None:
    """The same near-duplicates, half of them from another document: a run over one
    document's memories groups only its own, and the real model's search, filtered by that
    document, then finds the summary in their place."""
    docs = {"kept": "d1", "really": "d1", "loves": "d2", "bowl": "d1", "olives": "d1",
            "elsewhere": "d1"}
    ids = dict(zip(FACTS, await seed(client, [
        {**item, "metadata": {"doc": docs[key]}} for key, item in FACTS.items()]),
        strict=True))
    name = {v: k for k, v in ids.items()}

    folded = await consolidate(client, metadata={"doc": "d1"}, group_threshold=2,
                               selector=selector(0.15))

    assert folded["status"] == "succeeded", folded["error"]
    (group,) = folded["groups"]
    assert (name[group["kept_id"]], [name[i] for i in group["removed_ids"]]) == (
        "kept", ["really", "bowl"])
    summary = await get_memory(client, group["summary_id"])
    assert summary["metadata"] == {"doc": "d1"}
    resp = await client.post("/v1/search", json={
        "query": "Does Alice like ramen?", "metadata": {"doc": "d1"}, "top_k": 10})
    assert resp.status_code == 200, resp.text
    found = [r["memory"]["id"] for r in resp.json()["results"]]
    assert group["summary_id"] in found
    assert ids["loves"] not in found  # another document's
    assert not {ids["really"], ids["bowl"]} & set(found)  # archived


async def test_the_candidates_vectors_are_the_stored_ones_read_off_the_event_loop(
    resources: Resources, tenant: TenantKey, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The embeddings come in halfvec's binary form and are read into floats on a worker
    thread: through the column's type every float of 10,000 candidates was parsed from
    text on the event loop, and every request waited 1.2-1.8 s (an exploratory probe)."""
    async with make_client(resources, tenant.headers) as plain:
        ids = await seed(plain, [memory(f"vector note {i}", i) for i in range(3)])
    threads: list[bool] = []
    original = repository._entries

    def entries(rows: Any, with_embeddings: bool) -> Any:
        threads.append(threading.current_thread() is threading.main_thread())
        return original(rows, with_embeddings)

    monkeypatch.setattr(repository, "_entries", entries)
    async with resources.sessionmaker() as session:
        found = await repository.ConsolidationRepository(session, tenant.tenant_id).candidates(
            ConsolidationRequest(user_id="u1"), limit=10, with_embeddings=True,
            partitioning=Partitioning(min_size=1, by_category=False))
        stored = dict((await session.execute(
            select(Memory.id, Memory.embedding).where(Memory.tenant_id == tenant.tenant_id)
        )).all())

    assert threads == [False]
    assert [str(e.id) for e in found.entries] == ids
    for entry in found.entries:
        # Exactly the stored half-precision floats; the text form rounds them (0.1 for
        # 0.0999755859375).
        assert entry.embedding == pytest.approx(tuple(stored[entry.id]), abs=2e-4)
        assert len(entry.embedding or ()) == 384
