"""The cache of query vectors (app/search/query_vectors.py), with a counting fake embedder."""

from __future__ import annotations

import uuid

import pytest

from app.providers.embedder import Vector
from app.search.query_vectors import QueryVectorCache
from app.service.metrics import QUERY_VECTORS

TENANT = uuid.UUID(int=1)
OTHER_TENANT = uuid.UUID(int=2)


class CountingEmbedder:
    """A distinct, exact vector per text and call count; fails the texts in `failing`."""

    def __init__(self, vector_space: str = "space-a") -> None:
        self.vector_space = vector_space
        self.calls: list[str] = []
        self.failing: set[str] = set()

    async def embed_query(self, text: str) -> Vector:
        self.calls.append(text)
        if text in self.failing:
            raise RuntimeError(f"cannot embed {text!r}")
        seed = sum(map(ord, text)) + len(self.vector_space)
        # Values a float32 would round: the cache must give back what it was given.
        return [seed / 3.0, 1 / 7, -seed * 1e-9 / 3.0]


def counted(outcome: str) -> float:
    return QUERY_VECTORS.labels(outcome)._value.get()


async def test_a_query_asked_again_is_not_embedded_again() -> None:
    embedder = CountingEmbedder()
    queries = QueryVectorCache(8).for_tenant(embedder, TENANT)
    hits, misses = counted("hit"), counted("miss")

    first = await queries.embed_query("what does Alice drink?")
    second = await queries.embed_query("what does Alice drink?")

    assert embedder.calls == ["what does Alice drink?"]
    assert second == first == await CountingEmbedder().embed_query("what does Alice drink?")
    assert (counted("hit") - hits, counted("miss") - misses) == (1, 1)


async def test_each_answer_is_a_list_of_its_own() -> None:
    queries = QueryVectorCache(8).for_tenant(CountingEmbedder(), TENANT)
    first = await queries.embed_query("tea")
    expected = list(first)

    first.append(99.0)
    first[0] = -1.0

    assert await queries.embed_query("tea") == expected


async def test_tenants_do_not_share_vectors() -> None:
    embedder = CountingEmbedder()
    cache = QueryVectorCache(8)

    await cache.for_tenant(embedder, TENANT).embed_query("tea")
    await cache.for_tenant(embedder, OTHER_TENANT).embed_query("tea")

    # The other tenant waited for the embedding: its search's speed says nothing of
    # what the first tenant asked.
    assert embedder.calls == ["tea", "tea"]
    assert len(cache) == 2


async def test_a_vector_is_reused_only_in_its_vector_space() -> None:
    cache = QueryVectorCache(8)
    space_a, space_b = CountingEmbedder("space-a"), CountingEmbedder("space-bb")

    from_a = await cache.for_tenant(space_a, TENANT).embed_query("tea")
    from_b = await cache.for_tenant(space_b, TENANT).embed_query("tea")

    assert (space_a.calls, space_b.calls) == (["tea"], ["tea"])
    assert from_a != from_b
    # Another embedder of the same space reuses it.
    same_space = CountingEmbedder("space-a")
    assert await cache.for_tenant(same_space, TENANT).embed_query("tea") == from_a
    assert same_space.calls == []


async def test_the_least_recently_used_query_goes_first() -> None:
    embedder = CountingEmbedder()
    cache = QueryVectorCache(2)
    queries = cache.for_tenant(embedder, TENANT)

    await queries.embed_query("a")
    await queries.embed_query("b")
    await queries.embed_query("a")  # a hit: "a" is now the most recent
    await queries.embed_query("c")  # past the size: "b" goes
    assert len(cache) == 2
    embedder.calls.clear()

    await queries.embed_query("a")
    await queries.embed_query("c")
    assert embedder.calls == []
    await queries.embed_query("b")
    assert embedder.calls == ["b"]
    assert len(cache) == 2


async def test_a_failed_embedding_is_not_remembered() -> None:
    embedder = CountingEmbedder()
    embedder.failing.add("tea")
    cache = QueryVectorCache(8)
    queries = cache.for_tenant(embedder, TENANT)

    with pytest.raises(RuntimeError):
        await queries.embed_query("tea")
    assert len(cache) == 0

    embedder.failing.clear()
    vector = await queries.embed_query("tea")
    assert await queries.embed_query("tea") == vector
    assert embedder.calls == ["tea", "tea"]


async def test_size_zero_embeds_every_query() -> None:
    embedder = CountingEmbedder()
    cache = QueryVectorCache(0)
    queries = cache.for_tenant(embedder, TENANT)

    # Not even wrapped: the search calls the embedder itself.
    assert queries is embedder
    await queries.embed_query("tea")
    await queries.embed_query("tea")
    assert embedder.calls == ["tea", "tea"]
    assert len(cache) == 0
