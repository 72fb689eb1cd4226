"""Shared request dependencies: the caller's session and the error responses routes declare."""

from __future__ import annotations

import json
from typing import Annotated, Any
from urllib.parse import unquote, unquote_to_bytes

from fastapi import Depends, Request
from fastapi.dependencies.models import Dependant
from sqlalchemy.ext.asyncio import AsyncSession

from app.auth import Caller, current_caller
from app.db import request_session
from app.errors import NOT_UTF8_BODY, PROBLEM_JSON, ValidationFailed, json_content_type

SessionDep = Annotated[AsyncSession, Depends(request_session, scope="function")]
CallerDep = Annotated[Caller, Depends(current_caller)]


async def check_params(request: Request) -> None:
    """The checks of every /v1 request's parameters, as one dependency of every /v1
    router (each dependency costs FastAPI ~9 us a request); `async` so that FastAPI runs
    it on the event loop, not on a worker thread (a hand-off per request)."""
    refuse_undecodable_params(request)  # the path's too
    await refuse_body_not_utf8(request)
    if not request.scope.get("query_string"):
        return  # most requests (a search, a create) have none
    refuse_repeated_params(request)
    refuse_params_where_none_are_taken(request)


# What `json.loads` reads bytes as, by `json.detect_encoding`, when they are UTF-8.
_UTF8 = frozenset({"utf-8", "utf-8-sig"})


async def refuse_body_not_utf8(request: Request) -> None:
    """A JSON body in UTF-16 or UTF-32 is refused as one in Latin-1 is (RFC 8259 8.1:
    JSON exchanged is UTF-8). Python's parser, given bytes, reads them as UTF-16 or -32
    when they begin with that BOM or with NULs, so such a body was read and stored. A
    UTF-8 BOM it skips, which RFC 8259 allows. The parser has run by now (FastAPI reads
    the body before any dependency) and nothing of the body has been acted on; its guess
    is repeated on the first 4 bytes, all it looks at, so the cost is the same for any
    body."""
    if getattr(request.scope.get("route"), "body_field", None) is None:
        return  # the route takes no body, so FastAPI has neither read nor parsed one
    body = await request.body()  # kept by the request since FastAPI read it
    encoding = json.detect_encoding(body[:4])
    if encoding in _UTF8 or not json_content_type(request.headers.get("content-type")):
        return  # another type's body FastAPI passes on unparsed, and refuses as not JSON
    raise ValidationFailed.on("body", f"{NOT_UTF8_BODY}: it looks like {encoding.upper()}")


# Whether a route declares any query parameter, kept on the route (routes are not
# hashable) once read.
_TAKES_QUERY = "engram_takes_query"


def refuse_params_where_none_are_taken(request: Request) -> None:
    """A route that takes no query parameter refuses any: `DELETE /v1/memories/{id}
    ?user_id=alice` deleted Bob's memory, its would-be guard silently ignored. Routes that
    take some check theirs (`refuse_unknown_params`)."""
    route = request.scope.get("route")
    if route is None:
        return
    takes = getattr(route, _TAKES_QUERY, None)
    if takes is None:
        takes = _declares_query(route.dependant)
        setattr(route, _TAKES_QUERY, takes)
    if not takes:
        refuse_unknown_params(request, frozenset())


def _declares_query(dependant: Dependant) -> bool:
    return bool(dependant.query_params) or any(
        _declares_query(sub) for sub in dependant.dependencies)


def refuse_repeated_params(request: Request) -> None:
    """A query parameter that takes one value, given more than once, is refused rather
    than one of its values silently used: `DELETE /v1/memories?user_id=a&user_id=b` would
    otherwise delete only b's memories. Parameters that take a list (`tags`, ...) repeat
    by design."""
    params = request.query_params
    if len(params.multi_items()) == len(params):
        return  # nothing repeated: the usual request never looks further
    lists = _list_params(request)
    for name in params:
        if name not in lists and len(params.getlist(name)) > 1:
            raise ValidationFailed.on(f"query.{name}", "is given more than once; it takes "
                                                       "one value")


def refuse_undecodable_params(request: Request) -> None:
    """A path or query parameter whose %-escapes are not UTF-8 is refused. Starlette
    decodes them with U+FFFD for each bad byte, so `caf%E9` and `caf%E8` (a Latin-1
    client's) were both read as `caf\ufffd`: the same session, the same user's memories
    to list or delete."""
    query = request.scope.get("query_string", b"")
    if b"%" in query:
        for pair in query.split(b"&"):
            name, _, value = pair.partition(b"=")
            for part in (name, value):
                if not _utf8(part.replace(b"+", b" ")):
                    raise ValidationFailed.on(
                        f"query.{unquote(name.decode('latin-1'))}", _NOT_UTF8)
    raw_path = request.scope.get("raw_path") or b""
    if b"%" in raw_path and b"%2f" in raw_path.lower():
        # The path is routed decoded, so `/v1/sessions/a%2Fturns` (the session "a/turns")
        # was answered as session a's turns: an id never holds a "/".
        raise ValidationFailed.on("path", "holds an encoded '/' (%2F): an id cannot hold "
                                          "a '/'")
    if b"%" in raw_path and not _utf8(raw_path):
        bad = [name for name, value in request.path_params.items()
               if isinstance(value, str) and "\ufffd" in value]
        raise ValidationFailed.on(f"path.{bad[0]}" if bad else "path", _NOT_UTF8)


_NOT_UTF8 = "is not valid UTF-8 once its %-escapes are decoded (encode text as UTF-8)"


def _utf8(escaped: bytes) -> bool:
    try:
        unquote_to_bytes(escaped).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _list_params(request: Request) -> frozenset[str]:
    """The query parameters of the request's operation that take a list, as its OpenAPI
    document declares them (built once per app, at the first repeated parameter)."""
    app = request.app
    by_operation: dict[tuple[str, str], frozenset[str]] | None = getattr(
        app.state, "list_params", None)
    if by_operation is None:
        by_operation = {
            (path, method.upper()): frozenset(
                p["name"] for p in operation.get("parameters", ())
                if p["in"] == "query" and _is_array(p.get("schema", {})))
            for path, item in app.openapi()["paths"].items()
            for method, operation in item.items()
        }
        app.state.list_params = by_operation
    route = request.scope.get("route")
    return by_operation.get((getattr(route, "path", ""), request.method), frozenset())


def _is_array(schema: dict[str, Any]) -> bool:
    return schema.get("type") == "array" or any(
        option.get("type") == "array" for option in schema.get("anyOf", ()))


def refuse_unknown_params(request: Request, known: frozenset[str]) -> None:
    """A query string may hold only the route's own parameters: a misspelt filter would
    otherwise be ignored and answer the unfiltered list."""
    unknown = sorted(set(request.query_params) - known)
    if unknown:
        raise ValidationFailed.on(f"query.{unknown[0]}", "is not a known parameter")


# What any path can get, answered before the request reaches a route.
EVERY_PATH = (400, 403, 414, 421, 431)


def problems(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` declaring problem+json for each status a /v1 route can return:
    `statuses` and those every one can."""
    wanted = {401, 403, 408, 412, 413, 415, 422, 429, 500, 501, 503, *EVERY_PATH, *statuses}
    if 502 in wanted:
        # A route that calls a provider can see it fail (502) or time out (504).
        wanted.add(504)
    return problem_responses(*wanted)


def problem_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` declaring problem+json for exactly these statuses."""
    descriptions = {
        400: "The Host header is missing, repeated or no host (`bad_request`), or the "
             "request is not HTTP/1.1; nothing was read or changed",
        401: "Missing or invalid API key",
        403: "An operator has suspended the caller's tenant (`tenant_suspended`; the "
             "detail gives the reason), or, with authentication off, the request came from "
             "a web page of another site (`cross_site_request`, by its Origin); nothing was "
             "read or changed",
        404: "Not found in the caller's tenant",
        408: "The request body did not arrive in time (`request_timeout`; "
             "ENGRAM_REQUEST_BODY_TIMEOUT_SECONDS, 60 s by default); nothing was changed",
        409: "Conflict",
        410: "The key's request was done, and what its answer named was since deleted, "
             "expired and purged, or its history erased or let go (`answer_erased`): the "
             "answer was erased with it, and nothing was done again",
        412: "`If-Match` names an entity tag (`precondition_failed`): the service gives "
             "none, so none can hold; nothing was changed (`If-Match: *` goes on)",
        413: "The request body is larger than the service reads (`payload_too_large`): "
             "1 MiB, or for a batch of memories ENGRAM_MAX_BODY_MB (64 MiB by default; "
             "split the batch)",
        415: "The body is in a content coding (`Content-Encoding`; `Accept-Encoding: "
             "identity` says the one read) or a patch format (`Accept-Patch: "
             "application/json`) the service does not read (`unsupported_media_type`); "
             "nothing was changed",
        422: "Invalid input; `errors` names each bad field",
        414: "The request's target (path and query) is longer than 64 KiB (`uri_too_long`), "
             "answered before the request reaches the service (with a request id of its "
             "own) and the connection closed",
        431: "The request's line and headers are larger than 1 MiB "
             "(`request_header_fields_too_large`), answered before the request reaches "
             "the service (with a request id of its own) and the connection closed",
        421: "The request names a host the service does not answer to "
             "(`host_not_allowed`): with authentication off a loopback name or address, "
             "else those in ENGRAM_ALLOWED_HOSTS if set; nothing was read or changed",
        429: "The tenant's requests came faster than its rate limit (`rate_limited`), "
             "or it had its share of the requests in flight (`concurrency_limited`); "
             "Retry-After says when to retry",
        500: "An unexpected error (`internal_error`): the request's open transaction was "
             "rolled back (a consolidation run keeps the groups it had committed, as its "
             "record shows); the service's log line with the same `request_id` says what "
             "failed",
        501: "A transfer coding besides chunked (`not_implemented`); nothing was changed",
        502: "An upstream provider failed",
        503: "The database or a provider is unavailable, every database connection "
             "stayed busy, a database statement ran past its time, or (`outcome_unknown`) "
             "the database stopped answering mid-commit, so the change may have been "
             "applied, (`shutting_down`) the service stopped the request as it shut "
             "down, (`overloaded`) too many requests were in flight (Retry-After), or "
             "(`database_disk_full`, `database_out_of_resources`) the database refused a "
             "statement for want of disk, memory or a limit, and nothing was written",
        504: "An upstream provider did not answer in time",
    }
    # No `model`: FastAPI would also declare application/json, which is never answered.
    return {
        status: {
            "description": descriptions.get(status, "Error"),
            "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
        }
        for status in sorted(set(statuses))
    }
