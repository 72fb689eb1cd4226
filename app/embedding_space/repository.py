"""The SQL of the vector space: its one row, and the memories' vectors in id order."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from sqlalchemy import text
from sqlalchemy.dialects import postgresql
from sqlalchemy.ext.asyncio import AsyncConnection
from sqlalchemy.schema import CreateIndex

from app.embedding_space.rules import StoredSpace
from app.models import Base
from app.models.vector import vector_text

# The service's connections, by application_name (app/db.py, app/search/reader.py,
# app/worker/runner.py); the CLI's own are `engram-cli`.
SERVICE_CONNECTIONS = """
SELECT application_name, count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND application_name LIKE 'engram%' AND application_name <> 'engram-cli'
  AND NOT (:unblocked AND pg_backend_pid() = ANY(pg_blocking_pids(pid)))
GROUP BY application_name ORDER BY application_name
"""

# The HNSW index as the model (and so the migrations) define it.
VECTOR_INDEX = next(i for i in Base.metadata.tables["memories"].indexes
                    if i.name == "ix_memories_embedding_hnsw")
CREATE_VECTOR_INDEX = str(CreateIndex(VECTOR_INDEX, if_not_exists=True).compile(
    dialect=postgresql.dialect()))  # type: ignore[no-untyped-call]

UPDATE_VECTORS = """
UPDATE memories m SET embedding = CAST(v.embedding AS halfvec)
FROM unnest(CAST(:ids AS uuid[]), CAST(:contents AS text[]), CAST(:vectors AS text[]))
    AS v(id, content, embedding)
WHERE m.id = v.id AND m.content = v.content
"""


# A session-level advisory lock held for a whole re-embedding pass, or a whole restore:
# hashtextextended('engram:embedding-space', 0).
_PASS_LOCK = text("SELECT pg_try_advisory_lock(hashtextextended('engram:embedding-space', 0))")
_PASS_UNLOCK = text("SELECT pg_advisory_unlock(hashtextextended('engram:embedding-space', 0))")


class EmbeddingSpaceRepository:
    def __init__(self, conn: AsyncConnection) -> None:
        self._conn = conn

    async def try_lock_pass(self) -> bool:
        """Take the pass lock on this connection (held until `unlock_pass` or until the
        connection closes); False when another connection holds it."""
        return bool(await self._conn.scalar(_PASS_LOCK))

    async def unlock_pass(self) -> None:
        await self._conn.scalar(_PASS_UNLOCK)

    async def lock_row(self) -> StoredSpace | None:
        """The row, locked for the transaction, or None when no model was recorded yet. A
        missing row is inserted first with an empty model (none known), so two starts at
        once wait for each other instead of racing to insert."""
        await self._conn.execute(text(
            "INSERT INTO embedding_space (model) VALUES ('') ON CONFLICT DO NOTHING"))
        row = (await self._conn.execute(text(
            "SELECT model, target_model, target_after FROM embedding_space FOR UPDATE"))).one()
        if row[0] == "" and row[1] is None:
            return None
        return StoredSpace(row[0], row[1], row[2])

    async def record(self, model: str) -> None:
        await self._conn.execute(text(
            "UPDATE embedding_space SET model = :model, recorded_at = now(), "
            "target_model = NULL, target_after = NULL"), {"model": model})

    async def begin_target(self, target: str, after: uuid.UUID | None) -> None:
        await self._conn.execute(text(
            "UPDATE embedding_space SET target_model = :target, target_after = :after"),
            {"target": target, "after": after})

    async def advance(self, after: uuid.UUID) -> None:
        await self._conn.execute(text("UPDATE embedding_space SET target_after = :after"),
                                 {"after": after})

    async def has_memories(self) -> bool:
        return bool((await self._conn.execute(
            text("SELECT EXISTS (SELECT FROM memories)"))).scalar())

    async def newest_contents(self, limit: int) -> Sequence[tuple[uuid.UUID, str]]:
        """The newest memories holding a vector, to embed again and compare."""
        rows = await self._conn.execute(text(
            "SELECT id, content FROM memories WHERE embedding IS NOT NULL "
            "ORDER BY id DESC LIMIT :limit"), {"limit": limit})
        return [(row[0], row[1]) for row in rows]

    async def mean_similarity(self, ids: Sequence[uuid.UUID],
                              vectors: Sequence[Sequence[float]]) -> float | None:
        """The stored vectors' mean cosine similarity to `vectors`, row by row."""
        mean = await self._conn.scalar(text(
            "SELECT avg(1 - (m.embedding <=> CAST(v.vector AS vector))) FROM "
            "unnest(CAST(:ids AS uuid[]), CAST(:vectors AS text[])) AS v(id, vector) "
            "JOIN memories m ON m.id = v.id"),
            {"ids": list(ids), "vectors": [vector_text(v) for v in vectors]})
        return None if mean is None else float(mean)

    async def count_after(self, after: uuid.UUID | None) -> int:
        return int((await self._conn.execute(
            text("SELECT count(*) FROM memories WHERE CAST(:after AS uuid) IS NULL "
                 "OR id > CAST(:after AS uuid)"), {"after": after})).scalar() or 0)

    async def next_batch(self, after: uuid.UUID | None,
                         limit: int) -> Sequence[tuple[uuid.UUID, str]]:
        """Every memory of every tenant, archived and expired ones too, by id."""
        rows = await self._conn.execute(text(
            "SELECT id, content FROM memories WHERE CAST(:after AS uuid) IS NULL "
            "OR id > CAST(:after AS uuid) ORDER BY id LIMIT :limit"),
            {"after": after, "limit": limit})
        return [(row[0], row[1]) for row in rows]

    async def write_vectors(self, rows: Sequence[tuple[uuid.UUID, str]],
                            vectors: Sequence[Sequence[float]]) -> int:
        """Each row's new vector, unless its content changed since it was read (then its
        writer embedded it); how many were written."""
        result = await self._conn.execute(text(UPDATE_VECTORS), {
            "ids": [row[0] for row in rows], "contents": [row[1] for row in rows],
            "vectors": [vector_text(v) for v in vectors]})
        return int(getattr(result, "rowcount", 0) or 0)

    async def drop_vector_index(self) -> None:
        """For the pass, as for a bulk load: each replaced vector would be a graph
        insertion (the pass ran at 72% of the encoder's speed with the index kept,
        bench/reembed.py), and the old vectors' nodes would stay in the graph until a
        vacuum, which pgvector's documentation says is slow on HNSW unless the index is
        rebuilt first."""
        await self._conn.execute(text(f"DROP INDEX IF EXISTS {VECTOR_INDEX.name}"))

    async def create_vector_index(self) -> None:
        """The index as the schema defines it; a no-op when it exists."""
        await self._conn.execute(text(CREATE_VECTOR_INDEX))

    async def build_vector_index(self) -> None:
        """After the pass, on an autocommit connection: the index, then the table
        vacuumed and analysed (every row was rewritten)."""
        await self.create_vector_index()
        await self._conn.execute(text("VACUUM (ANALYZE) memories"))

    async def service_connections(self, *, unblocked: bool = False) -> list[tuple[str, int]]:
        """The service's connections by name; `unblocked`: less those waiting on a lock
        this connection holds (another replica's start, waiting for this one's)."""
        rows = await self._conn.execute(text(SERVICE_CONNECTIONS), {"unblocked": unblocked})
        return [(row[0], int(row[1])) for row in rows]
