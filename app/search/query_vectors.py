"""Query vectors remembered by their text: a search asked again skips the embedding.

Agents ask the same questions turn after turn ("what does the user prefer?", "what do we
know about the project?"), and the query's embedding is most of a search's own time: the
local model's forward pass (4-5 ms here), or an HTTP call to a remote embedder. The cache
holds the vectors of the last `size` queries, least recently used out first, each under
(vector space, tenant, text):

* the tenant, so that no tenant can tell from a search's speed whether another tenant
  asked the same question;
* the vector space, so that a vector is only ever reused by the embedder it came from
  (two embedders of one space give the same vectors, app/providers/embedder.py).

A failed embedding is not remembered. Two concurrent searches of a text not yet cached
both embed it (the local embedder's batcher runs them in one forward pass): making the
second wait on the first would put a task and its hand-off on every miss's path.
"""

from __future__ import annotations

import uuid
from array import array
from collections import OrderedDict
from dataclasses import dataclass
from typing import Protocol

from app.providers.embedder import Vector
from app.service.metrics import QUERY_VECTORS


class QueryEmbedder(Protocol):
    """What a search needs of an embedder: its query's vector."""

    async def embed_query(self, text: str) -> Vector: ...


class SpaceEmbedder(QueryEmbedder, Protocol):
    vector_space: str


_Key = tuple[str, uuid.UUID, str]


class QueryVectorCache:
    """At most `size` query vectors (0: none; every search embeds its query)."""

    def __init__(self, size: int) -> None:
        self.size = size
        # array("d"): 3 KB a 384-wide vector, against 12 KB as a list of float objects,
        # and the exact values the embedder gave.
        self._vectors: OrderedDict[_Key, array[float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._vectors)

    def for_tenant(self, embedder: SpaceEmbedder, tenant_id: uuid.UUID) -> QueryEmbedder:
        """`embedder` as one tenant's searches see it, through this cache."""
        if self.size == 0:
            return embedder
        return _TenantQueries(self, embedder, tenant_id)

    async def vector(self, embedder: SpaceEmbedder, tenant_id: uuid.UUID, text: str) -> Vector:
        """The vector of `text`, from the cache or from `embedder` (then remembered). A new
        list each time: the caller may change it."""
        key = (embedder.vector_space, tenant_id, text)
        cached = self._vectors.get(key)
        if cached is not None:
            self._vectors.move_to_end(key)
            QUERY_VECTORS.labels("hit").inc()
            return cached.tolist()
        QUERY_VECTORS.labels("miss").inc()
        vector = await embedder.embed_query(text)
        if self.size:
            self._vectors[key] = array("d", vector)
            self._vectors.move_to_end(key)
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)
        return vector


@dataclass(frozen=True, slots=True)
class _TenantQueries:
    cache: QueryVectorCache
    embedder: SpaceEmbedder
    tenant_id: uuid.UUID

    async def embed_query(self, text: str) -> Vector:
        return await self.cache.vector(self.embedder, self.tenant_id, text)
