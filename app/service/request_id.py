"""Request ids: each HTTP request's `X-Request-ID` (the caller's, when it is a safe token,
else a new one), answered in the same header, named in a problem body, in every log line
written while the request runs and on the calls it makes to the LLM and embeddings
endpoints, so a client's failed call leads to its log lines and to theirs. A background
job runs under an id of its own, prefixed by the id of the request that queued it."""

from __future__ import annotations

import logging
import os
import re
from contextvars import ContextVar

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = "x-request-id"
_HEADER_BYTES = HEADER.encode()
# What a log line can carry verbatim: no spaces, quotes or line breaks to forge a line
# with, and no longer than a trace id with some prefix.
_SAFE = re.compile(rb"[A-Za-z0-9._:\-]{1,128}")

# Set for the rest of the request's task (uvicorn runs each request in a task of its
# own), so the 500 handler, which runs outside every middleware, still sees it.
REQUEST_ID: ContextVar[str | None] = ContextVar("request_id", default=None)


def current() -> str | None:
    return REQUEST_ID.get()


def for_job(job_id: int, queued_by: object) -> str:
    """A background job's id for its log lines and upstream calls: the id of the request
    that queued it, when one did, then the job's, so searching the logs for a request's
    id finds the async work it started too."""
    job = f"job-{job_id}"
    return f"{queued_by}.{job}" if isinstance(queued_by, str) and queued_by else job


def outgoing() -> dict[str, str]:
    """The header that passes the current request's id on to an upstream HTTP call."""
    rid = REQUEST_ID.get()
    return {"X-Request-ID": rid} if rid is not None else {}


def _chosen(scope: Scope) -> str:
    for name, value in scope["headers"]:
        if name == _HEADER_BYTES and _SAFE.fullmatch(value):
            return bytes(value).decode()
    return os.urandom(16).hex()


class RequestIdMiddleware:
    """Pure ASGI, like the metrics layer: no task per request on the hot path."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request_id = _chosen(scope)
        REQUEST_ID.set(request_id)
        header = (_HEADER_BYTES, request_id.encode())

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        await self.app(scope, receive, send_with_id)


# Loggers whose records are never a request's: asyncpg's pool restores its connections
# in a task it starts inside whichever request found one missing, and that task keeps the
# request's context, so an outage's retries carried one request's id long after it ended
# (an observability probe).
_NO_REQUEST = ("asyncpg.pool",)


class RequestIdFilter(logging.Filter):
    """Gives every record a `request_id` (`-` outside a request) for the log format."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = "-" if record.name in _NO_REQUEST else (REQUEST_ID.get() or "-")
        return True
