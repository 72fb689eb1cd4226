"""Settles who an API request is, and admits its tenant, before its body is read.

FastAPI reads a request's whole body before it runs any dependency, so with the key
checked by a dependency a client with no key held one of the process's slots for as
long as it kept a body coming (64 such connections stalled the service, and 60 MiB
bodies one byte short made it hold gigabytes), and a tenant's requests past its share
each held a slot until their bodies arrived. Here, inside the admission's layer, only the
headers are read: a missing or wrong key, a suspended tenant, and a tenant past its rate
or its share are answered at once, and the request's slot is free again.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.auth import settle_caller
from app.errors import DATABASE_FAILURES, AppError, app_error_response, unexpected_problem

API_PREFIX = "/v1/"


class CallerGateMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(API_PREFIX):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        try:
            await settle_caller(request)
        except AppError as exc:
            await app_error_response(exc)(scope, receive, send)
            return
        except DATABASE_FAILURES as exc:
            # The key's lookup met the database down or slow: the 503 the routes answer.
            # Raised on from here it reached only Starlette's outermost handler, which
            # answers and raises again: counted a 500, logged with a traceback.
            await (await unexpected_problem(request, exc))(scope, receive, send)
            return
        await self.app(scope, receive, send)
