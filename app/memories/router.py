"""HTTP routes of the memory endpoints: parse, call the service, shape the answer."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request, Response

from app.consolidation.auto import AutoConsolidation
from app.cursors import CURSOR_MAX_CHARS
from app.deps import CallerDep, SessionDep, problems, refuse_unknown_params
from app.errors import ValidationFailed
from app.idempotency.http import IdempotencyKey, keyed_create
from app.idempotency.repository import named_memories
from app.idempotency.service import canonical_body, earlier_body
from app.memories.capacity import CapacityBound
from app.memories.repository import MemoryFilter, MemoryReader, MemoryRepository
from app.memories.schemas import (
    FactRole,
    Memory,
    MemoryBatch,
    MemoryBatchCreate,
    MemoryCreate,
    MemoryDeletion,
    MemoryHistory,
    MemoryHistoryDeletion,
    MemoryPage,
    MemoryUpdate,
)
from app.memories.service import MemoryReads, MemoryService
from app.validation import (
    METADATA_PARAM_DESCRIPTION,
    METADATA_PARAM_MAX_CHARS,
    AwareDatetime,
    AwareDatetimeBefore,
    Category,
    ScopeId,
    Tag,
    metadata_match_param,
)

router = APIRouter(prefix="/v1/memories", tags=["memories"])

FILTER_PARAMS = frozenset({"user_id", "agent_id", "session_id", "namespace", "tags",
                           "categories", "fact_role", "created_after", "created_before",
                           "metadata"})
LIST_PARAMS = FILTER_PARAMS | {"include_archived", "limit", "cursor"}


async def memory_filter(
    user_id: Annotated[ScopeId | None, Query()] = None,
    agent_id: Annotated[ScopeId | None, Query()] = None,
    session_id: Annotated[ScopeId | None, Query()] = None,
    namespace: Annotated[ScopeId | None, Query()] = None,
    tags: Annotated[list[Tag] | None, Query(max_length=64,
                                            description="All must match")] = None,
    categories: Annotated[list[Category] | None, Query(max_length=64)] = None,
    fact_role: Annotated[FactRole | None, Query()] = None,
    created_after: Annotated[AwareDatetime | None, Query(
        description="Only memories created after this moment (RFC 3339 with a zone)")] = None,
    created_before: Annotated[AwareDatetimeBefore | None, Query(
        description="Only memories created before this moment")] = None,
    metadata: Annotated[str | None, Query(
        max_length=METADATA_PARAM_MAX_CHARS, description=METADATA_PARAM_DESCRIPTION,
        # What pydantic's Json type would declare: JSON text holding an object.
        json_schema_extra={"contentMediaType": "application/json",
                           "contentSchema": {"type": "object"}})] = None,
) -> MemoryFilter:
    """The query string's filters, shared by the listing and the filtered delete. `async`
    though it awaits nothing: FastAPI runs a plain function on a worker thread, a hand-off
    there and back on every listing."""
    try:
        match = metadata_match_param(metadata) if metadata is not None else None
    except ValueError as exc:
        raise ValidationFailed.on("query.metadata", str(exc)) from None
    return MemoryFilter(user_id=user_id, agent_id=agent_id, session_id=session_id,
                        namespace=namespace, tags=tags, categories=categories,
                        fact_role=fact_role, created_after=created_after,
                        created_before=created_before, metadata=match or None)


FilterDep = Annotated[MemoryFilter, Depends(memory_filter)]


def _service(request: Request, session: SessionDep, caller: CallerDep) -> MemoryService:
    resources = request.app.state.resources
    every = resources.settings.auto_consolidate_every
    auto = AutoConsolidation(session, caller.tenant_id, every).after_write if every else None
    repository = MemoryRepository(session, caller.tenant_id)
    capacity = (CapacityBound(repository, caller.memories_per_user)
                if caller.memories_per_user > 0 else None)
    return MemoryService(repository, resources.embedder, after_write=auto, capacity=capacity,
                         history_kept=resources.settings.history_max_versions)


CAP_NOTE = ("When the service caps a user's active memories (`ENGRAM_MAX_MEMORIES_PER_USER`, "
            "or the tenant's own), a write that takes a user past the cap archives that "
            "user's expired memories, then its least important others, oldest first, never "
            "what it stores itself.")


@router.post("", operation_id="createMemory", summary="Store one memory", status_code=201,
             response_model=Memory, responses=problems(409, 410, 502), description=CAP_NOTE)
async def create_memory(
    body: MemoryCreate, request: Request, session: SessionDep, caller: CallerDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    service = _service(request, session, caller)
    rows: list[dict[str, Any]] = []

    async def embed() -> None:
        rows.extend(await service.prepare([body]))

    async def produce() -> tuple[int, Any]:
        (memory,) = await service.write(rows)
        return 201, memory.model_dump(mode="json")

    return await keyed_create(request, session, caller, idempotency_key, "createMemory",
                              lambda: canonical_body(body), produce, ahead=embed,
                              earlier=lambda: [earlier_body(body)],
                              names=lambda answer: named_memories([answer["id"]]))


@router.post("/batch", operation_id="createMemories", status_code=201,
             summary="Store up to 1000 memories, all or nothing", response_model=MemoryBatch,
             responses=problems(409, 410, 502),
             description=CAP_NOTE + " A batch holding more memories of one user than the cap "
             "is refused with 422 (`items`).")
async def create_memories(
    body: MemoryBatchCreate, request: Request, session: SessionDep, caller: CallerDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    service = _service(request, session, caller)
    rows: list[dict[str, Any]] = []

    async def embed() -> None:
        rows.extend(await service.prepare(body.items))

    async def produce() -> tuple[int, Any]:
        memories = await service.write(rows)
        return 201, MemoryBatch(items=memories).model_dump(mode="json")

    return await keyed_create(request, session, caller, idempotency_key, "createMemories",
                              lambda: canonical_body(body), produce, ahead=embed,
                              earlier=lambda: [earlier_body(body)],
                              names=lambda answer: named_memories(
                                  item["id"] for item in answer["items"]))


async def _reads(request: Request, caller: CallerDep) -> MemoryReads:
    # No request session: a read is one statement on the reads' own pool.
    reader = await request.app.state.resources.memory_reader()
    return MemoryReads(MemoryReader(reader, caller.tenant_id))


@router.get("/{memory_id}", operation_id="getMemory", summary="Read one memory",
            response_model=Memory, responses=problems(404))
async def get_memory(memory_id: uuid.UUID, request: Request, caller: CallerDep) -> Memory:
    return await (await _reads(request, caller)).get(memory_id)


@router.get("/{memory_id}/history", operation_id="getMemoryHistory",
            summary="A memory's earlier states, newest first", response_model=MemoryHistory,
            responses=problems(404),
            description="Every change to a memory's content, category, tags, importance, "
                        "metadata or expiry keeps the state it replaced, so what an agent "
                        "believed before can be read. A memory keeps its newest "
                        "`ENGRAM_HISTORY_MAX_VERSIONS` states (100), for at most "
                        "`ENGRAM_HISTORY_RETENTION_DAYS` when set; `deleteMemoryHistory` "
                        "erases them. The history goes with the memory when it is deleted.")
async def get_memory_history(
    memory_id: uuid.UUID, request: Request, caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=CURSOR_MAX_CHARS)] = None,
) -> MemoryHistory:
    refuse_unknown_params(request, frozenset({"limit", "cursor"}))
    return await (await _reads(request, caller)).history(memory_id, limit=limit, cursor=cursor)


@router.delete("/{memory_id}/history", operation_id="deleteMemoryHistory",
               summary="Erase a memory's earlier states", response_model=MemoryHistoryDeletion,
               responses=problems(404),
               description="Deletes every earlier state of the memory, so what a change "
                           "replaced (a secret stored by mistake, then corrected) is gone; "
                           "the memory itself is unchanged, and later changes add states "
                           "again.")
async def delete_memory_history(memory_id: uuid.UUID, request: Request, session: SessionDep,
                                caller: CallerDep) -> MemoryHistoryDeletion:
    refuse_unknown_params(request, frozenset())
    return MemoryHistoryDeletion(
        deleted=await _service(request, session, caller).delete_history(memory_id))


@router.get("", operation_id="listMemories", summary="List memories, newest first",
            response_model=MemoryPage, responses=problems())
async def list_memories(
    request: Request,
    caller: CallerDep,
    filters: FilterDep,
    include_archived: bool = False,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=CURSOR_MAX_CHARS)] = None,
) -> MemoryPage:
    refuse_unknown_params(request, LIST_PARAMS)
    return await (await _reads(request, caller)).list(
        replace(filters, include_archived=include_archived), limit=limit, cursor=cursor)


@router.patch("/{memory_id}", operation_id="updateMemory", summary="Change a memory",
              response_model=Memory, responses=problems(404, 502),
              description="A summary holds its sources' text, so it does not outlive them: "
              "an `expires_at` set on a memory brings forward the expiry of every summary "
              "built from it (directly, or through a later summary) that would expire "
              "later, and a summary's own `expires_at` past the first of its sources' is "
              "422. A new `content` (a different text) deletes every summary built from "
              "the memory, directly or through a later summary, since it holds the old "
              "text, and what such a summary had archived, the memory among them, comes "
              "back to the active set.")
async def update_memory(memory_id: uuid.UUID, body: MemoryUpdate, request: Request,
                        session: SessionDep, caller: CallerDep) -> Memory:
    return await _service(request, session, caller).update(memory_id, body)


@router.delete("/{memory_id}", operation_id="deleteMemory", summary="Delete a memory",
               status_code=204, response_class=Response, responses=problems(404),
               description="Every summary built from it (directly, or through a later "
               "summary) is deleted with it, so its text does not live on in one, and what "
               "such a summary, or the deleted memory if it is a summary, had archived "
               "comes back to the active set.")
async def delete_memory(memory_id: uuid.UUID, request: Request, session: SessionDep,
                        caller: CallerDep) -> Response:
    await _service(request, session, caller).delete(memory_id)
    return Response(status_code=204)


@router.delete(
    "", operation_id="deleteMemories", summary="Delete every memory matching a filter",
    response_model=MemoryDeletion, responses=problems(),
    description="Deletes every memory of the tenant that matches the query string's "
                "filters, as the listing reads them, all at once: facts and summaries, "
                "archived and expired ones included (a user's request to be forgotten "
                "leaves nothing behind), and every summary built from one of them, what "
                "such a summary, or a deleted summary, had archived coming back to the "
                "active set. A scope, "
                "`tags`, `categories` or `metadata` "
                "must be named; without one the whole tenant would go, and the answer is "
                "422. Sessions are not memories: `deleteSessions` deletes a user's "
                "sessions.")
async def delete_memories(request: Request, session: SessionDep, caller: CallerDep,
                          filters: FilterDep) -> MemoryDeletion:
    refuse_unknown_params(request, FILTER_PARAMS)
    return MemoryDeletion(deleted=await _service(request, session, caller)
                          .delete_matching(filters))
