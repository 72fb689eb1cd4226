"""The log formats: JSON, one object a line whatever the record holds; text, one line a
message whatever a client put in it."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import asyncpg
import pytest

from app.errors import log_failed_round
from app.providers.answer_preview import answer_preview, provider_code, secrets_of
from app.service.log_format import (
    JsonFormatter,
    LogFormat,
    PoolOutageFilter,
    TextFormatter,
    configure,
    redact_urls,
)
from app.service.request_id import REQUEST_ID, RequestIdFilter


def record(name: str, msg: str, *args: Any, **extra: Any) -> logging.LogRecord:
    rec = logging.LogRecord(name, logging.WARNING, __file__, 1, msg, args, None)
    rec.__dict__.update(extra)
    RequestIdFilter().filter(rec)
    return rec


def formatted(rec: logging.LogRecord) -> dict[str, Any]:
    line = JsonFormatter().format(rec)
    assert "\n" not in line
    entry = json.loads(line)
    assert isinstance(entry, dict)
    return entry


def test_a_record_inside_a_request_carries_its_id_and_its_message() -> None:
    token = REQUEST_ID.set("trace-42")
    try:
        entry = formatted(record("engram.errors", "database unreachable during %s %s",
                                 "POST", "/v1/search"))
    finally:
        REQUEST_ID.reset(token)
    assert entry.pop("time").endswith("Z")
    assert entry == {"level": "WARNING", "logger": "engram.errors", "request_id": "trace-42",
                     "message": "database unreachable during POST /v1/search"}


def test_outside_a_request_the_id_is_null() -> None:
    assert formatted(record("engram", "ready"))["request_id"] is None


def test_a_traceback_stays_in_its_line() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        rec = record("engram.errors", "unhandled error during %s", "GET /x")
        rec.exc_info = sys.exc_info()
    entry = formatted(rec)
    assert entry["message"] == "unhandled error during GET /x"
    assert entry["exception"].startswith("Traceback (most recent call last):")
    assert entry["exception"].endswith("ValueError: bad\nvalue")


def test_a_stack_is_kept_too() -> None:
    rec = record("engram", "where")
    rec.stack_info = "Stack (most recent call last):\n  File x"
    assert formatted(rec)["stack"] == "Stack (most recent call last):\n  File x"


def test_an_access_line_carries_the_request_as_fields() -> None:
    entry = formatted(record("uvicorn.access", '%s - "%s %s HTTP/%s" %d',
                             "127.0.0.1:5000", "POST", "/v1/search?x=1", "1.1", 200))
    assert entry["message"] == '127.0.0.1:5000 - "POST /v1/search?x=1 HTTP/1.1" 200'
    assert entry["http"] == {"client": "127.0.0.1:5000", "method": "POST",
                             "path": "/v1/search?x=1", "http_version": "1.1", "status": 200}


def test_text_that_is_not_ascii_and_values_that_are_not_json_are_written() -> None:
    class Opaque:
        def __str__(self) -> str:
            return "opaque"

    assert formatted(record("engram", "café %s", "ünï"))["message"] == "café ünï"
    entry = formatted(record("uvicorn.access", "%s %s %s %s %s",
                             Opaque(), "GET", "/", "1.1", 200))
    assert entry["http"]["client"] == "opaque"


def test_a_client_value_cannot_forge_a_text_line() -> None:
    forged = "a\n2026-01-01 00:00:00,000 ERROR engram.errors [-]: forged\r\x1b[2J\u2028"
    line = TextFormatter().format(record("engram.sessions", "session %s: turn refused",
                                         forged))
    assert line.count("\n") == 0
    assert line.endswith("session a\\n2026-01-01 00:00:00,000 ERROR engram.errors [-]: "
                         "forged\\r\\x1b[2J\\u2028: turn refused")
    assert " WARNING engram.sessions [-]: " in line


def test_a_text_line_keeps_tabs_and_unicode_and_its_traceback_below() -> None:
    try:
        raise ValueError("bad\nvalue")
    except ValueError:
        rec = record("engram.errors", "café\tnaïve %s", "東京")
        rec.exc_info = sys.exc_info()
    first, *rest = TextFormatter().format(rec).split("\n")
    assert first.endswith("]: café\tnaïve 東京")
    assert rest[0] == "Traceback (most recent call last):"
    assert rest[-2:] == ["ValueError: bad", "value"]


@contextlib.contextmanager
def served_handler(log_format: LogFormat) -> Iterator[logging.Handler]:
    """A root handler as `serve` configures it; the root's handlers restored after."""
    root = logging.getLogger()
    saved = [(h, h.formatter, list(h.filters)) for h in root.handlers]
    handler = logging.StreamHandler()
    root.addHandler(handler)
    try:
        configure("info", log_format)
        yield handler
    finally:
        root.removeHandler(handler)
        for h, formatter, filters in saved:
            h.setFormatter(formatter)
            h.filters[:] = filters


def test_serve_writes_text_through_the_escaping_formatter() -> None:
    with served_handler("text") as handler:
        assert isinstance(handler.formatter, TextFormatter)


def test_urls_lose_their_credentials_and_query() -> None:
    assert redact_urls('POST https://u:p@api.example.com/v1/embeddings?api-key=K&x=1 "200"') \
        == 'POST https://<redacted>@api.example.com/v1/embeddings?<redacted> "200"'
    assert redact_urls("GET http://127.0.0.1:8080/v1/x") == "GET http://127.0.0.1:8080/v1/x"


def test_a_background_round_cut_by_an_outage_logs_one_warning_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by an operator probe: while the embedded server restarted, the sweeps and
    the term statistics' fold logged a traceback at ERROR every second."""
    logger = logging.getLogger("engram.test")
    with caplog.at_level(logging.INFO, logger="engram.test"):
        log_failed_round(logger, ConnectionRefusedError(111, "Connect call failed"),
                         "folding failed; retrying in %.0f s", 1.0)
        log_failed_round(logger, ValueError("a bug"), "folding failed; retrying in %.0f s",
                         1.0)
    outage, fault = caplog.records
    assert (outage.levelname, outage.exc_info) == ("WARNING", None)
    assert outage.getMessage() == ("folding failed; retrying in 1 s: the database cannot be "
                                   "reached (ConnectionRefusedError: [Errno 111] Connect "
                                   "call failed)")
    assert fault.levelname == "ERROR"
    assert fault.exc_info is not None
    assert fault.exc_info[0] is ValueError


def test_a_background_round_on_a_full_disk_logs_one_warning_line_without_the_statement(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Found by a disk-full probe: the term statistics' fold logged its DiskFullError at
    ERROR, with a traceback and the whole statement's text."""
    import asyncpg

    logger = logging.getLogger("engram.test")
    full = asyncpg.exceptions.DiskFullError(
        'could not extend file "base/16384/16770": No space left on device')
    with caplog.at_level(logging.INFO, logger="engram.test"):
        log_failed_round(logger, full, "folding failed; retrying in %.0f s", 5.0)
    (line,) = caplog.records
    assert (line.levelname, line.exc_info) == ("WARNING", None)
    assert line.getMessage() == (
        "folding failed; retrying in 5 s: the database is out of resources (could not "
        'extend file "base/16384/16770": No space left on device)')


def pool_retry(exc: BaseException) -> logging.LogRecord:
    """The record asyncpg's pool logs when it cannot reconnect its idle connections."""
    try:
        raise exc
    except BaseException:
        rec = record("asyncpg.pool", "Failed to restore the pool connection floor; retrying")
        rec.exc_info = sys.exc_info()
    return rec


def test_the_pool_failing_to_reconnect_during_an_outage_logs_one_line() -> None:
    """Found by an operator probe: each retry, from every pool, wrote a traceback."""
    rec = pool_retry(ConnectionRefusedError(111, "Connect call failed"))
    assert PoolOutageFilter().filter(rec)
    entry = formatted(rec)
    assert "exception" not in entry
    assert entry["message"] == ("Failed to restore the pool connection floor; retrying: the "
                                "database cannot be reached (ConnectionRefusedError: [Errno "
                                "111] Connect call failed)")


def queue_flush_failure(exc: BaseException) -> logging.LogRecord:
    """The record pgqueuer's buffers log when a flush fails (`logger.exception`)."""
    try:
        raise exc
    except BaseException:
        rec = record("pgqueuer", "Flush failed, requeuing %d items", 3)
        rec.levelno, rec.levelname = logging.ERROR, "ERROR"
        rec.exc_info = sys.exc_info()
    return rec


@pytest.mark.parametrize("lost", [
    asyncpg.InterfaceError("connection is closed"),
    asyncpg.exceptions.ConnectionDoesNotExistError(
        "connection was closed in the middle of operation"),
])
def test_the_queue_flushing_on_a_lost_connection_is_one_warning(lost: Exception) -> None:
    """Seen at every failover in the suite: pgqueuer's heartbeat flush on the worker's
    dropped connection logged an ERROR and its traceback, beside the service's own
    WARNING that the worker lost its connection."""
    rec = queue_flush_failure(lost)
    assert PoolOutageFilter().filter(rec)
    entry = formatted(rec)
    assert "exception" not in entry
    assert entry["level"] == "WARNING"
    assert entry["message"].startswith(
        "Flush failed, requeuing 3 items: the database cannot be reached (")


def test_the_queue_failing_to_flush_for_another_reason_keeps_its_traceback() -> None:
    rec = queue_flush_failure(ValueError("bad heartbeat"))
    assert PoolOutageFilter().filter(rec)
    entry = formatted(rec)
    assert entry["level"] == "ERROR"
    assert "ValueError: bad heartbeat" in entry["exception"]
    assert entry["message"] == "Flush failed, requeuing 3 items"


def test_a_timeout_is_named_where_it_has_no_words() -> None:
    """An observability probe: a frozen server's timeouts logged "cannot be reached ()"."""
    rec = pool_retry(TimeoutError())
    assert PoolOutageFilter().filter(rec)
    entry = formatted(rec)
    assert entry["message"].endswith("the database cannot be reached (TimeoutError)")


def test_the_pool_keeps_the_traceback_of_any_other_failure() -> None:
    rec = pool_retry(ValueError("100% a bug"))
    assert PoolOutageFilter().filter(rec)
    assert formatted(rec)["exception"].endswith("ValueError: 100% a bug")
    other = pool_retry(ConnectionRefusedError(111, "refused"))
    other.name = "engram.search"
    assert PoolOutageFilter().filter(other)
    assert other.exc_info is not None


def test_serve_installs_the_pool_outage_filter() -> None:
    with served_handler("json") as handler:
        assert any(isinstance(f, PoolOutageFilter) for f in handler.filters)


def test_uvicorns_copy_of_a_refused_starts_traceback_is_left_out() -> None:
    """The reason is logged on one line (app/main.py); uvicorn then logged the traceback
    of the exception that carried it (found by a README walk-through)."""
    copy = record("uvicorn.error", "Traceback (most recent call last):\n  File ...\n"
                  "app.main.StartupRefused: the database at ENGRAM_DATABASE_URL could not "
                  "be reached")
    other = record("uvicorn.error", "Traceback (most recent call last):\n  File ...\n"
                   "ValueError: a fault")
    with served_handler("text") as handler:
        assert not handler.filter(copy)
        assert handler.filter(other)
        assert handler.filter(record("uvicorn.error", "Application startup failed. Exiting."))


def test_a_secret_across_the_previews_cut_is_masked_whole() -> None:
    """A re-probe: cut first, then masked, a key across the cut kept its start."""
    key = "sk-proj-SECRETKEY1234567890abcdef"
    said = json.dumps({"error": {"message": "x" * 180 + "Incorrect API key: " + key}})
    shown = answer_preview(said, limit=200, api_key=key)
    assert "sk-proj" not in shown
    assert len(eval(shown)) <= 200


def test_a_base_urls_secrets_are_masked_in_every_form_they_are_echoed() -> None:
    secrets = secrets_of("http://bob:pw1@gw.example/v1?api-key=ab%2Fcd%2Bef&v=2024")
    echoed = ('bad key ab%2Fcd%2Bef / ab/cd+ef, user bob:pw1, Basic '
              + base64.b64encode(b"bob:pw1").decode() + ', "ab\\/cd"')
    shown = answer_preview(echoed, limit=500, api_key='sk-ab/cd"ef', secrets=secrets)
    for secret in ("ab%2Fcd%2Bef", "ab/cd+ef", "pw1", base64.b64encode(b"bob:pw1").decode()):
        assert secret not in shown, secret


@pytest.mark.parametrize(("body", "code"), [
    ('{"error": {"message": "quoting the input", "type": "invalid_request_error", '
     '"code": "model_not_found"}}', "model_not_found, invalid_request_error"),
    ('{"error": "batch too large", "error_type": "Validation"}', "Validation"),
    ('{"detail": "could not process {\\"input\\": [\\"secret\\"]}"}', None),
    ('{"error": {"code": "has spaces and input"}}', None),
    ("<html>bad gateway</html>", None),
    ("[" * 100000, None),
])
def test_a_providers_error_is_told_by_its_code_alone(body: str, code: str | None) -> None:
    assert provider_code(body) == code
