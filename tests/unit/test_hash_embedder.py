"""The hashing embedder the tests and benchmarks rely on: deterministic, unit length, and
texts that share words land closer than texts that do not."""

from __future__ import annotations

import math

from app.providers.embedder import Embedder
from app.providers.hash_embedder import HashEmbedder


def cosine(a: list[float], b: list[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


async def test_is_deterministic_across_instances() -> None:
    texts = ["Alice likes green tea.", "Bob flies to Lisbon on Monday."]

    first = await HashEmbedder(384).embed(texts)
    second = await HashEmbedder(384).embed(texts)

    assert first == second
    assert first[0] != first[1]


async def test_vectors_are_unit_length_and_the_requested_width() -> None:
    texts = ["one", "two words", "Ünïcödé text 東京", "", "   ", "!!!", "the the the the"]

    vectors = await HashEmbedder(384).embed(texts)

    assert len(vectors) == len(texts)
    for vec in vectors:
        assert len(vec) == 384
        assert math.isclose(math.sqrt(sum(x * x for x in vec)), 1.0, rel_tol=1e-9)


async def test_shared_words_are_closer() -> None:
    embedder = HashEmbedder(384)
    base, shared, unrelated = await embedder.embed([
        "alice likes green tea in the morning",
        "alice likes green tea",
        "quarterly revenue grew by twelve percent",
    ])

    assert cosine(base, shared) > cosine(base, unrelated)
    assert cosine(base, shared) > 0.5


async def test_is_case_insensitive_and_ignores_punctuation() -> None:
    embedder = HashEmbedder(384)
    a, b = await embedder.embed(["Green Tea!", "green tea"])

    assert a == b


async def test_keeps_input_order_and_satisfies_the_protocol() -> None:
    embedder = HashEmbedder(384)
    texts = [f"text number {i}" for i in range(10)]

    batch = await embedder.embed(texts)

    assert batch == [embedder.embed_one(t) for t in texts]
    assert isinstance(embedder, Embedder)
    assert embedder.name == "hash"
    await embedder.aclose()
