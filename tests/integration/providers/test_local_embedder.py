"""The local all-MiniLM-L6-v2 embedder, loaded once for the module: shape, meaning,
coalescing of concurrent calls, a search's query served before a batch is done (between its
passes, or beside them on the query lane), and one memory stored through the API with its
vector."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import threading
import uuid
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select

from app.models import Memory
from app.providers.embedder import Embedder
from app.providers.local_embedder import LocalEmbedder
from app.resources import Resources
from tests.conftest import create_tenant_key, make_client

pytestmark = pytest.mark.model

CAT = "The cat sat on the mat."
CAT_AGAIN = "A cat was sitting on a rug."
REVENUE = "Quarterly revenue grew by 12 percent."


@pytest.fixture(scope="module")
async def embedder() -> AsyncIterator[LocalEmbedder]:
    model = LocalEmbedder(batch_size=16, threads=1)
    await model.load()
    yield model
    await model.aclose()


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_vectors_are_384_wide_and_unit_length(embedder: LocalEmbedder) -> None:
    texts = [CAT, "", "東京は日本の首都です。", "word " * 400]

    vectors = await embedder.embed(texts)

    assert isinstance(embedder, Embedder)
    assert embedder.dimensions == 384
    assert len(vectors) == len(texts)
    for vec in vectors:
        assert len(vec) == 384
        assert all(isinstance(x, float) and math.isfinite(x) for x in vec)
        assert math.isclose(math.sqrt(sum(x * x for x in vec)), 1.0, abs_tol=1e-5)


async def test_similar_sentences_are_closer_than_unrelated_ones(
    embedder: LocalEmbedder,
) -> None:
    cat, cat_again, revenue = await embedder.embed([CAT, CAT_AGAIN, REVENUE])

    similar = cosine(cat, cat_again)
    assert similar > cosine(cat, revenue)
    assert similar > cosine(cat_again, revenue)
    assert similar > 0.5


async def test_is_deterministic(embedder: LocalEmbedder) -> None:
    first = await embedder.embed([CAT, REVENUE])
    second = await embedder.embed([CAT, REVENUE])

    for a, b in zip(first, second, strict=True):
        assert max(abs(x - y) for x, y in zip(a, b, strict=True)) < 1e-5


async def test_concurrent_single_embeds_are_coalesced_and_match_one_by_one(
    embedder: LocalEmbedder,
) -> None:
    texts = [f"Fact number {i}: the meeting moved to room {i * 7}." for i in range(12)]
    one_by_one = [(await embedder.embed([t]))[0] for t in texts]

    passes: list[int] = []
    encode = embedder._encode

    def counting_encode(batch: list[str]) -> list[list[float]]:
        passes.append(len(batch))
        return encode(batch)

    # The batcher was built with the bound method; swap in a counting wrapper.
    embedder._batcher._run_batch = counting_encode
    try:
        together = await asyncio.gather(*(embedder.embed([t]) for t in texts))
    finally:
        embedder._batcher._run_batch = encode

    assert sum(passes) == len(texts)
    assert len(passes) < len(texts)
    for solo, (batched,) in zip(one_by_one, together, strict=True):
        assert max(abs(x - y) for x, y in zip(solo, batched, strict=True)) < 1e-5


@pytest.mark.parametrize("query_lane", [False, True], ids=["one-worker", "query-lane"])
async def test_a_query_is_answered_before_a_large_batch_is_done(
    embedder: LocalEmbedder, query_lane: bool,
) -> None:
    # Of three lengths, interleaved: the passes take them shortest first.
    batch = [f"Note {i}: " + ("we met.", "the team moved the planning meeting to room 3.",
                              "the quarterly planning meeting moved to the large room on the "
                              "third floor, next to the kitchen.")[i % 3] for i in range(64)]
    # The model over the whole batch at once, and over the single text alone.
    batch_alone = embedder._encode(batch)
    query_alone, single_alone = embedder._encode([CAT_AGAIN, REVENUE])

    passes: list[tuple[str, list[str]]] = []
    started = threading.Event()
    # The module's model, loaded once, behind a batcher of its own.
    local = LocalEmbedder(batch_size=16, query_lane=query_lane, encoder=embedder._encoder)
    encode = local._encode

    def recording_encode(texts: list[str]) -> list[list[float]]:
        passes.append((threading.current_thread().name, list(texts)))
        started.set()
        return encode(texts)

    local._batcher._run_batch = recording_encode
    try:
        bulk = asyncio.ensure_future(local.embed(batch))
        assert await asyncio.to_thread(started.wait, 10)
        single = asyncio.ensure_future(local.embed([REVENUE]))
        query = await local.embed_query(CAT_AGAIN)
        # A search's query does not wait for a write batch, and goes before a single write
        # queued ahead of it.
        assert not bulk.done()
        batched = await bulk
        (single_vector,) = await single
    finally:
        await local.aclose()

    texts = [p for _, p in passes]
    (query_thread,) = (thread for thread, p in passes if p == [CAT_AGAIN])
    if query_lane:
        # Embedded on the second thread, beside the batch's pass under way.
        assert query_thread == "embedder-query_0"
    else:
        # Between two short passes of the batch, on the one thread.
        assert texts.index([CAT_AGAIN]) <= 1
        assert query_thread == "embedder_0"
    assert {thread for thread, p in passes if p != [CAT_AGAIN]} == {"embedder_0"}
    assert texts.index([CAT_AGAIN]) < texts.index([REVENUE])
    assert len(passes) > 3
    assert all(sum(map(len, p)) <= 512 for p in texts)
    batch_passes = [p for p in texts if p not in ([CAT_AGAIN], [REVENUE])]
    assert sorted(t for p in batch_passes for t in p) == sorted(batch)
    # Short passes, and passes run beside each other on one model, give the same vectors,
    # each back in its text's place.
    assert max(abs(x - y) for x, y in zip(query, query_alone, strict=True)) < 1e-5
    assert max(abs(x - y) for x, y in zip(single_vector, single_alone, strict=True)) < 1e-5
    for got, want in zip(batched, batch_alone, strict=True):
        assert max(abs(x - y) for x, y in zip(got, want, strict=True)) < 1e-5


async def test_the_api_stores_the_models_vector(
    embedder: LocalEmbedder, resources: Resources
) -> None:
    local = dataclasses.replace(resources, embedder=embedder)
    tenant = await create_tenant_key(local)

    async with make_client(local, tenant.headers) as client:
        resp = await client.post("/v1/memories", json={"content": CAT_AGAIN})
    assert resp.status_code == 201, resp.text

    async with local.sessionmaker() as session:
        stored = await session.scalar(
            select(Memory.embedding).where(Memory.tenant_id == tenant.tenant_id,
                                           Memory.id == uuid.UUID(resp.json()["id"])))
    (expected,) = await embedder.embed([CAT_AGAIN])
    got = [float(x) for x in stored]
    assert len(got) == 384
    # The column is a halfvec: about three significant digits survive.
    assert max(abs(a - b) for a, b in zip(got, expected, strict=True)) < 2e-3
    assert cosine(got, expected) > 0.9999
