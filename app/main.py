"""create_app(settings) and the lifespan that opens and closes the process's resources."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI

from app.consolidation.router import router as consolidation_router
from app.deps import check_params
from app.embedded_db import keep_running
from app.errors import Problem, install_error_handlers
from app.failure import OPERATIONAL, describe
from app.log_throttle import flush_all
from app.maintenance import start_maintenance
from app.memories.router import router as memories_router
from app.resources import Resources, build_resources
from app.search.router import router as search_router
from app.service import slash_redirect
from app.service.admission import AdmissionMiddleware
from app.service.body_limit import BodyLimitMiddleware
from app.service.caller_gate import CallerGateMiddleware
from app.service.head import HeadAsGetMiddleware
from app.service.host_gate import HostGateMiddleware, HostRule
from app.service.metrics import MetricsMiddleware
from app.service.request_id import RequestIdMiddleware
from app.service.router import router as service_router
from app.service.shutdown import (
    CUT_ANSWER_SECONDS,
    RequestsInFlight,
    ShutdownCutMiddleware,
    ShutdownSignal,
)
from app.service.unsupported_asks import UnsupportedAsksMiddleware
from app.service.write_deadline import WriteDeadlineMiddleware
from app.sessions.router import router as sessions_router
from app.settings import Settings
from app.worker.lifecycle import WORKER_GRACE_SECONDS, start_background_work

log = logging.getLogger("engram")

API_DESCRIPTION = """Engram stores what AI agents want to remember and finds it again.

Errors are `application/problem+json` (RFC 9457); a 422 names each bad field (`errors`),
including a query parameter that takes one value given twice (`tags` and `categories`
take several). Authenticate with `Authorization: Bearer <api key>` when the service runs
with authentication on.

Every answer carries an `X-Request-ID` header: the request's own when it sent one (1-128
characters of letters, digits and `._:-`), else a new one. The service's log lines written
while the request ran carry it, and so does a problem body (`request_id`); so do the
calls it makes to the embeddings API and the LLM, and the jobs it queues (as
`<request id>.job-<job id>`).

A 429 (`rate_limited`, `concurrency_limited`: the tenant's limits) changed nothing and
carries `Retry-After`: wait that many seconds, then retry. So does a 503, when it carries
the header, with one exception: 503 `outcome_unknown` says the database stopped answering
while the change was committed, so it may have been applied; retry a create with the same
`Idempotency-Key`, and read other changes back first. A 403 (`tenant_suspended`) says an
operator has suspended the tenant: nothing was read or changed, and retrying will not help
until it is resumed."""


class StartupRefused(RuntimeError):
    """The service cannot start; its reason is logged on one line."""


def freeze_startup_objects() -> None:
    """Keep what start-up built out of the collector's full passes. The process holds
    a few hundred thousand long-lived objects (FastAPI, SQLAlchemy, pydantic, the model's
    runtime); every full pass walked them all, ~150 ms with the event loop stopped, once
    every ~15 listings of 500 memories (bench/reads.py: p95 143-209 ms against p50 34-86).
    Collected first, so only live objects are frozen."""
    gc.collect()
    gc.freeze()


def create_app(settings: Settings | None = None, resources: Resources | None = None) -> FastAPI:
    """Build the app. Given `resources` (tests), the lifespan neither opens nor closes them."""
    settings = settings or (resources.settings if resources else Settings())
    in_flight = RequestsInFlight()
    shutdown_signal = ShutdownSignal()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if resources is not None:
            yield
            return
        try:
            opened = await build_resources(settings)
        except OPERATIONAL as exc:
            # An operator's decision or the surroundings (a database it cannot reach, a
            # refused setting), not a fault: one line saying what. Raised without its
            # chain, uvicorn's traceback after it is a few lines, not ~12 KB.
            reason = describe(exc, settings)
            log.error("cannot start: %s", reason)
            raise StartupRefused(reason) from None
        app.state.resources = opened
        start_maintenance(opened)
        if opened.embedded is not None and settings.embedded_watch_seconds > 0:
            opened.background.append(asyncio.create_task(
                keep_running(opened.embedded, settings.embedded_watch_seconds)))
        background = await start_background_work(opened)
        # Signalled, the jobs stop within the requests' own grace (app/service/shutdown.py).
        signalled = shutdown_signal.bind()
        grace = settings.shutdown_grace_seconds or WORKER_GRACE_SECONDS

        async def stop_when_signalled() -> None:
            await signalled.wait()
            log.info("stopping: no new background job is taken; those running get %.0f s",
                     grace)
            await background.stop(grace)

        stopping = asyncio.create_task(stop_when_signalled())
        freeze_startup_objects()
        log.info("engram ready at http://%s:%d (database: %s, embedder: %s, %s)",
                 settings.host, settings.port, opened.database_label, opened.embedder.name,
                 opened.embedder.vector_space)
        try:
            yield
        finally:
            # uvicorn comes here as soon as it has cut the requests past the grace, not
            # once they have answered (app/service/shutdown.py).
            if not await in_flight.none_left(CUT_ANSWER_SECONDS):
                log.warning("%d request(s) cut by the shutdown did not answer within %.0f s; "
                            "their connections close unanswered", in_flight.count,
                            CUT_ANSWER_SECONDS)
            if signalled.is_set():
                await stopping
            else:
                stopping.cancel()
                await background.stop()
            await opened.close()
            flush_all()  # what the throttled lines held back, before the process goes

    app = FastAPI(title="Engram", version="0.1.0", description=API_DESCRIPTION,
                  lifespan=lifespan)
    app.state.shutdown_signal = shutdown_signal
    if resources is not None:
        app.state.resources = resources
    install_error_handlers(app)
    app.include_router(service_router)
    api_routers = (memories_router, search_router, consolidation_router, sessions_router)
    for router in api_routers:
        app.include_router(router, dependencies=[Depends(check_params)])
    slash_redirect.install(app)
    # Innermost: the metrics count, and the request id marks, a request the shutdown cut
    # and one refused for want of a slot, or for a body past the bound (refused by its
    # length before it takes a slot). The shutdown's layer is outside the admission's, so
    # a request still waiting for a slot when the shutdown cuts it is answered too (it
    # got uvicorn's bare 500 and a traceback).
    # Inside the admission's layer: a request's key and its tenant's limits are settled
    # in the slot it took, before its body is read; and a large answer keeps the slot
    # while it goes out.
    app.add_middleware(WriteDeadlineMiddleware,
                       timeout_seconds=settings.response_write_timeout_seconds)
    app.add_middleware(CallerGateMiddleware)
    app.add_middleware(AdmissionMiddleware, limit=settings.max_concurrent_requests,
                       wait_seconds=settings.request_queue_seconds)
    app.add_middleware(ShutdownCutMiddleware, in_flight=in_flight)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_mb * 2**20,
                       timeout_seconds=settings.request_body_timeout_seconds)
    # Before anything is read or admitted: a request addressed to a name the service does
    # not answer to, or a foreign page's with authentication off, is answered at once.
    app.add_middleware(UnsupportedAsksMiddleware)
    app.add_middleware(HostGateMiddleware, rule=HostRule.of(
        auth_enabled=settings.auth_enabled, allowed_hosts=settings.allowed_host_names))
    app.add_middleware(MetricsMiddleware, routes=[
        route for router in (service_router, *api_routers) for route in router.routes])
    app.add_middleware(RequestIdMiddleware)
    # Outermost: every layer sees a HEAD as the GET it is answered as.
    app.add_middleware(HeadAsGetMiddleware)
    _declare_problem_schema(app)
    return app


REQUEST_ID_HEADER = {
    "description": "The request's id: the one it sent (1-128 letters, digits and `._:-`), "
                   "else a new one. Log lines and problem bodies (`request_id`) carry it.",
    "schema": {"type": "string", "maxLength": 128},
    "required": True,
}


# Headers some answers carry, by status, besides X-Request-ID.
RETRY_AFTER = {"schema": {"type": "integer", "minimum": 0}}
STATUS_HEADERS: dict[str, dict[str, dict[str, object]]] = {
    "401": {"WWW-Authenticate": {
        "description": "`Bearer`: the scheme the service authenticates with.",
        "schema": {"type": "string"}, "required": True}},
    "429": {"Retry-After": {
        **RETRY_AFTER, "required": True,
        "description": "Whole seconds until a request of the tenant's would be admitted."}},
    "503": {"Retry-After": {
        **RETRY_AFTER, "required": False,
        "description": "Whole seconds to wait before retrying, when retrying is safe and "
                       "helps (not with `outcome_unknown`)."}},
    "415": {
        "Accept-Encoding": {
            "description": "`identity`, with a body sent in a content coding: the one read.",
            "schema": {"type": "string"}, "required": False},
        "Accept-Patch": {
            "description": "`application/json`, with a patch document of another format.",
            "schema": {"type": "string"}, "required": False}},
}


REPLAYED_HEADER = {
    "description": "`true` when this is the stored answer of an earlier request with the "
                   "same Idempotency-Key (app/idempotency); absent otherwise.",
    "schema": {"type": "string", "enum": ["true"]},
    "required": False,
}


def _declare_problem_schema(app: FastAPI) -> None:
    """Make `Problem` a named component even for routes that only reference it by $ref,
    declare the `X-Request-ID` header (app/service/request_id.py) on every answer,
    `WWW-Authenticate` on a 401 and `Retry-After` on a 429 and a 503, and
    `Idempotent-Replayed` on the successes of every operation that takes a key."""
    original = app.openapi

    def openapi() -> dict[str, object]:
        if app.openapi_schema is None:
            schema = original()
            components = schema.setdefault("components", {})
            schemas = components.setdefault("schemas", {})
            problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
            schemas.update(problem.pop("$defs", {}))
            schemas["Problem"] = problem
            components.setdefault("headers", {})["X-Request-ID"] = REQUEST_ID_HEADER
            components["headers"]["Idempotent-Replayed"] = REPLAYED_HEADER
            for operations in schema.get("paths", {}).values():
                for operation in operations.values():
                    keyed = any(p.get("in") == "header" and p.get("name") == "Idempotency-Key"
                                for p in operation.get("parameters", ()))
                    for status, response in operation.get("responses", {}).items():
                        headers = response.setdefault("headers", {})
                        headers["X-Request-ID"] = {"$ref": "#/components/headers/X-Request-ID"}
                        headers.update(STATUS_HEADERS.get(str(status), {}))
                        # 410: the stored answer of a key whose answer was erased.
                        if keyed and (str(status).startswith("2") or str(status) == "410"):
                            headers["Idempotent-Replayed"] = {
                                "$ref": "#/components/headers/Idempotent-Replayed"}
            name_tagged_unions(schemas)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]


def name_tagged_unions(schemas: dict[str, Any]) -> None:
    """Make each tagged union a property holds (a `oneOf` with a discriminator) a named
    component, after the property's title (`Selector`, `Op`), referenced wherever it is
    used. Pydantic writes the union inline at every use, and a generator then made a class
    per use: a Java client could not pass a run's `composition.selector` back as a new
    request's `selector` (an exploratory probe with openapi-generator)."""
    named: dict[str, str] = {}
    for owner in list(schemas.values()):
        for prop in owner.get("properties", {}).values():
            nullable = prop.get("anyOf")
            for holder, key in ([(nullable, i) for i in range(len(nullable))] if nullable
                                else [(prop, None)]):
                union = holder[key] if key is not None else holder
                if "oneOf" not in union or "discriminator" not in union:
                    continue
                shape = {k: union[k] for k in ("oneOf", "discriminator")}
                signature = json.dumps(shape, sort_keys=True)
                if signature not in named:
                    name = str(prop.get("title", "Union")).replace(" ", "")
                    while name in schemas:
                        name += "Union"
                    schemas[name] = {**shape, "title": name}
                    named[signature] = name
                ref = {"$ref": f"#/components/schemas/{named[signature]}"}
                if key is not None:
                    holder[key] = ref
                else:
                    for k in ("oneOf", "discriminator"):
                        prop.pop(k)
                    prop.update(ref)
