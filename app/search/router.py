"""`POST /v1/search`: parse, search, answer."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.deps import CallerDep, SessionDep, problems
from app.search.repository import SearchRepository
from app.search.schemas import SearchRequest, SearchResponse
from app.search.service import SearchService

router = APIRouter(prefix="/v1", tags=["search"])


@router.post("/search", operation_id="searchMemories", summary="Search memories",
             response_model=SearchResponse, responses=problems(502))
async def search_memories(body: SearchRequest, request: Request, session: SessionDep,
                          caller: CallerDep) -> SearchResponse:
    resources = request.app.state.resources
    service = SearchService(
        repository=SearchRepository(session, caller.tenant_id),
        embedder=resources.embedder,
        pipeline=resources.search_pipeline,
        limits=resources.search_limits,
    )
    return await service.search(body)
