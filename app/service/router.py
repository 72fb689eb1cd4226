"""`/healthz`, `/readyz` and `/metrics`."""

from __future__ import annotations

import asyncio
import logging

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel
from sqlalchemy import text

from app.deps import EVERY_PATH, problem_responses
from app.errors import DatabaseUnavailable, describe
from app.migrate import current_revisions, head_revision, newer_schema
from app.service.metrics import render_metrics

router = APIRouter(tags=["service"])
log = logging.getLogger("engram.health")


class Health(BaseModel):
    status: str


class Readiness(BaseModel):
    status: str
    database: str
    schema_revision: str | None
    head_revision: str | None


@router.get("/healthz", operation_id="getHealth", summary="The process is alive",
            response_model=Health, responses=problem_responses(*EVERY_PATH))
async def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", operation_id="getReadiness",
            summary="The database answers and the schema is at head", response_model=Readiness,
            responses={**problem_responses(*EVERY_PATH),
                       503: {"description": "Not ready",
                             "content": {"application/problem+json": {
                                 "schema": {"$ref": "#/components/schemas/Problem"}}}}})
async def readyz(request: Request) -> Readiness:
    engine = request.app.state.resources.engine
    try:
        async with asyncio.timeout(5):
            async with engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
            current = await current_revisions(engine)
    except Exception as exc:
        log.warning("readiness check failed: %s", describe(exc))
        raise DatabaseUnavailable("the database could not be reached") from exc
    head = head_revision()
    if head not in current:
        raise DatabaseUnavailable(newer_schema(current) or (
            f"the schema is at {sorted(current) or 'nothing'}, not at head {head}; "
            "run `python -m app migrate` (`make migrate`)"))
    return Readiness(status="ready", database="ok", schema_revision=head, head_revision=head)


@router.get("/metrics", operation_id="getMetrics", summary="Prometheus metrics",
            response_class=Response,
            responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}},
                       **problem_responses(*EVERY_PATH)})
async def metrics() -> Response:
    body, content_type = render_metrics()
    return Response(body, media_type=content_type)
