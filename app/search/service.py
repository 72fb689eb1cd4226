"""The search use case: analyse the query, retrieve candidates, run the pure stages."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import cast

from app.providers.embedder import Embedder
from app.search.pipeline import SearchPipeline
from app.search.repository import (
    RetrievalLimits,
    RetrievedRow,
    SearchFilter,
    SearchRepository,
)
from app.search.schemas import SearchRequest, SearchResponse, SearchResult
from app.search.stages.query_style import analyze_query
from app.search.types import Candidate, SearchContext


@dataclass(frozen=True)
class SearchService:
    repository: SearchRepository
    embedder: Embedder
    pipeline: SearchPipeline
    limits: RetrievalLimits

    async def search(self, request: SearchRequest) -> SearchResponse:
        filters = SearchFilter(
            user_id=request.user_id, agent_id=request.agent_id,
            session_id=request.session_id, namespace=request.namespace,
            tags=request.tags, categories=request.categories,
            include_summaries=request.include_summaries,
        )
        # Embedded before the first statement, so no connection waits on the model.
        (vector,) = await self.embedder.embed([request.query])
        analysis = analyze_query(request.query, tuple(vector))
        rows = await self.repository.candidates(request.query, vector, filters, self.limits,
                                                request.top_k)
        candidates = tuple(
            Candidate(
                memory_id=row.memory_id,
                payload=row,
                importance=row.importance,
                created_at=row.created_at,
                fact_role=row.fact_role,
                vector_rank=row.vector_rank,
                vector_similarity=row.vector_similarity,
                text_rank=row.text_rank,
                text_score=row.text_score,
            )
            for row in rows
        )
        ctx = SearchContext(
            query=analysis, candidates=candidates, top_k=request.top_k,
            now=datetime.now(UTC), include_summaries=request.include_summaries,
            explain=request.explain,
        )
        ranked = self.pipeline.run(ctx)
        return SearchResponse(
            query_style=analysis.style,
            results=[
                SearchResult(
                    memory=cast(RetrievedRow, c.payload).memory(),
                    score=c.score,
                    explanation=c.explanation if request.explain else None,
                )
                for c in ranked.candidates
            ],
        )
