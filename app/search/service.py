"""The search use case: analyse the query, retrieve candidates, run the pure stages."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol, cast

from app.search.pipeline import SearchPipeline
from app.search.query_vectors import QueryEmbedder
from app.search.repository import (
    RetrievalLimits,
    RetrievedRow,
    SearchFilter,
    TextMatches,
)
from app.search.schemas import SearchRequest, SearchResponse, SearchResult
from app.search.stages.query_style import analyze_query
from app.search.types import Candidate, QueryAnalysis, SearchContext


class CandidateSource(Protocol):
    """Candidate retrieval in two steps (app/search/repository.py)."""

    async def text_matches(self, query_text: str, filters: SearchFilter,
                           limits: RetrievalLimits) -> TextMatches: ...

    async def candidates(self, text: TextMatches, query_vector: Sequence[float],
                         filters: SearchFilter, limits: RetrievalLimits,
                         top_k: int = 0) -> list[RetrievedRow]: ...


# The vector list's depth for a search whose first candidates were mostly copies of each
# other: enough for a few dozen copies and top_k beyond them (and never past 1000, the
# settings' own bound on a list's depth).
COLLAPSED_DEPTH = 100
MAX_VECTOR_DEPTH = 1000


@dataclass(frozen=True)
class SearchService:
    repository: CandidateSource
    embedder: QueryEmbedder
    pipeline: SearchPipeline
    limits: RetrievalLimits

    async def search(self, request: SearchRequest) -> SearchResponse:
        filters = SearchFilter(
            user_id=request.user_id, agent_id=request.agent_id,
            session_id=request.session_id, namespace=request.namespace,
            tags=request.tags, categories=request.categories,
            include_summaries=request.include_summaries,
            created_after=request.created_after, created_before=request.created_before,
            metadata=request.metadata or None,
        )
        # The full-text statement runs while the query is embedded: it needs no vector.
        text_task = asyncio.ensure_future(
            self.repository.text_matches(request.query, filters, self.limits))
        try:
            vector = await self.embedder.embed_query(request.query)
        except BaseException:
            text_task.cancel()
            await asyncio.gather(text_task, return_exceptions=True)
            raise
        text = await text_task
        analysis = analyze_query(request.query, tuple(vector))
        now = datetime.now(UTC)
        rows = await self.repository.candidates(text, vector, filters, self.limits,
                                                request.top_k)
        ranked = self._ranked(rows, analysis, request, now)
        if ranked.collapsed and len(ranked.candidates) < request.top_k \
                and self._vector_list_full(rows, request.top_k):
            # Copies of one memory filled the vector list, and the distinct memories past
            # them were never candidates: 40 copies of a preference and 12 paraphrases of
            # it answered 9 results for top_k 20 (a re-probe). Once more, deeper; only
            # then, since a search rarely collapses that much.
            rows = await self.repository.candidates(
                text, vector, filters, self.limits,
                min(MAX_VECTOR_DEPTH, max(COLLAPSED_DEPTH, 4 * request.top_k)))
            ranked = self._ranked(rows, analysis, request, now)
        return SearchResponse(
            query_style=ranked.query.style,
            results=[
                SearchResult(
                    memory=cast(RetrievedRow, c.payload).memory(),
                    score=c.score,
                    explanation=c.explanation if request.explain else None,
                )
                for c in ranked.candidates
            ],
        )

    def _ranked(self, rows: Sequence[RetrievedRow], analysis: QueryAnalysis,
                request: SearchRequest, now: datetime) -> SearchContext:
        candidates = tuple(
            Candidate.retrieved(row.memory_id, row, row.importance, row.created_at,
                                row.fact_role, row.vector_rank, row.vector_similarity,
                                row.text_rank, row.text_score, row.covered_days, row.covers,
                                row.text_day_only)
            for row in rows
        )
        return self.pipeline.run(SearchContext(
            query=analysis, candidates=candidates, top_k=request.top_k, now=now,
            include_summaries=request.include_summaries, explain=request.explain,
        ))

    def _vector_list_full(self, rows: Sequence[RetrievedRow], top_k: int) -> bool:
        """Whether the vector list came back as deep as asked, so that more rows may lie
        past it (a scope smaller than the list holds no more)."""
        asked = max(top_k, min(self.limits.vector_candidates, self.limits.hnsw_candidates))
        return sum(row.vector_rank is not None for row in rows) >= asked
