"""HTTP routes of the session endpoints: parse, call the service, shape the answer."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request, Response
from fastapi.responses import JSONResponse

from app.cursors import CURSOR_MAX_CHARS
from app.deps import CallerDep, SessionDep, problems, refuse_unknown_params
from app.errors import problem_response
from app.idempotency.http import IdempotencyKey, answered_before, keyed_create
from app.idempotency.repository import named_sessions
from app.idempotency.service import canonical_body, earlier_body
from app.sessions.config import fold_policy, retention
from app.sessions.health import SessionHealthState
from app.sessions.repository import SessionFilter, SessionReader, SessionRepository
from app.sessions.schemas import (
    AppendedTurn,
    Session,
    SessionConfig,
    SessionContext,
    SessionDeletion,
    SessionEventPage,
    SessionPage,
    TurnCreate,
    TurnPage,
)
from app.sessions.service import IdentityRejected, SessionReads, SessionService
from app.sessions.types import SessionStrategy
from app.validation import PathScopeId, ScopeId

router = APIRouter(prefix="/v1/sessions", tags=["sessions"])

SessionId = Annotated[PathScopeId, Path(
    description="The client's id for the session (1 to 255 characters, no '/', not '.' "
                "or '..').")]


def _service(request: Request, session: SessionDep, caller: CallerDep) -> SessionService:
    settings = request.app.state.resources.settings
    return SessionService(SessionRepository(session, caller.tenant_id,
                                            max_events=settings.session_max_events),
                          strategy=settings.session_strategy, folds=fold_policy(settings),
                          retention=retention(settings))


async def _reads(request: Request, caller: CallerDep) -> SessionReads:
    # No request session: each read is one statement on the reads' own pool.
    resources = request.app.state.resources
    reader = SessionReader(await resources.memory_reader(), caller.tenant_id)
    settings = resources.settings
    return SessionReads(reader, folds=fold_policy(settings),
                        budget_tokens=settings.session_budget_tokens,
                        retention=retention(settings))


PAGE_PARAMS = frozenset({"limit", "cursor"})
LIST_PARAMS = PAGE_PARAMS | {"user_id", "agent_id", "strategy", "health"}


@router.get("", operation_id="listSessions", summary="List sessions, newest first",
            response_model=SessionPage, responses=problems())
async def list_sessions(
    request: Request, caller: CallerDep,
    user_id: Annotated[ScopeId | None, Query()] = None,
    agent_id: Annotated[ScopeId | None, Query()] = None,
    strategy: Annotated[SessionStrategy | None, Query()] = None,
    health: Annotated[SessionHealthState | None, Query(
        description="The summariser's health, e.g. `degraded`.")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=CURSOR_MAX_CHARS)] = None,
) -> SessionPage:
    refuse_unknown_params(request, LIST_PARAMS)
    filters = SessionFilter(user_id=user_id, agent_id=agent_id, strategy=strategy,
                            health=health)
    return await (await _reads(request, caller)).list(filters, limit, cursor)


@router.post(
    "/{session_id}/turns", operation_id="appendTurn", summary="Append a turn to a session",
    status_code=201, response_model=AppendedTurn, responses=problems(409, 410),
    description="Creates the session on its first turn, with the configured context "
    "strategy. A turn naming another user or agent than the session's is refused with "
    "409 and recorded as an event. The log is append-only.",
)
async def append_turn(
    session_id: SessionId, body: TurnCreate, request: Request, session: SessionDep,
    caller: CallerDep, idempotency_key: IdempotencyKey = None,
) -> Response:
    service = _service(request, session, caller)

    def canonical() -> dict[str, Any]:
        return {"session_id": session_id, **canonical_body(body)}

    def earlier() -> list[dict[str, Any]]:
        return [{"session_id": session_id, **earlier_body(body)}]

    # A retry of an answered append is only replayed: admitting it first would create the
    # session again had it been deleted since.
    if await answered_before(request, session, caller, idempotency_key, "appendTurn",
                             canonical, earlier):
        return await keyed_create(request, session, caller, idempotency_key, "appendTurn",
                                  canonical, _never_produced, earlier=earlier)
    admitted = await service.admit(session_id, body)
    if isinstance(admitted, IdentityRejected):
        # Answered, not raised: the request's transaction commits the recorded event.
        return problem_response(409, "session_identity_conflict", "Session identity conflict",
                                admitted.detail, admitted.errors)
    state = admitted

    async def produce() -> tuple[int, Any]:
        return 201, (await service.append(state, body)).model_dump(mode="json")

    return await keyed_create(request, session, caller, idempotency_key, "appendTurn",
                              canonical, produce, earlier=earlier,
                              names=lambda _: named_sessions([session_id]))


async def _never_produced() -> tuple[int, Any]:
    # The key's record, read in this transaction, holds the answer: keyed_create replays it.
    raise AssertionError("an answered append was produced again")


@router.put(
    "/{session_id}", operation_id="configureSession",
    summary="Create a session with a context strategy, or change its strategy",
    response_model=Session, responses={
        201: {"model": Session, "description": "Created"}, **problems()},
)
async def configure_session(session_id: SessionId, body: SessionConfig, request: Request,
                            session: SessionDep, caller: CallerDep) -> Response:
    created, answer = await _service(request, session, caller).configure(session_id, body)
    return JSONResponse(answer.model_dump(mode="json"), status_code=201 if created else 200)


@router.get("/{session_id}/turns", operation_id="listTurns",
            summary="A session's log, newest first: every turn, summarised or not",
            response_model=TurnPage, responses=problems(404))
async def list_turns(
    session_id: SessionId, request: Request, caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=CURSOR_MAX_CHARS)] = None,
) -> TurnPage:
    refuse_unknown_params(request, PAGE_PARAMS)
    return await (await _reads(request, caller)).turns(session_id, limit, cursor)


@router.get("/{session_id}/context", operation_id="getSessionContext",
            summary="What an agent puts in its prompt for this session",
            response_model=SessionContext, responses=problems(404))
async def get_session_context(
    session_id: SessionId, request: Request, caller: CallerDep,
    budget_tokens: Annotated[int | None, Query(
        ge=1, le=1_000_000, description="This call's budget in estimated tokens (4 ASCII "
        "characters each, 1 for any other); default ENGRAM_SESSION_BUDGET_TOKENS.")] = None,
) -> SessionContext:
    # A misspelt budget (`?budget=500`) would answer the default budget's context.
    refuse_unknown_params(request, frozenset({"budget_tokens"}))
    return await (await _reads(request, caller)).context(session_id, budget_tokens)


@router.get("/{session_id}", operation_id="getSession",
            summary="A session's cursor, counts, strategy and health",
            response_model=Session, responses=problems(404))
async def get_session(session_id: SessionId, request: Request, caller: CallerDep) -> Session:
    return await (await _reads(request, caller)).get(session_id)


@router.delete("/{session_id}", operation_id="deleteSession",
               summary="Delete a session with its turns, summary and events",
               status_code=204, response_class=Response, responses=problems(404),
               description="Memories stored with this `session_id` are not touched: they are "
               "deleted through the memory endpoints.")
async def delete_session(session_id: SessionId, request: Request, session: SessionDep,
                         caller: CallerDep) -> Response:
    await _service(request, session, caller).delete(session_id)
    return Response(status_code=204)


@router.delete(
    "", operation_id="deleteSessions", summary="Delete every session of a user or an agent",
    response_model=SessionDeletion, responses=problems(),
    description="Deletes the sessions whose identity is this user, this agent, or both, "
                "each with its turns, summary and events, all at once. Naming neither is "
                "422. A session that never named a user or an agent is deleted by its id. "
                "Memories are not sessions: `deleteMemories` forgets them.")
async def delete_sessions(
    request: Request, session: SessionDep, caller: CallerDep,
    user_id: Annotated[ScopeId | None, Query()] = None,
    agent_id: Annotated[ScopeId | None, Query()] = None,
) -> SessionDeletion:
    refuse_unknown_params(request, frozenset({"user_id", "agent_id"}))
    return SessionDeletion(deleted=await _service(request, session, caller).delete_of(
        user_id=user_id, agent_id=agent_id))


@router.get("/{session_id}/events", operation_id="listSessionEvents",
            summary="A session's events, newest first: health changes, dropped folds, "
                    "refused turns",
            response_model=SessionEventPage, responses=problems(404))
async def list_session_events(
    session_id: SessionId, request: Request, caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=CURSOR_MAX_CHARS)] = None,
) -> SessionEventPage:
    refuse_unknown_params(request, PAGE_PARAMS)
    return await (await _reads(request, caller)).events(session_id, limit, cursor)
