"""X-Request-ID: every answer carries one (the caller's when safe, else a new one), a
problem body names it, and log lines written during the request carry it; a 500, which
Starlette answers outside every middleware, too."""

from __future__ import annotations

import contextvars
import logging
import re

import httpx
import pytest

from app.memories.service import MemoryService
from app.service.request_id import REQUEST_ID, RequestIdFilter

GENERATED = re.compile(r"[0-9a-f]{32}")


async def test_every_answer_carries_a_new_id_when_none_is_sent(
    client: httpx.AsyncClient,
) -> None:
    answers = [await client.get("/healthz"), await client.get("/v1/memories"),
               await client.post("/v1/memories", json={"content": "Ids for all."}),
               await client.get("/no/such/path")]

    ids = [a.headers["x-request-id"] for a in answers]
    assert [a.status_code for a in answers] == [200, 200, 201, 404]
    assert all(GENERATED.fullmatch(i) for i in ids), ids
    assert len(set(ids)) == len(ids)
    assert answers[-1].json()["request_id"] == ids[-1]


async def test_a_safe_id_is_kept_and_an_unsafe_one_replaced(
    client: httpx.AsyncClient,
) -> None:
    safe = "trace-7f3a:span_01.b"
    kept = await client.get("/v1/memories", headers={"X-Request-ID": safe})
    assert kept.headers["x-request-id"] == safe

    for unsafe in ("two words", "x" * 129, "", "quote\"d", "caf\u00e9"):
        resp = await client.get("/v1/memories", headers={"X-Request-ID": unsafe.encode()})
        assert resp.status_code == 200
        assert GENERATED.fullmatch(resp.headers["x-request-id"]), unsafe


async def test_a_problem_names_its_request(client: httpx.AsyncClient) -> None:
    missing = await client.get("/v1/memories/0190b2a4-1c2d-7000-8000-000000000001",
                               headers={"X-Request-ID": "req-404"})
    invalid = await client.post("/v1/memories", json={"content": ""},
                                headers={"X-Request-ID": "req-422"})

    assert (missing.status_code, missing.json()["request_id"]) == (404, "req-404")
    assert (invalid.status_code, invalid.json()["request_id"]) == (422, "req-422")
    assert [e["field"] for e in invalid.json()["errors"]] == ["content"]
    assert invalid.headers["x-request-id"] == "req-422"


async def test_a_500_and_its_log_line_carry_the_id(
    client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(self: MemoryService, *args: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(MemoryService, "delete_matching", broken)
    caplog.handler.addFilter(RequestIdFilter())
    with caplog.at_level(logging.ERROR, logger="engram.errors"):
        resp = await client.delete("/v1/memories", params={"user_id": "u"},
                                   headers={"X-Request-ID": "req-500"})

    assert resp.status_code == 500
    assert resp.headers["content-type"] == "application/problem+json"
    assert resp.headers["x-request-id"] == "req-500"
    assert resp.json()["request_id"] == "req-500"
    # uvicorn closes the connection after it: the client is told not to reuse it.
    assert resp.headers["connection"] == "close"
    (record,) = [r for r in caplog.records if r.name == "engram.errors"]
    assert record.getMessage() == "unhandled error during DELETE /v1/memories"
    assert record.request_id == "req-500"  # type: ignore[attr-defined]


def test_outside_a_request_the_log_field_is_a_dash() -> None:
    record = logging.LogRecord("engram", logging.INFO, __file__, 1, "started", None, None)
    # A fresh context: the tests' own task may hold the id of its last request.
    contextvars.Context().run(RequestIdFilter().filter, record)
    assert record.request_id == "-"  # type: ignore[attr-defined]


def test_the_database_pools_own_lines_carry_no_request_id() -> None:
    """An observability probe: asyncpg's pool restores connections in a task started
    inside a request, so an outage's retries carried that request's id long after it
    ended."""
    def stamped(logger: str) -> str:
        record = logging.LogRecord(logger, logging.WARNING, __file__, 1, "retrying", None,
                                   None)
        context = contextvars.Context()
        context.run(REQUEST_ID.set, "rid-long-gone")
        context.run(RequestIdFilter().filter, record)
        return str(record.request_id)  # type: ignore[attr-defined]

    assert stamped("asyncpg.pool") == "-"
    assert stamped("engram.search") == "rid-long-gone"
