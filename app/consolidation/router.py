"""HTTP routes of the consolidation endpoints: parse, call the service, shape the answer."""

from __future__ import annotations

import uuid
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import JSONResponse

from app.consolidation.repository import RunFilter
from app.consolidation.schemas import (
    ConsolidationPage,
    ConsolidationRequest,
    ConsolidationResult,
    ConsolidationStatus,
    ConsolidationTrigger,
)
from app.consolidation.service import ConsolidationService
from app.cursors import CURSOR_MAX_CHARS
from app.deps import CallerDep, SessionDep, problems, refuse_unknown_params
from app.errors import CUT_DETAIL
from app.models import SCOPE_COLUMNS
from app.validation import ScopeId

# The run's own address, on both answers of a POST (the run is recorded either way).
RUN_LOCATION = {"description": "`/v1/consolidations/{id}`: the run, to read again.",
                "schema": {"type": "string"}, "required": True}

router = APIRouter(prefix="/v1/consolidations", tags=["consolidation"])

RUN_LIST_PARAMS = frozenset({"status", "trigger", "user_id", "agent_id", "session_id",
                             "namespace", "limit", "cursor"})


def _service(request: Request, session: SessionDep, caller: CallerDep) -> ConsolidationService:
    return ConsolidationService(request.app.state.resources, session, caller.tenant_id)


@router.post(
    "", operation_id="runConsolidation", summary="Fold memories into summaries",
    response_model=ConsolidationResult, status_code=200, responses={
        200: {"headers": {"Location": RUN_LOCATION}},
        202: {"model": ConsolidationResult, "headers": {"Location": RUN_LOCATION},
              "description": "Accepted (`async`): the run proceeds in the background"},
        **problems(404, 409, 502),
    },
    description="Runs the selector, then the op on each group, then writes each group in "
    "its own transaction (summary first, then the sources are archived). A second run on "
    "a scope while one is running is refused with 409; it never waits. A queued `async` "
    "run takes its scope when a worker starts it: a run that starts on the scope before "
    "then runs first, and the queued one folds what is left.",
)
async def run_consolidation(body: ConsolidationRequest, request: Request, session: SessionDep,
                            caller: CallerDep) -> Response:
    def on_cut(detail: str) -> None:
        request.scope.setdefault("state", {})[CUT_DETAIL] = detail

    status, result = await _service(request, session, caller).run(body, on_cut)
    headers = {"Location": f"/v1/consolidations/{result.id}"}
    return JSONResponse(result.model_dump(mode="json", by_alias=True), status_code=status,
                        headers=headers)


@router.get("/{run_id}", operation_id="getConsolidation", summary="Read one consolidation run",
            response_model=ConsolidationResult, responses=problems(404))
async def get_consolidation(run_id: uuid.UUID, request: Request, session: SessionDep,
                            caller: CallerDep) -> ConsolidationResult:
    return await _service(request, session, caller).get(run_id)


@router.get("", operation_id="listConsolidations", summary="List consolidation runs, newest first",
            response_model=ConsolidationPage, responses=problems())
async def list_consolidations(
    request: Request, session: SessionDep, caller: CallerDep,
    status: Annotated[ConsolidationStatus | None, Query(
        description="Only runs with this status (`running` includes queued runs)")] = None,
    trigger: Annotated[ConsolidationTrigger | None, Query(
        description="Only runs a request made (`api`) or automatic ones (`auto`)")] = None,
    user_id: Annotated[ScopeId | None, Query(
        description="Only runs whose request named this user")] = None,
    agent_id: Annotated[ScopeId | None, Query(
        description="Only runs whose request named this agent")] = None,
    session_id: Annotated[ScopeId | None, Query(
        description="Only runs whose request named this session")] = None,
    namespace: Annotated[ScopeId | None, Query(
        description="Only runs whose request named this namespace")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=CURSOR_MAX_CHARS)] = None,
) -> ConsolidationPage:
    refuse_unknown_params(request, RUN_LIST_PARAMS)
    named = (user_id, agent_id, session_id, namespace)
    scope = {column: value for column, value in zip(SCOPE_COLUMNS, named, strict=True)
             if value is not None}
    return await _service(request, session, caller).list(
        RunFilter(status=status, trigger=trigger, scope=scope), limit=limit, cursor=cursor)


@router.post("/{run_id}/revert", operation_id="revertConsolidation",
             summary="Undo an archive-mode run: restore its sources, delete its summaries",
             response_model=ConsolidationResult, responses=problems(404, 409))
async def revert_consolidation(run_id: uuid.UUID, request: Request, session: SessionDep,
                               caller: CallerDep) -> ConsolidationResult:
    return await _service(request, session, caller).revert(run_id)
