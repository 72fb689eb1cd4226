"""/healthz, /readyz, /metrics, unknown routes and methods, and a database that is down."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from app.db import create_engine, create_sessionmaker
from app.main import create_app
from app.maintenance import every
from app.migrate import head_revision
from app.providers.hash_embedder import HashEmbedder
from app.resources import Resources
from app.service.metrics import render_metrics
from app.worker.jobs import default_registry
from app.worker.runner import Worker
from tests.conftest import TenantKey
from tests.conftest import sample as counted_now
from tests.fakes.pg_starting_up import starting_up

PROBLEM_JSON = "application/problem+json"


def assert_problem(resp: httpx.Response, status: int) -> dict:
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"] == PROBLEM_JSON
    assert "Traceback" not in resp.text
    assert 'File "' not in resp.text
    body = resp.json()
    assert body["status"] == status
    assert isinstance(body["type"], str)
    assert body["type"]
    assert isinstance(body["title"], str)
    assert body["title"]
    assert isinstance(body["detail"], str)
    assert body["detail"]
    return body


def requests_total(metrics_text: str, method: str, route: str, status: str) -> float:
    pattern = re.compile(
        # Greedy: a route template's own braces sit inside the label set.
        r"^engram_http_requests_total\{(?P<labels>.*)\} (?P<value>\S+)$", re.MULTILINE
    )
    wanted = {"method": method, "route": route, "status": status}
    for match in pattern.finditer(metrics_text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', match["labels"]))
        if labels == wanted:
            return float(match["value"])
    return 0.0


# --- a healthy service ----------------------------------------------------------------------


async def test_healthz_is_200_without_a_key(anon_client: httpx.AsyncClient) -> None:
    resp = await anon_client.get("/healthz")
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok"}


async def test_readyz_is_200_with_the_schema_at_head(anon_client: httpx.AsyncClient) -> None:
    resp = await anon_client.get("/readyz")
    assert resp.status_code == 200, resp.text
    body = resp.json()
    head = head_revision()
    assert head is not None
    assert body["status"] == "ready"
    assert body["database"] == "ok"
    assert body["schema_revision"] == head
    assert body["head_revision"] == head


async def test_metrics_is_prometheus_text_counting_requests_by_route(
    anon_client: httpx.AsyncClient, client: httpx.AsyncClient
) -> None:
    before = (await anon_client.get("/metrics")).text
    for _ in range(3):
        assert (await anon_client.get("/healthz")).status_code == 200
    created = await client.post("/v1/memories", json={"content": "counted"})
    assert created.status_code == 201
    assert (await client.get(f"/v1/memories/{created.json()['id']}")).status_code == 200

    resp = await anon_client.get("/metrics")
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/plain")
    after = resp.text
    assert "# TYPE engram_http_requests_total counter" in after
    assert "# HELP engram_http_requests_total" in after
    assert "engram_http_request_seconds_bucket" in after
    healthz_delta = (requests_total(after, "GET", "/healthz", "200")
                     - requests_total(before, "GET", "/healthz", "200"))
    assert healthz_delta == 3
    assert (requests_total(after, "POST", "/v1/memories", "201")
            - requests_total(before, "POST", "/v1/memories", "201")) == 1
    # Routes are labelled by template, never by the raw path with its id.
    assert (requests_total(after, "GET", "/v1/memories/{memory_id}", "200")
            - requests_total(before, "GET", "/v1/memories/{memory_id}", "200")) == 1
    assert created.json()["id"] not in after
    # The background work's families are declared from the start, counted or not.
    for family, kind in (("engram_jobs_total", "counter"), ("engram_job_seconds", "histogram"),
                         ("engram_jobs_in_queue", "gauge"),
                         ("engram_worker_reconnects_total", "counter"),
                         ("engram_consolidation_runs_total", "counter"),
                         ("engram_llm_calls_total", "counter"),
                         ("engram_llm_call_seconds", "histogram"),
                         ("engram_embedding_calls_total", "counter"),
                         ("engram_embedding_call_seconds", "histogram"),
                         ("engram_session_folds_total", "counter"),
                         ("engram_session_events_total", "counter"),
                         ("engram_maintenance_deleted_total", "counter"),
                         ("engram_maintenance_failures_total", "counter"),
                         ("engram_embedded_postgres_restarts_total", "counter")):
        assert f"# TYPE {family} {kind}" in after, family
    # The series alerts read exist at 0 before their first event, and no `_created` series
    # doubles the count (an observability probe).
    for outcome in ("ok", "failed"):  # 0 until a restart (another test may have made one)
        assert f'engram_embedded_postgres_restarts_total{{outcome="{outcome}"}} ' in after
    assert "_created" not in after


async def test_a_workers_and_a_maintenance_rounds_series_start_at_zero(
    resources: Resources,
) -> None:
    """An observability probe: they appeared only with their first reconnect or failure,
    so an alert on them saw nothing until then."""
    Worker(resources, default_registry(), lane="metrics-probe")
    round_ = asyncio.create_task(every(3600, _nothing, what="metrics_probe", name="probe",
                                       done="%d"))
    await asyncio.sleep(0.05)
    round_.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await round_

    exported = render_metrics()[0].decode()
    for series in ('engram_worker_reconnects_total{lane="metrics-probe"} 0.0',
                   'engram_maintenance_failures_total{what="metrics_probe"} 0.0',
                   'engram_maintenance_deleted_total{what="metrics_probe"} 0.0'):
        assert series in exported, series


async def _nothing() -> int:
    return 0


def sample(metrics_text: str, name: str) -> float:
    match = re.search(rf"^{name} (\S+)$", metrics_text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


async def test_metrics_has_the_process_own_figures(anon_client: httpx.AsyncClient) -> None:
    """Resident memory, file descriptors, CPU and the garbage collector, read from this
    very process: what a dashboard watches a long-running service's growth by."""
    text = (await anon_client.get("/metrics")).text
    pages = Path("/proc/self/statm").read_text().split()[1]  # noqa: ASYNC240
    resident = int(pages) * os.sysconf("SC_PAGE_SIZE")
    assert sample(text, "process_resident_memory_bytes") == pytest.approx(resident, rel=0.2)
    open_fds = sample(text, "process_open_fds")
    assert 3 <= open_fds <= sample(text, "process_max_fds")
    assert sample(text, "process_cpu_seconds_total") > 0
    assert sample(text, "process_start_time_seconds") <= time.time()
    assert re.search(r'^python_info\{.*version="\d+\.\d+\.\d+"', text, re.MULTILINE)
    assert re.search(r'^python_gc_collections_total\{generation="0"\} \d', text,
                     re.MULTILINE)


@pytest.mark.parametrize(
    "path", ["/nope", "/v1/memory", "/v1/memories/batch/extra", "/v2/memories"]
)
async def test_unknown_route_is_404_problem(client: httpx.AsyncClient, path: str) -> None:
    body = assert_problem(await client.get(path), 404)
    assert body["title"] == "Not found"


async def test_unknown_route_without_a_key_is_404_problem(
    anon_client: httpx.AsyncClient,
) -> None:
    assert_problem(await anon_client.get("/definitely/not/here"), 404)


@pytest.mark.parametrize(
    ("method", "path", "location"),
    [
        ("POST", "/v1/search/", "/v1/search"),
        ("GET", "/v1/memories/?user_id=a%20b", "/v1/memories?user_id=a%20b"),
        ("GET", "/v1/sessions/caf%C3%A9/", "/v1/sessions/caf%C3%A9"),
        ("GET", "/v1/sessions/caf%C3%A9/turns/", "/v1/sessions/caf%C3%A9/turns"),
    ],
)
async def test_a_trailing_slash_redirects_to_the_operation_by_a_relative_location(
    client: httpx.AsyncClient, method: str, path: str, location: str
) -> None:
    """Found by a contract probe: the 307's Location was absolute and built from what the
    service sees, `http://` behind a TLS proxy that does not pass its scheme on."""
    turn = await client.post("/v1/sessions/caf%C3%A9/turns",
                             json={"role": "user", "content": "tea?"})
    assert turn.status_code == 201
    resp = await client.request(method, path, json={"query": "tea"})
    assert resp.status_code == 307
    assert resp.headers["location"] == location
    followed = await client.request(method, path, json={"query": "tea"},
                                    follow_redirects=True)
    assert followed.status_code == 200
    assert followed.url.raw_path.decode() == location


# A slash written %2F is part of a name: a redirect taking the literal slashes off had
# sent the client to the target it asked for, for ever (an HTTP probe).
@pytest.mark.parametrize("path", ["/nope/", "//v1/search", "//v1/search/", "/v1/",
                                  "/v1/search%2F", "/v1/memories/%2F", "/v1/memories/%2F%2F",
                                  "/v1/sessions/a%2F", "/v1/sessions/a%2F/",
                                  "/v1/sessions/%FF%2F"])
async def test_a_path_no_slash_makes_an_operation_is_404(
    client: httpx.AsyncClient, path: str
) -> None:
    assert_problem(await client.post(path, json={"query": "tea"}), 404)


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("PUT", "/v1/memories"),
        ("DELETE", "/v1/search"),
        ("PATCH", "/v1/memories"),
        ("GET", "/v1/memories/batch"),
        ("PUT", "/v1/memories/0190b2a4-1c2d-7000-8000-000000000001"),
        ("POST", "/healthz"),
    ],
)
async def test_wrong_method_is_405_problem(
    client: httpx.AsyncClient, method: str, path: str
) -> None:
    resp = await client.request(method, path, json={"content": "x"})
    if path == "/v1/memories/batch" and method == "GET":
        # GET matches /v1/memories/{memory_id}, where "batch" is no UUID.
        assert_problem(resp, 422)
        assert [e["field"] for e in resp.json()["errors"]] == ["path.memory_id"]
        return
    body = assert_problem(resp, 405)
    assert body["title"] == "Method not allowed"
    assert "allow" in resp.headers


@pytest.mark.parametrize(
    ("path", "supported"),
    [
        ("/v1/memories", {"GET", "HEAD", "POST"}),
        ("/v1/memories/0190b2a4-1c2d-7000-8000-000000000001",
         {"GET", "HEAD", "PATCH", "DELETE"}),
        ("/v1/search", {"POST"}),
    ],
)
async def test_405_allow_header_lists_every_method_of_the_path(
    client: httpx.AsyncClient, path: str, supported: set[str]
) -> None:
    # RFC 9110 15.5.6: a 405 MUST carry Allow listing the resource's supported methods.
    resp = await client.put(path, json={"content": "x"})
    assert_problem(resp, 405)
    allowed = {m.strip() for m in resp.headers["allow"].split(",")}
    assert supported <= allowed, allowed


async def test_head_answers_wherever_get_does_with_gets_headers_and_no_body(
    client: httpx.AsyncClient,
) -> None:
    """Load balancers and uptime monitors that check with HEAD got a 405."""
    created = await client.post("/v1/memories", json={"content": "seen by HEAD"})
    assert created.status_code == 201, created.text
    for path in ("/healthz", "/readyz", "/v1/memories", f"/v1/memories/{created.json()['id']}",
                 "/openapi.json"):
        got, head = await client.get(path), await client.head(path)
        assert (head.status_code, got.status_code) == (200, 200), (path, head.text)
        assert head.content == b""
        assert got.content
        assert head.headers["content-length"] == got.headers["content-length"]
        assert head.headers["content-type"] == got.headers["content-type"]
    missing = await client.head("/v1/memories/0190b2a4-1c2d-7000-8000-000000000001")
    assert (missing.status_code, missing.content) == (404, b"")
    assert missing.headers["content-type"] == "application/problem+json"
    post_only = await client.head("/v1/search")
    assert (post_only.status_code, post_only.headers["allow"]) == (405, "POST")


# --- the database is down -------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def down_resources(resources: Resources,
                         request: pytest.FixtureRequest) -> AsyncIterator[Resources]:
    """Resources whose engine points at a port where nothing listens, or at a server
    still starting up (found by an exploratory probe: SQLAlchemy wraps asyncpg's
    CannotConnectNowError in a plain DBAPIError, and the embedded PostgreSQL's restart
    after a crash answered writes 500, not 503)."""
    settings = resources.settings.model_copy(update={"auth_enabled": False})
    async with contextlib.AsyncExitStack() as stack:
        port = (await stack.enter_async_context(starting_up())
                if getattr(request, "param", "closed") == "starting-up" else closed_port())
        engine = create_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{port}/x",
                               settings)
        yield Resources(settings, engine, create_sessionmaker(engine), HashEmbedder(384))
        await engine.dispose()


@pytest.fixture
async def down_client(down_resources: Resources) -> AsyncIterator[httpx.AsyncClient]:
    # An error the app raises again after answering fails the test: uvicorn logs each
    # such error at ERROR with its traceback.
    app = create_app(down_resources.settings, down_resources)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as c:
        yield c


SOME_ID = "0190b2a4-1c2d-7000-8000-000000000001"


@pytest.mark.parametrize(
    ("method", "path", "payload", "headers"),
    [
        ("POST", "/v1/memories", {"content": "x"}, {}),
        ("POST", "/v1/memories", {"content": "x"}, {"Idempotency-Key": "k-down"}),
        ("POST", "/v1/memories/batch", {"items": [{"content": "x"}]}, {}),
        ("GET", "/v1/memories", None, {}),
        ("GET", f"/v1/memories/{SOME_ID}", None, {}),
        ("GET", f"/v1/memories/{SOME_ID}/history", None, {}),
        ("PATCH", f"/v1/memories/{SOME_ID}", {"content": "y"}, {}),
        ("DELETE", f"/v1/memories/{SOME_ID}", None, {}),
        ("DELETE", "/v1/memories?user_id=u", None, {}),
        ("POST", "/v1/search", {"query": "x"}, {}),
        ("GET", "/readyz", None, {}),
        ("POST", "/v1/sessions/s1/turns", {"role": "user", "content": "x"}, {}),
        ("PUT", "/v1/sessions/s1", {"strategy": "truncation"}, {}),
        ("DELETE", "/v1/sessions/s1", None, {}),
        ("DELETE", "/v1/sessions?user_id=u", None, {}),
        ("GET", "/v1/sessions", None, {}),
        ("GET", "/v1/sessions/s1", None, {}),
        ("GET", "/v1/sessions/s1/context", None, {}),
        ("GET", "/v1/sessions/s1/turns", None, {}),
        ("GET", "/v1/sessions/s1/events", None, {}),
    ],
    ids=["create", "create-idempotent", "batch", "list", "get", "history", "patch", "delete",
         "delete-matching", "search", "readyz", "append-turn", "configure-session",
         "delete-session", "delete-sessions", "list-sessions", "get-session",
         "session-context", "list-turns", "session-events"],
)
@pytest.mark.parametrize("down_resources", ["closed", "starting-up"], indirect=True)
async def test_database_unreachable_is_503_problem_without_a_stack_trace(
    down_client: httpx.AsyncClient, method: str, path: str, payload: dict | None,
    headers: dict[str, str],
) -> None:
    route = path.split("?")[0].replace(SOME_ID, "{memory_id}").replace("/s1", "/{session_id}")
    counted = {status: counted_now("engram_http_requests_total", method=method,
                                   route=route, status=status) for status in ("500", "503")}

    resp = await down_client.request(method, path, json=payload, headers=headers)

    body = assert_problem(resp, 503)
    assert body["type"].endswith("/database_unavailable")
    assert body["title"] == "Database unavailable"
    assert resp.headers["Retry-After"] == "1"
    assert "127.0.0.1" not in resp.text
    assert "asyncpg" not in resp.text.lower()
    # Counted as what it answered: an outage is not a bug (it counted as a 500).
    assert counted_now("engram_http_requests_total", method=method, route=route,
                       status="503") == counted["503"] + 1
    assert counted_now("engram_http_requests_total", method=method, route=route,
                       status="500") == counted["500"]


async def test_database_unreachable_still_answers_healthz(
    down_client: httpx.AsyncClient,
) -> None:
    resp = await down_client.get("/healthz")
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok"}


async def test_database_unreachable_with_auth_on_is_503_not_401(
    down_resources: Resources, tenant: TenantKey
) -> None:
    settings = down_resources.settings.model_copy(update={"auth_enabled": True})
    res = Resources(settings, down_resources.engine, down_resources.sessionmaker,
                    down_resources.embedder)
    transport = httpx.ASGITransport(app=create_app(settings, res), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost",
                                 headers=tenant.headers) as c:
        listed = await c.get("/v1/memories")
        created = await c.post("/v1/memories", json={"content": "x"})
        got = await c.get(f"/v1/memories/{uuid.uuid4()}")
    for resp in (listed, created, got):
        body = assert_problem(resp, 503)
        assert body["type"].endswith("/database_unavailable")


async def test_database_unreachable_validation_errors_are_still_422(
    down_client: httpx.AsyncClient,
) -> None:
    # Input is checked before the database is touched.
    resp = await down_client.post("/v1/memories", json={"content": ""})
    body = assert_problem(resp, 422)
    assert [e["field"] for e in body["errors"]] == ["content"]
