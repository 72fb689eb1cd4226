"""HTTP routes of the memory endpoints: parse, call the service, shape the answer."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from app.consolidation.auto import AutoConsolidation
from app.deps import CallerDep, SessionDep, problems
from app.errors import ValidationFailed
from app.idempotency.repository import IdempotencyRepository
from app.idempotency.service import HEADER, KEY_PATTERN, IdempotencyService, check_key
from app.memories.repository import MemoryFilter, MemoryReader, MemoryRepository
from app.memories.schemas import (
    Memory,
    MemoryBatch,
    MemoryBatchCreate,
    MemoryCreate,
    MemoryPage,
    MemoryUpdate,
)
from app.memories.service import MemoryReads, MemoryService
from app.validation import Category, ScopeId, Tag

router = APIRouter(prefix="/v1/memories", tags=["memories"])

IdempotencyKey = Annotated[
    str | None,
    # Checked by check_key, for a plainer message than the pattern's; declared here so
    # the OpenAPI document states the bounds.
    Header(alias=HEADER, json_schema_extra={"minLength": 1, "maxLength": 255,
                                            "pattern": KEY_PATTERN},
           description="Makes a retry with the same body return the first answer "
                       "(1 to 255 visible ASCII characters; kept at least 24 h)."),
]
LIST_PARAMS = frozenset({"user_id", "agent_id", "session_id", "namespace", "tags", "categories",
                         "fact_role", "include_archived", "limit", "cursor"})


def _service(request: Request, session: SessionDep, caller: CallerDep) -> MemoryService:
    resources = request.app.state.resources
    every = resources.settings.auto_consolidate_every
    auto = AutoConsolidation(session, caller.tenant_id, every).after_write if every else None
    return MemoryService(MemoryRepository(session, caller.tenant_id), resources.embedder,
                         after_write=auto)


async def _create(
    request: Request, session: SessionDep, caller: CallerDep, key: str | None,
    operation: str, body: BaseModel, produce: Callable[[], Awaitable[tuple[int, Any]]],
) -> Response:
    if key is None:
        status, payload = await produce()
        return JSONResponse(payload, status_code=status)
    ttl = timedelta(hours=request.app.state.resources.settings.idempotency_ttl_hours)
    idempotency = IdempotencyService(IdempotencyRepository(session, caller.tenant_id), ttl)
    # Only a keyed request needs the canonical body (to hash); a batch of 1000 is not free.
    canonical = body.model_dump(mode="json", exclude_unset=True)

    async def rendered() -> tuple[int, str]:
        # Kept as sent, so a retry's body is byte for byte the first one's.
        status, payload = await produce()
        return status, bytes(JSONResponse(payload).body).decode()

    outcome = await idempotency.run(check_key(key), operation, canonical, rendered)
    headers = {"Idempotent-Replayed": "true"} if outcome.replayed else None
    return Response(outcome.body, status_code=outcome.status_code, headers=headers,
                    media_type="application/json")


@router.post("", operation_id="createMemory", summary="Store one memory", status_code=201,
             response_model=Memory, responses=problems(409, 502))
async def create_memory(
    body: MemoryCreate, request: Request, session: SessionDep, caller: CallerDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    service = _service(request, session, caller)

    async def produce() -> tuple[int, Any]:
        (memory,) = await service.create_many([body])
        return 201, memory.model_dump(mode="json")

    return await _create(request, session, caller, idempotency_key, "createMemory", body,
                         produce)


@router.post("/batch", operation_id="createMemories", status_code=201,
             summary="Store up to 1000 memories, all or nothing", response_model=MemoryBatch,
             responses=problems(409, 502))
async def create_memories(
    body: MemoryBatchCreate, request: Request, session: SessionDep, caller: CallerDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    service = _service(request, session, caller)

    async def produce() -> tuple[int, Any]:
        memories = await service.create_many(body.items)
        return 201, MemoryBatch(items=memories).model_dump(mode="json")

    return await _create(request, session, caller, idempotency_key, "createMemories", body,
                         produce)


async def _reads(request: Request, caller: CallerDep) -> MemoryReads:
    # No request session: a read is one statement on the reads' own pool.
    reader = await request.app.state.resources.memory_reader()
    return MemoryReads(MemoryReader(reader, caller.tenant_id))


@router.get("/{memory_id}", operation_id="getMemory", summary="Read one memory",
            response_model=Memory, responses=problems(404))
async def get_memory(memory_id: uuid.UUID, request: Request, caller: CallerDep) -> Memory:
    return await (await _reads(request, caller)).get(memory_id)


@router.get("", operation_id="listMemories", summary="List memories, newest first",
            response_model=MemoryPage, responses=problems())
async def list_memories(
    request: Request,
    caller: CallerDep,
    user_id: Annotated[ScopeId | None, Query()] = None,
    agent_id: Annotated[ScopeId | None, Query()] = None,
    session_id: Annotated[ScopeId | None, Query()] = None,
    namespace: Annotated[ScopeId | None, Query()] = None,
    tags: Annotated[list[Tag] | None, Query(max_length=64,
                                            description="All must match")] = None,
    categories: Annotated[list[Category] | None, Query(max_length=64)] = None,
    fact_role: Annotated[str | None, Query(pattern="^(fact|summary)$")] = None,
    include_archived: bool = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> MemoryPage:
    unknown = sorted(set(request.query_params) - LIST_PARAMS)
    if unknown:
        raise ValidationFailed.on(f"query.{unknown[0]}", "is not a known parameter")
    filters = MemoryFilter(user_id=user_id, agent_id=agent_id, session_id=session_id,
                           namespace=namespace, tags=tags, categories=categories,
                           fact_role=fact_role, include_archived=include_archived)
    return await (await _reads(request, caller)).list(filters, limit=limit, cursor=cursor)


@router.patch("/{memory_id}", operation_id="updateMemory", summary="Change a memory",
              response_model=Memory, responses=problems(404, 502))
async def update_memory(memory_id: uuid.UUID, body: MemoryUpdate, request: Request,
                        session: SessionDep, caller: CallerDep) -> Memory:
    return await _service(request, session, caller).update(memory_id, body)


@router.delete("/{memory_id}", operation_id="deleteMemory", summary="Delete a memory",
               status_code=204, response_class=Response, responses=problems(404))
async def delete_memory(memory_id: uuid.UUID, request: Request, session: SessionDep,
                        caller: CallerDep) -> Response:
    await _service(request, session, caller).delete(memory_id)
    return Response(status_code=204)
