"""A deterministic feature-hashing embedder: fast unit tests and benchmarks, never production.

Texts sharing words get nearby vectors, so tests of ranking and filtering behave sensibly
without loading a model.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence

from app.providers.embedder import Vector

_TOKEN = re.compile(r"\w+", re.UNICODE)


class HashEmbedder:
    name = "hash"
    vector_space = "engram-hash"

    def __init__(self, dimensions: int) -> None:
        self.dimensions = dimensions

    def embed_one(self, text: str) -> Vector:
        vec = [0.0] * self.dimensions
        tokens = _TOKEN.findall(text.lower()) or [text]
        for token in tokens:
            digest = hashlib.blake2b(token.encode(), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimensions
            sign = 1.0 if digest[4] & 1 else -1.0
            vec[bucket] += sign
        norm = math.sqrt(sum(v * v for v in vec))
        if norm == 0.0:
            # Every token cancelled out; a zero vector has no cosine distance.
            vec[0], norm = 1.0, 1.0
        return [v / norm for v in vec]

    async def embed(self, texts: Sequence[str]) -> list[Vector]:
        return [self.embed_one(t) for t in texts]

    async def embed_query(self, text: str) -> Vector:
        return self.embed_one(text)

    async def aclose(self) -> None:
        return None
