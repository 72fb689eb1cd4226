"""The answer and the log line when the database refuses a statement for want of a
resource (SQLSTATE class 53), through the whole app on the suite's database.

Found by a disk-full probe: a full disk answered every write 500 `internal_error` with no
Retry-After, and logged a ~130-line traceback a request (6,300 lines for 50 requests, on
the disk that was full); a server at its max_connections answered `database_unavailable`,
"could not be reached", while it was up."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from app import errors
from app.resources import Resources
from tests.conftest import TenantKey, count_memories, failing_trigger
from tests.integration.test_service_endpoints import assert_problem


@contextlib.asynccontextmanager
async def refusing(resources: Resources, tenant: TenantKey, state: str,
                   message: str) -> AsyncIterator[None]:
    """A trigger that fails this tenant's inserts of memories as the server does when a
    resource is out: the same SQLSTATE, the same kind of words."""
    async with failing_trigger(
            resources, f"refuse_{state}_{tenant.tenant_id.hex}", "BEFORE INSERT",
            f"NEW.tenant_id = '{tenant.tenant_id}'",
            f"RAISE EXCEPTION '{message}' USING ERRCODE = '{state}'"):
        yield


DISK_FULL = 'could not extend file "base/16384/16770": No space left on device'


async def test_a_full_disk_is_503_database_disk_full_with_one_line_and_no_traceback(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(errors, "_RESOURCE_LINES", {})  # none logged yet
    caplog.set_level(logging.WARNING)
    async with refusing(resources, tenant, "53100", DISK_FULL):
        answers = [await client.post("/v1/memories", json={"content": f"Note {i}.",
                                                           "user_id": "full"})
                   for i in range(5)]
        batch = await client.post("/v1/memories/batch", json={"items": [
            {"content": "Batched.", "user_id": "full"}]})

    for answer in [*answers, batch]:
        problem = assert_problem(answer, 503)
        assert problem["type"].endswith("/database_disk_full")
        assert answer.headers["retry-after"] == "30"
    assert await count_memories(resources, tenant) == 0
    assert not [r for r in caplog.records if r.exc_info is not None]
    lines = [r.getMessage() for r in caplog.records if "out of resources" in r.getMessage()]
    # One line for the six (the interval is 10 s), naming the server's reason.
    assert len(lines) == 1
    assert "6 request(s)" not in lines[0]  # the first is logged at once, the rest later
    assert "No space left on device" in lines[0]


@pytest.mark.parametrize(("state", "message", "code", "said", "retry_after"), [
    ("53200", "out of memory", "database_out_of_resources", "out of memory", "30"),
    # Up, but at its max_connections: it was database_unavailable, "could not be reached".
    ("53300", "sorry, too many clients already", "database_busy", "max_connections", "1"),
])
async def test_another_resource_is_503_naming_it(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
    state: str, message: str, code: str, said: str, retry_after: str,
) -> None:
    async with refusing(resources, tenant, state, message):
        answer = await client.post("/v1/memories", json={"content": "x", "user_id": state})

    problem = assert_problem(answer, 503)
    assert problem["type"].endswith(f"/{code}")
    assert said in problem["detail"]
    assert answer.headers["retry-after"] == retry_after


async def test_a_database_error_for_a_record_is_its_drivers_first_line(
    resources: Resources,
) -> None:
    """A failed run's `error`, shown to clients, held SQLAlchemy's whole text: its
    statement, 'SQL parameters hidden' and a link (a disk-full probe)."""
    with pytest.raises(DBAPIError) as caught:
        async with resources.engine.connect() as conn:
            await conn.execute(text("SELECT 1 / (SELECT count(*) - count(*) FROM tenants)"))

    assert "[SQL:" in str(caught.value)
    assert errors.error_line(caught.value) == "DivisionByZeroError: division by zero"
    assert errors.error_line(ValueError("a\nb")) == "ValueError: a"
