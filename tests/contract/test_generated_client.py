"""A client generated from the served OpenAPI document, as a team would make one, calls
every operation against the real service and reads every answer.

The document is checked against the OpenAPI 3.1 specification, then
openapi-python-client (the common Python generator) writes a package from it, without
warnings. The tests drive the service only through that package: typed request models
in, typed answer models out. A status the document does not declare would come back
unparsed (`parsed is None`), a field it misdescribes would fail the generated
`from_dict`, and a request field it misnames would be refused with 422, so each
assertion below is also an assertion about the document. Besides, every answer the
client receives is validated against the schema the document declares for its
operation, status and content type (tests/openapi_answers.py, as for every test
client), which a generated `from_dict` checks only in part.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any
from uuid import UUID

import httpx
import pytest
from openapi_spec_validator import validate

from app.main import create_app
from app.resources import Resources
from tests.conftest import TenantKey, answers
from tests.openapi_answers import AnswerChecker

PACKAGE = "engram_client"
BASE_URL = "http://localhost"


@pytest.fixture(scope="module")
def document() -> dict[str, Any]:
    return answers().document


@pytest.fixture(scope="module")
def generated(document: dict[str, Any],
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The generated package's folder (imported as `engram_client`) and what the
    generator printed."""
    root = tmp_path_factory.mktemp("generated")
    spec = root / "openapi.json"
    spec.write_text(json.dumps(document))
    # No post hooks: the generator would otherwise run ruff over its output, which only
    # reformats it.
    config = root / "config.json"
    config.write_text(json.dumps({"package_name_override": PACKAGE, "post_hooks": []}))
    target = root / PACKAGE
    done = subprocess.run(
        [sys.executable, "-m", "openapi_python_client", "generate", "--path", str(spec),
         "--config", str(config), "--meta", "none", "--output-path", str(target)],
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(root))
    try:
        yield target, done.stdout + done.stderr
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
            del sys.modules[name]


def module(name: str) -> ModuleType:
    return importlib.import_module(f"{PACKAGE}.{name}")


def models() -> ModuleType:
    return module("models")


def call(operation: str) -> Any:
    """The generated module of an operation, e.g. `call("memories.create_memory")`."""
    return module(f"api.{operation}")


@pytest.fixture
def checker(document: dict[str, Any]) -> AnswerChecker:
    return AnswerChecker(document)


def transport_to(resources: Resources) -> httpx.ASGITransport:
    return httpx.ASGITransport(app=create_app(resources.settings, resources),
                               raise_app_exceptions=False)


@pytest.fixture
async def api(generated: tuple[Path, str], resources: Resources, tenant: TenantKey,
              checker: AnswerChecker) -> AsyncIterator[Any]:
    """The generated AuthenticatedClient with the tenant's key, on the service in process;
    every answer it gets is checked against the document."""
    async with module("client").AuthenticatedClient(
            base_url=BASE_URL, token=tenant.key,
            httpx_args={"transport": transport_to(resources),
                        "event_hooks": {"response": [checker]}}) as client:
        yield client
    assert checker.checked


def ok(response: Any, status: int, kind: str) -> Any:
    """The parsed answer, after checking its status and that it parsed as `kind`."""
    assert response.status_code == status, response.content
    parsed = response.parsed
    assert type(parsed).__name__ == kind, (kind, parsed, response.content)
    return parsed


def problem(response: Any, status: int) -> Any:
    parsed = ok(response, status, "Problem")
    assert parsed.status == status
    assert parsed.title
    assert parsed.detail
    return parsed


def test_the_document_is_valid_openapi_3_1(document: dict[str, Any]) -> None:
    assert document["openapi"].startswith("3.1")
    validate(document)  # raises on the first violation


def test_the_generator_writes_a_client_for_every_operation_without_warnings(
    generated: tuple[Path, str], document: dict[str, Any],
) -> None:
    target, printed = generated
    assert "Warning" not in printed, printed
    written = {p.stem for p in (target / "api").glob("*/*.py") if p.stem != "__init__"}
    operation_ids = {operation["operationId"]
                     for path in document["paths"].values()
                     for operation in path.values()}
    expected = {snake(op) for op in operation_ids}
    assert written == expected
    # And the tests below drive every one of them.
    driven = set(re.findall(r'call\("\w+\.(\w+)"\)', Path(__file__).read_text()))
    assert driven == expected
    # Every named schema became a model, but a tagged union (Selector, Op), which this
    # generator writes as the union of its variants' models where it is used.
    assert {name for name, schema in document["components"]["schemas"].items()
            if "oneOf" not in schema and not hasattr(models(), name)} == set()


def snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name).lstrip("_")


async def test_memories_round_trip_through_the_generated_models(api: Any) -> None:
    m = models()
    expires = datetime.now(UTC) + timedelta(days=30)
    body = m.MemoryCreate(
        content="Alice prefers green tea in the morning.", user_id="alice",
        category="preferences", tags=["drinks", "morning"], importance=0.8,
        metadata=m.MemoryCreateMetadata.from_dict({"source_app": "chat", "turn": 3}),
        expires_at=expires)
    created = ok(await call("memories.create_memory").asyncio_detailed(
        client=api, body=body, idempotency_key="k-alice-tea"), 201, "Memory")
    assert isinstance(created.id, UUID)
    assert isinstance(created.created_at, datetime)
    assert created.expires_at == expires
    assert created.archived_at is None
    assert created.tags == ["drinks", "morning"]
    assert created.metadata.to_dict() == {"source_app": "chat", "turn": 3}
    assert created.fact_role.value == "fact"

    # The same key answers the first result, not a second memory.
    again = ok(await call("memories.create_memory").asyncio_detailed(
        client=api, body=body, idempotency_key="k-alice-tea"), 201, "Memory")
    assert again.id == created.id

    batch = ok(await call("memories.create_memories").asyncio_detailed(
        client=api, body=m.MemoryBatchCreate(items=[
            m.MemoryCreate(content=f"Alice visited city number {i}.", user_id="alice",
                           tags=["travel"])
            for i in range(3)])), 201, "MemoryBatch")
    assert [x.content for x in batch.items] == [
        f"Alice visited city number {i}." for i in range(3)]

    got = ok(await call("memories.get_memory").asyncio_detailed(
        created.id, client=api), 200, "Memory")
    assert got.to_dict() == created.to_dict()

    # Paged by the generated cursor parameter; a list filter sent as the client sends it.
    first = ok(await call("memories.list_memories").asyncio_detailed(
        client=api, user_id="alice", tags=["travel"], limit=2), 200, "MemoryPage")
    assert len(first.items) == 2
    assert isinstance(first.next_cursor, str)
    rest = ok(await call("memories.list_memories").asyncio_detailed(
        client=api, user_id="alice", tags=["travel"], limit=2, cursor=first.next_cursor),
        200, "MemoryPage")
    assert len(rest.items) == 1
    assert rest.next_cursor is None
    assert {x.id for x in first.items + rest.items} == {x.id for x in batch.items}
    by_metadata = ok(await call("memories.list_memories").asyncio_detailed(
        client=api, metadata=json.dumps({"source_app": "chat"})), 200, "MemoryPage")
    assert [x.id for x in by_metadata.items] == [created.id]

    updated = ok(await call("memories.update_memory").asyncio_detailed(
        created.id, client=api, body=m.MemoryUpdate(
            content="Alice prefers jasmine tea in the morning.", importance=0.9,
            expires_at=None)), 200, "Memory")
    assert updated.content == "Alice prefers jasmine tea in the morning."
    assert updated.expires_at is None
    assert updated.updated_at >= created.updated_at

    history = ok(await call("memories.get_memory_history").asyncio_detailed(
        created.id, client=api), 200, "MemoryHistory")
    assert [(v.version, v.content) for v in history.items] == [
        (1, "Alice prefers green tea in the morning.")]
    assert history.items[0].replaced_at >= history.items[0].valid_from
    erased = ok(await call("memories.delete_memory_history").asyncio_detailed(
        created.id, client=api), 200, "MemoryHistoryDeletion")
    assert erased.deleted == 1

    deleted = await call("memories.delete_memory").asyncio_detailed(created.id, client=api)
    assert deleted.status_code == 204
    problem(await call("memories.get_memory").asyncio_detailed(created.id, client=api), 404)

    scope = ok(await call("memories.delete_memories").asyncio_detailed(
        client=api, user_id="alice"), 200, "MemoryDeletion")
    assert scope.deleted == 3


async def test_search_answers_typed_results_and_explanations(api: Any) -> None:
    m = models()
    stored = ok(await call("memories.create_memories").asyncio_detailed(
        client=api, body=m.MemoryBatchCreate(items=[
            m.MemoryCreate(content="Bob's dog is called Pepper.", user_id="bob"),
            m.MemoryCreate(content="Bob works as a welder in Leeds.", user_id="bob"),
            m.MemoryCreate(content="Carol's dog is called Pepper too.", user_id="carol"),
        ])), 201, "MemoryBatch")

    found = ok(await call("search.search_memories").asyncio_detailed(
        client=api, body=m.SearchRequest(query="what is the dog called", user_id="bob",
                                         top_k=5, explain=True)), 200, "SearchResponse")
    assert found.query_style.value == "regular"
    assert found.results
    assert {r.memory.user_id for r in found.results} == {"bob"}
    assert found.results[0].memory.id == stored.items[0].id
    scores = [r.score for r in found.results]
    assert scores == sorted(scores, reverse=True)
    explanation = found.results[0].explanation.to_dict()
    assert "fusion" in explanation

    summary_style = ok(await call("search.search_memories").asyncio_detailed(
        client=api, body=m.SearchRequest(query="give me a recap of Bob", user_id="bob")),
        200, "SearchResponse")
    assert summary_style.query_style.value == "summary"
    # Without `explain`, no explanation (null or absent: the generated UNSET).
    assert all(not r.explanation for r in summary_style.results)

    nothing = ok(await call("search.search_memories").asyncio_detailed(
        client=api, body=m.SearchRequest(query="anything", user_id="nobody")),
        200, "SearchResponse")
    assert nothing.results == []

    refused = problem(await call("search.search_memories").asyncio_detailed(
        client=api, body=m.SearchRequest(query="dog", top_k=0)), 422)
    assert [e.field for e in refused.errors] == ["top_k"]


async def test_consolidation_runs_reads_and_reverts(api: Any) -> None:
    m = models()
    old = datetime(2026, 1, 1, tzinfo=UTC)
    ok(await call("memories.create_memories").asyncio_detailed(
        client=api, body=m.MemoryBatchCreate(items=[
            m.MemoryCreate(content=f"Dana ran {k} km on day {k}.", user_id="dana",
                           category="fitness", created_at=old + timedelta(minutes=k))
            for k in range(1, 5)])), 201, "MemoryBatch")
    request = m.ConsolidationRequest(user_id="dana", group_threshold=3)

    plan = ok(await call("consolidation.run_consolidation").asyncio_detailed(
        client=api, body=m.ConsolidationRequest.from_dict(
            {**request.to_dict(), "dry_run": True})), 200, "ConsolidationResult")
    assert plan.status.value == "planned"
    assert plan.dry_run is True

    run = ok(await call("consolidation.run_consolidation").asyncio_detailed(
        client=api, body=request), 200, "ConsolidationResult")
    assert run.status.value == "succeeded"
    # `simple` keeps the most relevant memory of the group and folds the others.
    assert (run.consolidated, run.created, run.deleted) == (3, 1, 3)
    (group,) = run.groups
    assert isinstance(group.summary_id, UUID)
    assert isinstance(group.kept_id, UUID)
    assert len(group.removed_ids) == 3
    assert run.request.user_id == "dana"
    assert isinstance(run.finished_at, datetime)

    archived = ok(await call("memories.list_memories").asyncio_detailed(
        client=api, user_id="dana", include_archived=True, fact_role="fact"),
        200, "MemoryPage")
    folded = [x for x in archived.items if x.archived_at is not None]
    assert {x.id for x in folded} == set(group.removed_ids)
    assert {x.consolidation_id for x in folded} == {run.id}

    read = ok(await call("consolidation.get_consolidation").asyncio_detailed(
        run.id, client=api), 200, "ConsolidationResult")
    assert read.to_dict() == run.to_dict()
    page = ok(await call("consolidation.list_consolidations").asyncio_detailed(
        client=api, user_id="dana"), 200, "ConsolidationPage")
    assert [(r.id, r.status.value) for r in page.items] == [
        (run.id, "succeeded"), (plan.id, "planned")]

    reverted = ok(await call("consolidation.revert_consolidation").asyncio_detailed(
        run.id, client=api), 200, "ConsolidationResult")
    assert isinstance(reverted.reverted_at, datetime)
    problem(await call("consolidation.revert_consolidation").asyncio_detailed(
        run.id, client=api), 409)
    active = ok(await call("memories.list_memories").asyncio_detailed(
        client=api, user_id="dana"), 200, "MemoryPage")
    assert len(active.items) == 4
    assert all(x.archived_at is None for x in active.items)

    # A request with no scope and no criteria would fold the whole tenant.
    problem(await call("consolidation.run_consolidation").asyncio_detailed(
        client=api, body=m.ConsolidationRequest()), 422)


async def test_sessions_append_read_configure_and_delete(api: Any) -> None:
    m = models()
    for i in range(3):
        turn = ok(await call("sessions.append_turn").asyncio_detailed(
            "s-erin", client=api, body=m.TurnCreate(
                role=m.TurnRole("user" if i % 2 == 0 else "assistant"),
                content=f"turn number {i}", user_id="erin")), 201, "AppendedTurn")
        assert turn.seq == i + 1
        assert turn.session_id == "s-erin"

    session = ok(await call("sessions.get_session").asyncio_detailed(
        "s-erin", client=api), 200, "Session")
    assert session.user_id == "erin"
    assert session.counts.turns == 3
    assert session.health.state.value == "healthy"

    context = ok(await call("sessions.get_session_context").asyncio_detailed(
        "s-erin", client=api, budget_tokens=1000), 200, "SessionContext")
    assert [t.content for t in context.turns] == [f"turn number {i}" for i in range(3)]
    assert context.budget_tokens == 1000

    turns = ok(await call("sessions.list_turns").asyncio_detailed(
        "s-erin", client=api, limit=2), 200, "TurnPage")
    assert [t.seq for t in turns.items] == [3, 2]  # newest first
    older = ok(await call("sessions.list_turns").asyncio_detailed(
        "s-erin", client=api, limit=2, cursor=turns.next_cursor), 200, "TurnPage")
    assert [t.seq for t in older.items] == [1]
    assert older.next_cursor is None

    configured = ok(await call("sessions.configure_session").asyncio_detailed(
        "s-erin", client=api, body=m.SessionConfig(strategy=m.SessionStrategy("truncation"))),
        200, "Session")
    assert configured.strategy.value == "truncation"
    events = ok(await call("sessions.list_session_events").asyncio_detailed(
        "s-erin", client=api), 200, "SessionEventPage")
    assert events.items

    listed = ok(await call("sessions.list_sessions").asyncio_detailed(
        client=api, user_id="erin"), 200, "SessionPage")
    assert [s.session_id for s in listed.items] == ["s-erin"]

    gone = await call("sessions.delete_session").asyncio_detailed("s-erin", client=api)
    assert gone.status_code == 204
    problem(await call("sessions.get_session").asyncio_detailed("s-erin", client=api), 404)

    ok(await call("sessions.append_turn").asyncio_detailed(
        "s-erin-2", client=api, body=m.TurnCreate(role=m.TurnRole("user"), content="hi",
                                                  user_id="erin")), 201, "AppendedTurn")
    deleted = ok(await call("sessions.delete_sessions").asyncio_detailed(
        client=api, user_id="erin"), 200, "SessionDeletion")
    assert deleted.deleted == 1


async def test_service_endpoints_and_problems_parse(api: Any, resources: Resources,
                                                    checker: AnswerChecker) -> None:
    m = models()
    health = ok(await call("service.get_health").asyncio_detailed(client=api), 200, "Health")
    assert health.status == "ok"
    ready = ok(await call("service.get_readiness").asyncio_detailed(client=api),
               200, "Readiness")
    assert ready.status == "ready"
    metrics = await call("service.get_metrics").asyncio_detailed(client=api)
    assert metrics.status_code == 200
    assert b"engram_http_requests_total" in metrics.content

    invalid = problem(await call("memories.create_memory").asyncio_detailed(
        client=api, body=m.MemoryCreate(content="")), 422)
    assert [e.field for e in invalid.errors] == ["content"]
    assert invalid.request_id

    # Without the key: the same generated call, an unauthenticated client.
    async with module("client").Client(
            base_url=BASE_URL, httpx_args={"transport": transport_to(resources),
                                           "event_hooks": {"response": [checker]}},
    ) as anonymous:
        problem(await call("search.search_memories").asyncio_detailed(
            client=anonymous, body=m.SearchRequest(query="dog")), 401)
