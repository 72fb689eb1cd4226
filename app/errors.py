"""The AppError family and the handlers that render every failure as problem+json."""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from typing import Any

import asyncpg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.log_throttle import Throttle
from app.service import request_id

log = logging.getLogger("engram.errors")

PROBLEM_JSON = "application/problem+json"
PROBLEM_BASE = "https://engram.dev/problems/"


class FieldError(BaseModel):
    field: str
    message: str


class Problem(BaseModel):
    """RFC 9457 problem details, as every 4xx/5xx answer carries them."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[FieldError] | None = None
    request_id: str | None = Field(
        default=None, description="The request's X-Request-ID: its log lines carry it.")


class AppError(Exception):
    status: int = 500
    code: str = "internal_error"
    title: str = "Internal error"
    retry_after: int | None = None  # seconds, sent as Retry-After

    def __init__(self, detail: str, *, errors: Sequence[FieldError] | None = None,
                 headers: Mapping[str, str] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.errors = list(errors) if errors is not None else None
        self.headers = dict(headers or {})  # sent besides the ones the status implies


class NotFound(AppError):
    status, code, title = 404, "not_found", "Not found"


class Conflict(AppError):
    status, code, title = 409, "conflict", "Conflict"


class Unauthorized(AppError):
    status, code, title = 401, "unauthorized", "Unauthorized"


INVALID_KEY = "the API key is not valid or has been revoked"


class TenantSuspended(AppError):
    """An operator has suspended the caller's tenant (`python -m app tenants suspend`)."""

    status, code, title = 403, "tenant_suspended", "Tenant suspended"


class ValidationFailed(AppError):
    status, code, title = 422, "validation_error", "Validation error"

    @classmethod
    def on(cls, field: str, message: str) -> ValidationFailed:
        return cls(f"{field}: {message}", errors=[FieldError(field=field, message=message)])


class ProviderError(AppError):
    """An upstream provider (embeddings API, LLM) failed or answered garbage."""

    status, code, title = 502, "provider_error", "Upstream provider failed"


class ProviderUnavailable(ProviderError):
    status, code, title = 503, "provider_unavailable", "Upstream provider unavailable"


class RateLimited(AppError):
    """The tenant's requests came faster than its limit (app/tenants/rate_limit.py)."""

    status, code, title = 429, "rate_limited", "Too many requests"

    def __init__(self, detail: str, *, retry_after: int) -> None:
        super().__init__(detail)
        self.retry_after = retry_after


class ConcurrencyLimited(AppError):
    """The tenant already had its share of the process's requests in flight
    (app/tenants/concurrency.py)."""

    status, code, title = 429, "concurrency_limited", "Too many requests"
    retry_after = 1


class DatabaseUnavailable(AppError):
    status, code, title = 503, "database_unavailable", "Database unavailable"
    retry_after = 1


class DatabaseBusy(AppError):
    """Every connection of a pool stayed taken for `db_pool_timeout_seconds`: the service
    is saturated, not broken, so the client is told to come back."""

    status, code, title = 503, "database_busy", "Database busy"
    retry_after = 1


def pool_wait_expired(seconds: float) -> DatabaseBusy:
    return DatabaseBusy(f"no database connection was free within {seconds:g} s; retry later")


class DatabaseOutOfResources(AppError):
    """The database refused a statement for want of a resource (SQLSTATE class 53): disk,
    memory or a configured limit. Not the request's fault, and not over in a second."""

    status, code, title = 503, "database_out_of_resources", "Database out of resources"
    retry_after = 30


class DatabaseDiskFull(DatabaseOutOfResources):
    code, title = "database_disk_full", "Database disk full"


class DatabaseTimeout(AppError):
    """A statement ran past `db_statement_timeout_seconds` (app/db_timeout.py): the
    database is stuck or overloaded, so the client is told to come back."""

    status, code, title = 503, "database_timeout", "Database timeout"
    retry_after = 1


def statement_timed_out(seconds: float) -> DatabaseTimeout:
    return DatabaseTimeout(
        f"a database statement did not finish within {seconds:g} s; retry later")


class OutcomeUnknown(AppError):
    """The database stopped answering while it committed a request's changes: they may
    have been applied, so the client, not the service, decides how to retry."""

    status, code, title = 503, "outcome_unknown", "Outcome unknown"
    retry_after = 1


def commit_unanswered() -> OutcomeUnknown:
    return OutcomeUnknown(
        "the database stopped answering while this request's changes were committed, so "
        "they may or may not have been applied; a retry with the same Idempotency-Key "
        "applies a create at most once, and other changes can be read back first")


CUT_DETAIL = "engram.cut_detail"
"""Set in a request's ASGI `state` by a handler whose work, cut by the shutdown, is not
simply undone (a consolidation run's written groups): what the shutdown's 503 says
instead of "retry it"."""

COMMIT_CUT = "engram.commit_cut"
"""Set in a request's ASGI `state` when the request is cancelled while its COMMIT is
awaited (app/db.py): the change may have been applied, so the shutdown's cut
(app/service/shutdown.py) answers OutcomeUnknown, not "retry it"."""


def answer_lost(exc: BaseException) -> bool:
    """Whether `exc` says the client never got the server's answer (its connection failed
    or the client stopped waiting), rather than an error the server reported."""
    return isinstance(exc, DatabaseTimeout | TimeoutError) or is_connection_failure(exc)


# SQLSTATE query_canceled: the server's statement_timeout, or pg_cancel_backend.
_QUERY_CANCELED = "57014"
_FOREIGN_KEY_VIOLATION = "23503"
# lock_not_available: a lock not granted within the transaction's lock_timeout.
LOCK_NOT_AVAILABLE = "55P03"
# Every table's tenant foreign key is named so (NAMING_CONVENTION in app/models/base.py).
_TENANT_FOREIGN_KEY = re.compile(r'foreign key constraint "fk_\w+_tenant_id_tenants"')


# A deadlock, or a serialisable transaction's conflict: the server rolled the request's
# transaction back, so it changed nothing, and the same request may well pass now.
_COLLISIONS = {"40P01", "40001"}


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error: asyncpg's, or the driver's inside SQLAlchemy's."""
    state = getattr(getattr(exc, "orig", exc), "sqlstate", None)
    return None if state is None else str(state)


def _collided(exc: BaseException) -> bool:
    return sqlstate(exc) in _COLLISIONS


def _tenant_gone(exc: BaseException) -> bool:
    """A write refused for want of its tenant: the tenant was deleted while the request,
    admitted just before, was under way."""
    return (sqlstate(exc) == _FOREIGN_KEY_VIOLATION
            and _TENANT_FOREIGN_KEY.search(str(getattr(exc, "orig", exc))) is not None)


def _statement_cut(exc: BaseException, seconds: float) -> DatabaseTimeout | None:
    """The answer for a statement the server cancelled (asyncpg's error, or SQLAlchemy's
    around it) or whose answer asyncpg stopped waiting for (a bare TimeoutError: the
    engine's pre-ping, which SQLAlchemy does not pass through its error events); None
    for any other error."""
    if isinstance(exc, TimeoutError):
        return statement_timed_out(seconds)
    if not (isinstance(exc, asyncpg.QueryCanceledError) or sqlstate(exc) == _QUERY_CANCELED):
        return None
    if "user request" in str(exc):  # the server's words for pg_cancel_backend
        return DatabaseTimeout("a database statement was cancelled on the server "
                               "(pg_cancel_backend); retry later")
    return statement_timed_out(seconds)


def problem_response(
    status: int,
    code: str,
    title: str,
    detail: str,
    errors: Sequence[FieldError] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    body = Problem(
        type=PROBLEM_BASE + code,
        title=title,
        status=status,
        detail=detail,
        errors=list(errors) if errors is not None else None,
        request_id=request_id.current(),
    )
    return JSONResponse(
        body.model_dump(exclude_none=True),
        status_code=status,
        media_type=PROBLEM_JSON,
        headers=headers,
    )


def app_error_response(exc: AppError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
    if exc.retry_after is not None:
        headers["Retry-After"] = str(exc.retry_after)
    headers.update(exc.headers)
    return problem_response(exc.status, exc.code, exc.title, exc.detail, exc.errors,
                            headers or None)


def _field_path(loc: Sequence[int | str], body: Any = None) -> str:
    parts = list(loc)
    # The body is the common case; naming it in every path would be noise.
    if parts and parts[0] == "body":
        parts = sent_path(parts[1:], body)
    return ".".join(map(str, parts)) or "body"


def sent_path(loc: Sequence[int | str], body: Any) -> list[int | str]:
    """`loc` as the path of the field in the JSON sent. Pydantic names a tagged union's
    variant by its tag between the field and the variant's own field (`op.concatenate.
    max_chars` for `{"op": {"name": "concatenate", "max_chars": 10}}`), where no key of
    that name is, or another key than the one it names (`{"name": "concatenate",
    "concatenate": 1}` is `op.concatenate`, the key refused)."""
    out: list[int | str] = []
    node = body
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if (isinstance(node, dict) and isinstance(part, str) and not last
                and part in node.values()):
            continue
        out.append(part)
        if isinstance(node, dict):
            node = node.get(part) if isinstance(part, str) else None
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        else:
            node = None
    return out


def validation_errors(raw: Sequence[Any], body: Any = None) -> list[FieldError]:
    out = []
    for err in raw:
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        loc = err.get("loc", ())
        if err.get("type") == "json_invalid":
            # FastAPI puts the character offset where the field would be.
            position = loc[1] if len(loc) > 1 else "?"
            out.append(FieldError(field="body", message=f"{msg} at character {position}"))
            continue
        out.append(FieldError(field=_field_path(loc, body), message=msg))
    return out


_NOT_JSON = "must be JSON, sent with Content-Type: application/json"
NOT_UTF8_BODY = "is not valid UTF-8 (JSON must be UTF-8)"


def json_content_type(value: str | None) -> bool:
    """Whether FastAPI parses a body sent with this Content-Type as JSON. Not with none
    at all since 0.132 (`strict_content_type`, kept on: a browser sends a body without
    one, and without a CORS preflight, to a service on localhost with auth off)."""
    if value is None:
        return False
    kind = value.split(";", 1)[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/")
                                          and kind.endswith("+json"))


def _unreadable_body(exc: StarletteHTTPException) -> str | None:
    """What is wrong with a JSON body FastAPI could not parse, if that is why `exc` is a
    400. FastAPI answers malformed JSON with a 422 naming `body`, but JSON that Python's
    parser refuses for other reasons with a bare 400, which no operation declares."""
    if exc.status_code != 400:
        return None
    cause = exc.__cause__
    if isinstance(cause, UnicodeDecodeError):
        return NOT_UTF8_BODY
    if isinstance(cause, RecursionError):
        return "is nested too deeply to be read"
    if isinstance(cause, ValueError) and "digits" in str(cause):
        # int() past sys.get_int_max_str_digits (4300).
        return "holds an integer with too many digits to be read"
    if isinstance(cause, ValueError):
        return "could not be read as JSON"
    return None


def _allowed_methods(request: Request) -> str | None:
    """Every method the path answers to: Starlette names only the first matching route's."""
    allowed = [
        method for method in _METHODS
        if any(route.matches({**request.scope, "method": method})[0] is Match.FULL
               for route in request.app.router.routes)
    ]
    if "GET" in allowed:  # app/service/head.py
        allowed.insert(allowed.index("GET") + 1, "HEAD")
    return ", ".join(allowed) or None


_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

_STATUS_TITLES = {
    400: ("bad_request", "Bad request"),
    401: ("unauthorized", "Unauthorized"),
    404: ("not_found", "Not found"),
    405: ("method_not_allowed", "Method not allowed"),
    408: ("request_timeout", "Request timeout"),
    413: ("payload_too_large", "Payload too large"),
    415: ("unsupported_media_type", "Unsupported media type"),
}


# Every error a database call raises (SQLAlchemy's and asyncpg's, the pool's wait, a
# socket's): those `_unexpected_problem` tells apart, and the others, a bug's, answered 500.
DATABASE_FAILURES: tuple[type[Exception], ...] = (
    DBAPIError, PoolTimeout, asyncpg.PostgresError, asyncpg.InterfaceError, OSError,
)


# The server refusing connections for now: shutting down, crashed, starting up (as the
# embedded PostgreSQL does for a second while its watcher restarts it), out of slots; and
# SQLSTATE class 08, the connection's own failures.
_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03", "53300"})
_TOO_MANY_CONNECTIONS = "53300"
# Under a flood of requests failing alike, one line per interval for each kind (a
# SQLSTATE of class 53 each), what it held back said at its end; each request at DEBUG.
_UNREACHABLE_LINES = Throttle(flush=lambda count: log.warning(
    "database unreachable: %d more request(s) answered 503 since the last report", count))
_BUSY_LINES = Throttle(flush=lambda count: log.warning(
    "the database has no connection slot free: %d more request(s) answered 503 since the "
    "last report", count))
_RESOURCE_LINES: dict[str, Throttle] = {}


def _resource_lines(state: str) -> Throttle:
    if state not in _RESOURCE_LINES:
        _RESOURCE_LINES[state] = Throttle(flush=lambda count: log.warning(
            "the database is out of resources (SQLSTATE %s): %d more request(s) answered "
            "503 since the last report", state, count))
    return _RESOURCE_LINES[state]


def out_of_resources(exc: BaseException) -> DatabaseOutOfResources | None:
    """The answer to a statement the database refused for want of disk, memory or a
    limit (SQLSTATE class 53 but 53300, a connection slot, which is busy, not full)."""
    state = sqlstate(exc)
    if state is None or not state.startswith("53") or state == _TOO_MANY_CONNECTIONS:
        return None
    if state == "53100":
        return DatabaseDiskFull("the database's disk is full, so nothing was written; "
                                "retry once an operator has freed space")
    return DatabaseOutOfResources(f"the database is out of a resource ({_pg_message(exc)}), "
                                  "so nothing was written; retry later")


def _driver_error(exc: BaseException) -> BaseException:
    """The driver's own error inside SQLAlchemy's wrapping (and its adapter's), if any."""
    inner = getattr(exc, "orig", None) or exc
    return getattr(inner, "__cause__", None) or inner


def _pg_message(exc: BaseException) -> str:
    """The server's own first line (`could not extend file ...: No space left on device`),
    which names files and limits, never a statement's parameters."""
    said = str(_driver_error(exc)).strip().splitlines()
    return said[0] if said else type(exc).__name__


def error_line(exc: BaseException) -> str:
    """`exc` as a run's record or a client shows it: the driver's error and its first
    line, without SQLAlchemy's statement and its link (a failed run's `error` held them)."""
    inner = _driver_error(exc) if isinstance(exc, DBAPIError) else exc
    return describe(inner).splitlines()[0]


def describe(exc: BaseException) -> str:
    """`exc` for a log line: its class and its words. A timeout has no words, and lines
    ended "failed: " or "cannot be reached ()" (an observability probe)."""
    said = str(exc)
    return f"{type(exc).__name__}: {said}" if said else type(exc).__name__


def log_failed_round(logger: logging.Logger, exc: BaseException, message: str,
                     *args: object) -> None:
    """A background round's failure (housekeeping, the sweeps): one WARNING line when the
    database cannot be reached, an outage the service rides out and the next round
    retries (a traceback a second while the embedded server restarted read as a fault);
    else ERROR with its traceback."""
    if is_connection_failure(exc):
        logger.warning(f"{message}: the database cannot be reached (%s)", *args,
                       describe(exc))
    elif out_of_resources(exc) is not None:
        logger.warning(f"{message}: the database is out of resources (%s)", *args,
                       _pg_message(exc))
    else:
        logger.error(message, *args, exc_info=exc)


def is_connection_failure(exc: BaseException) -> bool:
    """Whether `exc` says the database cannot be reached now (503 database_unavailable)."""
    # By SQLSTATE: asyncpg's own errors (the search statements run on it directly,
    # app/search/reader.py) and SQLAlchemy's wrapping of them alike, which wraps some
    # (CannotConnectNowError among them) in a plain DBAPIError, its connection not
    # invalidated.
    state = sqlstate(exc)
    if state is not None and (state.startswith("08") or state in _UNAVAILABLE_STATES):
        return True
    if isinstance(exc, InterfaceError | OperationalError):
        return True
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return True
    return isinstance(exc, OSError | ConnectionError)


async def unexpected_problem(request: Request, exc: Exception) -> JSONResponse:
    """The answer to an error no handler of its own took: a database's failure as the
    503 it is (a timeout, no connection free, the server unreachable), else a 500."""
    if isinstance(exc, PoolTimeout):  # the engine's pool (the asyncpg ones raise DatabaseBusy)
        log.warning("no database connection free during %s %s: %s", request.method,
                    request.url.path, exc)
        return app_error_response(pool_wait_expired(
            request.app.state.resources.settings.db_pool_timeout_seconds))
    cut = _statement_cut(
        exc, request.app.state.resources.settings.db_statement_timeout_seconds)
    if cut is not None:
        log.warning("database statement cut during %s %s (%s)",
                    request.method, request.url.path, describe(exc))
        return app_error_response(cut)
    if sqlstate(exc) == _TOO_MANY_CONNECTIONS:
        # Up, but at its max_connections: busy, not down (it was database_unavailable).
        if (count := _BUSY_LINES.due()) is not None:
            log.warning("the database has no connection slot free: %d request(s) answered "
                        "503 since the last report, the last %s %s (%s)", count,
                        request.method, request.url.path, _pg_message(exc))
        else:
            log.debug("no database connection slot free during %s %s", request.method,
                      request.url.path)
        return app_error_response(DatabaseBusy(
            "the database has no connection free for another client (its max_connections)"
            "; retry later"))
    if is_connection_failure(exc):
        if (count := _UNREACHABLE_LINES.due()) is not None:
            log.warning("database unreachable: %d request(s) answered 503 since the last "
                        "report, the last %s %s: %s", count, request.method,
                        request.url.path, describe(exc))
        else:
            log.debug("database unreachable during %s %s: %s", request.method,
                      request.url.path, describe(exc))
        return app_error_response(DatabaseUnavailable(
            "the database could not be reached; retry later"))
    full = out_of_resources(exc)
    if full is not None:
        # A traceback a request, on the disk that is full, made it fuller (a probe).
        if (count := _resource_lines(str(sqlstate(exc))).due()) is not None:
            log.warning("the database is out of resources: %d request(s) answered 503 "
                        "since the last report, the last %s %s: %s", count,
                        request.method, request.url.path, _pg_message(exc))
        else:
            log.debug("the database is out of resources during %s %s: %s", request.method,
                      request.url.path, _pg_message(exc))
        return app_error_response(full)
    if _collided(exc):
        log.warning("database collision during %s %s: %s", request.method,
                    request.url.path, type(exc).__name__)
        return app_error_response(DatabaseBusy(
            "the request collided with a concurrent one in the database and changed "
            "nothing; retry it"))
    if _tenant_gone(exc):
        # What the tenant's next request is told, now that its keys went with it.
        log.info("tenant deleted during %s %s", request.method, request.url.path)
        return app_error_response(Unauthorized(INVALID_KEY))
    log.exception("unhandled error during %s %s", request.method, request.url.path)
    return problem_response(
        500, "internal_error", "Internal error", "an unexpected error occurred"
    )


def install_error_handlers(app: FastAPI) -> None:
    """The problem+json answer of every error. A request's key is checked before its body
    is read (app/service/caller_gate.py), so a body that cannot be read is a 422 only for
    a caller whose key was accepted."""

    @app.exception_handler(AppError)
    async def _app_error(_: Request, exc: AppError) -> JSONResponse:
        return app_error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = validation_errors(exc.errors(), exc.body)
        if not json_content_type(request.headers.get("content-type")):
            # FastAPI reads such a body as bytes, and the error said it "should be a
            # valid dictionary", which sends the client looking at its JSON.
            errors = [FieldError(field="body", message=_NOT_JSON) if e.field == "body" else e
                      for e in errors]
        detail = "; ".join(f"{e.field}: {e.message}" for e in errors[:5])
        return problem_response(422, "validation_error", "Validation error", detail, errors)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        unreadable = _unreadable_body(exc)
        if unreadable is not None:
            errors = [FieldError(field="body", message=unreadable)]
            return problem_response(422, "validation_error", "Validation error",
                                    f"body: {unreadable}", errors)
        code, title = _STATUS_TITLES.get(exc.status_code, ("http_error", "HTTP error"))
        detail = exc.detail if isinstance(exc.detail, str) else title
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            allowed = _allowed_methods(request)
            if allowed:
                headers["Allow"] = allowed
        return problem_response(exc.status_code, code, title, detail, headers=headers or None)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        # Starlette runs this handler outside every middleware, so the request id's
        # header is added here.
        response = await unexpected_problem(request, exc)
        if (rid := request_id.current()) is not None:
            response.headers[request_id.HEADER] = rid
        # Starlette raises the error again once this is sent, and uvicorn then closes the
        # connection: said here, a keep-alive client opens a new one for its next request
        # instead of writing it into the closing one and getting a reset (an exploratory
        # probe's /healthz right after a 500).
        response.headers["Connection"] = "close"
        return response

    # The database's failures, answered inside the middleware: the handler for Exception
    # answers from outside them all and then raises the error again, so the metrics
    # counted an outage's 503s as 500s and uvicorn logged each with a traceback at ERROR.
    # A failure raised in a middleware itself still reaches `_unexpected`.
    for failure in DATABASE_FAILURES:
        app.add_exception_handler(failure, unexpected_problem)
