"""Candidate retrieval: nearest neighbours and BM25 full-text matches in one SQL round trip.

The statement has two halves that share one filter (tenant, scope, tags, categories,
not archived, not expired):

- Vector: a scope with fewer than `exact_below` visible rows is ranked by exact cosine
  distance over the btree on the scope (`+ 0` keeps the planner off the HNSW index, which
  returns too few rows for a small scope); a larger one goes through HNSW with pgvector's
  iterative scan. The choice is an uncurried one-time filter, so only one half runs.
- Text: Okapi BM25 from term statistics. Document frequencies are counted per query
  lexeme on the GIN index, capped (a term in thousands of rows is common either way),
  and at most `text_match_cap` matching rows are scored, so a query of common words
  cannot make the tail grow with the table.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession

from app.memories.schemas import Memory


@dataclass(frozen=True)
class SearchFilter:
    user_id: str | None = None
    agent_id: str | None = None
    session_id: str | None = None
    namespace: str | None = None
    tags: Sequence[str] | None = None
    categories: Sequence[str] | None = None
    include_summaries: bool = True


@dataclass(frozen=True)
class RetrievalLimits:
    vector_candidates: int = 50
    text_candidates: int = 50
    exact_below: int = 1000
    text_match_cap: int = 500
    df_cap: int = 1000
    corpus_cap: int = 10000
    bm25_k1: float = 1.2
    bm25_b: float = 0.75


@dataclass(frozen=True)
class RetrievedRow:
    memory: Memory
    vector_rank: int | None
    vector_similarity: float | None
    text_rank: int | None
    text_score: float | None


_MEMORY_COLUMNS = (
    "id, content, user_id, agent_id, session_id, namespace, category, tags, importance, "
    "metadata, source, fact_role, summary_of, created_at, updated_at, expires_at, "
    "archived_at, consolidation_id"
)

_SQL = """
WITH
small AS MATERIALIZED (
    SELECT count(*) < :exact_below AS yes
    FROM (SELECT 1 FROM memories m WHERE {where} LIMIT :exact_below) s
),
vec_exact AS (
    SELECT m.id, m.embedding <=> CAST(:q AS halfvec(384)) AS dist
    FROM memories m
    WHERE {where} AND (SELECT yes FROM small)
    ORDER BY (m.embedding <=> CAST(:q AS halfvec(384))) + 0
    LIMIT :kv
),
vec_ann AS (
    SELECT m.id, m.embedding <=> CAST(:q AS halfvec(384)) AS dist
    FROM memories m
    WHERE {where} AND NOT (SELECT yes FROM small)
    ORDER BY m.embedding <=> CAST(:q AS halfvec(384))
    LIMIT :kv
),
vec AS (
    SELECT id, dist, row_number() OVER (ORDER BY dist, id) AS rank
    FROM (SELECT * FROM vec_exact UNION ALL SELECT * FROM vec_ann) v
),
terms AS MATERIALIZED (
    -- quote_literal switches to E'' syntax for a backslash, which tsquery cannot read.
    SELECT DISTINCT lexeme
    FROM unnest(tsvector_to_array(to_tsvector('english', :qtext))) AS lexeme
    WHERE strpos(lexeme, chr(92)) = 0
),
corpus AS MATERIALIZED (
    SELECT count(*)::float8 AS n
    FROM (SELECT 1 FROM memories m WHERE {where} LIMIT :corpus_cap) s
),
idf AS MATERIALIZED (
    SELECT t.lexeme, df.n,
           ln(1 + ((SELECT n FROM corpus) - df.n + 0.5) / (df.n + 0.5)) AS w
    FROM terms t
    CROSS JOIN LATERAL (
        SELECT least(count(*), (SELECT n FROM corpus))::float8 AS n
        FROM (
            SELECT 1 FROM memories m
            WHERE {where} AND m.tsv @@ quote_literal(t.lexeme)::tsquery
            LIMIT :df_cap
        ) s
    ) df
),
-- The cap is filled from rows holding an informative term (one below the df cap) when
-- the query has one: a row with only common terms scores below any of those, and a plain
-- LIMIT would keep whichever matches come first on disk.
match_query AS MATERIALIZED (
    SELECT coalesce(
        (SELECT string_agg(quote_literal(lexeme), ' | ') FROM idf WHERE n < :df_cap),
        (SELECT string_agg(quote_literal(lexeme), ' | ') FROM idf),
        ''
    )::tsquery AS q
),
matched AS MATERIALIZED (
    SELECT m.id, m.tsv, length(m.tsv)::float8 AS dl
    FROM memories m
    WHERE {where} AND m.tsv @@ (SELECT q FROM match_query)
    LIMIT :text_match_cap
),
bm25 AS (
    SELECT mt.id,
           sum(idf.w * (tf.n * (CAST(:k1 AS float8) + 1))
               / (tf.n + CAST(:k1 AS float8)
                  * (1 - CAST(:b AS float8) + CAST(:b AS float8) * mt.dl
                     / greatest((SELECT avg(dl) FROM matched), 1)))) AS score
    FROM matched mt
    CROSS JOIN LATERAL unnest(mt.tsv) AS u(lexeme, positions, weights)
    JOIN idf ON idf.lexeme = u.lexeme
    CROSS JOIN LATERAL (SELECT coalesce(array_length(u.positions, 1), 1)::float8 AS n) tf
    GROUP BY mt.id
),
txt AS (
    SELECT id, score, row_number() OVER (ORDER BY score DESC, id) AS rank
    FROM bm25
    ORDER BY score DESC, id
    LIMIT :kt
)
SELECT {columns}, vec.rank AS vector_rank, 1 - vec.dist AS vector_similarity,
       txt.rank AS text_rank, txt.score AS text_score
FROM (SELECT id FROM vec UNION SELECT id FROM txt) ids
JOIN memories m ON m.tenant_id = :tenant_id AND m.id = ids.id
LEFT JOIN vec ON vec.id = ids.id
LEFT JOIN txt ON txt.id = ids.id
"""


class SearchRepository:
    def __init__(self, session: AsyncSession, tenant_id: uuid.UUID) -> None:
        self.session = session
        self.tenant_id = tenant_id

    def _where(self, filters: SearchFilter, params: dict[str, Any]) -> str:
        preds = [
            "m.tenant_id = :tenant_id",
            "m.archived_at IS NULL",
            "(m.expires_at IS NULL OR m.expires_at > now())",
        ]
        for column in ("user_id", "agent_id", "session_id", "namespace"):
            value = getattr(filters, column)
            if value is not None:
                preds.append(f"m.{column} = :{column}")
                params[column] = value
        if filters.tags:
            preds.append("m.tags @> CAST(:tags AS text[])")
            params["tags"] = list(filters.tags)
        if filters.categories:
            preds.append("m.category = ANY(CAST(:categories AS text[]))")
            params["categories"] = list(filters.categories)
        if not filters.include_summaries:
            preds.append("m.fact_role = 'fact'")
        return " AND ".join(preds)

    async def candidates(
        self,
        query_text: str,
        query_vector: Sequence[float],
        filters: SearchFilter,
        limits: RetrievalLimits,
    ) -> list[RetrievedRow]:
        params: dict[str, Any] = {
            "tenant_id": self.tenant_id,
            "q": "[" + ",".join(f"{x:.6f}" for x in query_vector) + "]",
            "qtext": query_text,
            "kv": limits.vector_candidates,
            "kt": limits.text_candidates,
            "exact_below": limits.exact_below,
            "text_match_cap": limits.text_match_cap,
            "df_cap": limits.df_cap,
            "corpus_cap": limits.corpus_cap,
            "k1": limits.bm25_k1,
            "b": limits.bm25_b,
        }
        where = self._where(filters, params)
        sql = _SQL.format(where=where, columns=", ".join(f"m.{c}" for c in _MEMORY_KEYS))
        result = await self.session.execute(text(sql), params)
        rows = []
        for row in result.mappings():
            rows.append(RetrievedRow(
                memory=Memory.model_validate({k: row[k] for k in _MEMORY_KEYS}),
                vector_rank=row["vector_rank"],
                vector_similarity=row["vector_similarity"],
                text_rank=row["text_rank"],
                text_score=row["text_score"],
            ))
        return rows


_MEMORY_KEYS = tuple(c.strip() for c in _MEMORY_COLUMNS.split(","))
