"""A path that differs from an operation's only by a trailing slash: a 307 to the
operation, its Location relative (RFC 9110 10.2.2 allows one).

Starlette's own redirect writes an absolute URL from the scheme and host the service
sees: `http://` behind a TLS proxy that does not pass its scheme on, which sent the client
out of TLS (or nowhere). A relative Location keeps whatever scheme and host the client
used. Taken where the router finds no route, so a request that matches one pays nothing.
"""

from __future__ import annotations

from urllib.parse import unquote

from fastapi import FastAPI
from starlette.responses import RedirectResponse
from starlette.routing import Match
from starlette.types import Receive, Scope, Send


def install(app: FastAPI) -> None:
    router = app.router
    router.redirect_slashes = False
    not_found = router.default

    async def default(scope: Scope, receive: Receive, send: Send) -> None:
        location = slash_twin(app, scope) if scope["type"] == "http" else None
        if location is None:
            await not_found(scope, receive, send)
            return
        await RedirectResponse(location, status_code=307)(scope, receive, send)

    router.default = default


def slash_twin(app: FastAPI, scope: Scope) -> str | None:
    """The request's path with its trailing slash added or taken away, with its query,
    if a route takes that path; else None."""
    path: str = scope["path"]
    if path == "/":
        return None
    twin = path.rstrip("/") if path.endswith("/") else path + "/"
    if not twin.startswith("/") or twin.startswith("//"):
        return None  # "//host" would be a Location on another host
    twin_scope = {**scope, "path": twin}
    if not any(route.matches(twin_scope)[0] is not Match.NONE for route in app.router.routes):
        return None
    # As the client wrote it (its %-escapes kept), the slash toggled the same way.
    raw: str = scope.get("raw_path", path.encode()).decode("latin-1")
    location = raw.rstrip("/") if path.endswith("/") else raw + "/"
    if unquote(location) != twin:  # as uvicorn decodes a path
        # A slash written `%2F` is part of a name, not the path's end: taking the literal
        # slashes off had left the target as it was, a 307 to itself, for ever.
        return None
    query: bytes = scope.get("query_string", b"")
    return f"{location}?{query.decode('latin-1')}" if query else location
