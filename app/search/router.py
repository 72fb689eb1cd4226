"""`POST /v1/search`: parse, search, answer."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.deps import CallerDep, problems
from app.search.repository import SearchRepository
from app.search.schemas import SearchRequest, SearchResponse
from app.search.service import SearchService

router = APIRouter(prefix="/v1", tags=["search"])


@router.post("/search", operation_id="searchMemories", summary="Search memories",
             response_model=SearchResponse, responses=problems(502))
async def search_memories(body: SearchRequest, request: Request,
                          caller: CallerDep) -> SearchResponse:
    # No request session: a search only reads, on the search's own pool.
    resources = request.app.state.resources
    service = SearchService(
        repository=SearchRepository(await resources.search_reader(), caller.tenant_id),
        embedder=resources.query_vectors.for_tenant(resources.embedder, caller.tenant_id),
        pipeline=resources.search_pipeline,
        limits=resources.search_limits,
    )
    return await service.search(body)
