"""The served OpenAPI document against ../shared/api-contract.md: operationIds, methods and
paths, named body schemas, problem+json errors, and the Memory and Problem shapes.

CONTRACT lists every operation the contract defines. IMPLEMENTED names the ones the
service serves today; `test_the_implemented_operations_are_exactly_the_expected_ones`
fails when an operation appears or disappears, so adding one is a conscious change: move
its name into IMPLEMENTED (and fill in its schema names) in the same commit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from app.validation import METADATA_MAX_BYTES, METADATA_MAX_DEPTH, RESERVED_METADATA_KEYS

PROBLEM_JSON = "application/problem+json"


@dataclass(frozen=True)
class Operation:
    method: str
    path: str
    request: str | None = None  # component schema of the JSON body, None when no body
    response: str | None = None  # component schema of the success body, None when none
    success: frozenset[str] = frozenset({"200"})
    # Error statuses the contract implies this operation can return, beyond 401/422/503.
    errors: frozenset[int] = field(default_factory=frozenset)
    # Body schema names the contract does not fix yet: any named schema is accepted.
    open_names: bool = False


CONTRACT: dict[str, Operation] = {
    # Memories
    "createMemory": Operation("post", "/v1/memories", "MemoryCreate", "Memory",
                              frozenset({"201"}), frozenset({409, 502})),
    "createMemories": Operation("post", "/v1/memories/batch", "MemoryBatchCreate",
                                "MemoryBatch", frozenset({"201"}), frozenset({409, 502})),
    "getMemory": Operation("get", "/v1/memories/{id}", None, "Memory",
                           errors=frozenset({404})),
    "listMemories": Operation("get", "/v1/memories", None, "MemoryPage"),
    "updateMemory": Operation("patch", "/v1/memories/{id}", "MemoryUpdate", "Memory",
                              errors=frozenset({404, 502})),
    "deleteMemory": Operation("delete", "/v1/memories/{id}", None, None, frozenset({"204"}),
                              frozenset({404})),
    # Added beyond the contract's table: forgetting a scope (a user, an agent) at once,
    # and a memory's earlier states, read and erased.
    "deleteMemories": Operation("delete", "/v1/memories", None, "MemoryDeletion"),
    "getMemoryHistory": Operation("get", "/v1/memories/{id}/history", None, "MemoryHistory",
                                  errors=frozenset({404})),
    "deleteMemoryHistory": Operation("delete", "/v1/memories/{id}/history", None,
                                     "MemoryHistoryDeletion", errors=frozenset({404})),
    # Search
    "searchMemories": Operation("post", "/v1/search", "SearchRequest", "SearchResponse",
                                errors=frozenset({502})),
    # Consolidation
    "runConsolidation": Operation("post", "/v1/consolidations", "ConsolidationRequest",
                                  "ConsolidationResult", frozenset({"200", "202"})),
    "getConsolidation": Operation("get", "/v1/consolidations/{id}", None,
                                  "ConsolidationResult", errors=frozenset({404})),
    "listConsolidations": Operation("get", "/v1/consolidations", None, "ConsolidationPage"),
    "revertConsolidation": Operation("post", "/v1/consolidations/{id}/revert", None,
                                     "ConsolidationResult", errors=frozenset({404})),
    # Sessions
    "appendTurn": Operation("post", "/v1/sessions/{session_id}/turns", "TurnCreate",
                            "AppendedTurn", frozenset({"201"}), frozenset({409})),
    "getSessionContext": Operation("get", "/v1/sessions/{session_id}/context", None,
                                   "SessionContext", errors=frozenset({404})),
    "getSession": Operation("get", "/v1/sessions/{session_id}", None, "Session",
                            errors=frozenset({404})),
    # Added beyond the contract's table (it allows new endpoints): where a session's
    # events, which the design says are never silent, can be read; listing sessions and
    # a session's log; choosing a session's strategy; deleting one, or a user's.
    "listSessionEvents": Operation("get", "/v1/sessions/{session_id}/events", None,
                                   "SessionEventPage", errors=frozenset({404})),
    "listSessions": Operation("get", "/v1/sessions", None, "SessionPage"),
    "listTurns": Operation("get", "/v1/sessions/{session_id}/turns", None, "TurnPage",
                           errors=frozenset({404})),
    "configureSession": Operation("put", "/v1/sessions/{session_id}", "SessionConfig",
                                  "Session", frozenset({"200", "201"})),
    "deleteSession": Operation("delete", "/v1/sessions/{session_id}", None, None,
                               frozenset({"204"}), frozenset({404})),
    "deleteSessions": Operation("delete", "/v1/sessions", None, "SessionDeletion"),
}

# Served today: every operation above.
IMPLEMENTED = frozenset(CONTRACT)

# Operations that call the embedding provider, and every status its errors carry
# (app/providers/openai_embedder.py: upstream error and bad answers 502, unreachable
# 503, timeout 504). The contract: "declares problem+json for every 4xx/5xx it can return".
EMBEDDING_OPERATIONS = ("createMemory", "createMemories", "updateMemory", "searchMemories")
EMBEDDING_PROVIDER_STATUSES = frozenset({502, 503, 504})

CONTRACT_MEMORY_FIELDS = {
    "id", "content", "user_id", "agent_id", "session_id", "namespace", "category", "tags",
    "importance", "metadata", "source", "fact_role", "summary_of", "created_at",
    "updated_at", "expires_at", "archived_at", "consolidation_id",
}
NULLABLE_MEMORY_FIELDS = {"user_id", "agent_id", "session_id", "namespace", "expires_at",
                          "archived_at", "consolidation_id"}


@pytest.fixture
async def document(client: httpx.AsyncClient) -> dict[str, Any]:
    resp = await client.get("/openapi.json")
    assert resp.status_code == 200
    doc: dict[str, Any] = resp.json()
    return doc


def template(path: str) -> str:
    """A path with its parameter names erased: `{id}` and `{memory_id}` are one URL."""
    return re.sub(r"\{[^}]+\}", "{}", path)


def operations(doc: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    found: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method in {"get", "post", "put", "patch", "delete"}:
                found[op["operationId"]] = (method, path, op)
    return found


def ref_name(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref", "")
    assert ref.startswith("#/components/schemas/"), f"not a named schema: {schema}"
    return str(ref.rsplit("/", 1)[1])


def schema_named(doc: dict[str, Any], name: str) -> dict[str, Any]:
    schema: dict[str, Any] = doc["components"]["schemas"][name]
    return schema


def accepts_null(prop: dict[str, Any]) -> bool:
    variants = prop.get("anyOf") or prop.get("oneOf") or [prop]
    return any(v.get("type") == "null" for v in variants) or prop.get("nullable") is True


# Which operations exist -------------------------------------------------------------------


async def test_the_implemented_operations_are_exactly_the_expected_ones(
    document: dict[str, Any],
) -> None:
    served = set(operations(document))

    assert served & set(CONTRACT) == IMPLEMENTED


async def test_every_operation_has_a_unique_readable_operation_id_and_summary(
    document: dict[str, Any],
) -> None:
    seen: list[str] = []
    for item in document["paths"].values():
        for op in item.values():
            assert re.fullmatch(r"[a-z][A-Za-z]+", op.get("operationId", "")), op
            assert op.get("summary"), op["operationId"]
            seen.append(op["operationId"])
    assert len(seen) == len(set(seen))


@pytest.mark.parametrize("operation_id", sorted(IMPLEMENTED))
async def test_operation_has_the_contracts_method_and_path(
    document: dict[str, Any], operation_id: str
) -> None:
    expected = CONTRACT[operation_id]
    method, path, _ = operations(document)[operation_id]

    assert method == expected.method
    assert template(path) == template(expected.path)


# Bodies -----------------------------------------------------------------------------------


@pytest.mark.parametrize("operation_id", sorted(IMPLEMENTED))
async def test_bodies_use_the_contracts_named_schemas(
    document: dict[str, Any], operation_id: str
) -> None:
    expected = CONTRACT[operation_id]
    _, _, op = operations(document)[operation_id]

    body = op.get("requestBody")
    if expected.request is None and not expected.open_names:
        assert body is None
    if body is not None:
        assert set(body["content"]) == {"application/json"}
        name = ref_name(body["content"]["application/json"]["schema"])
        if expected.request is not None:
            assert name == expected.request

    successes = {s for s in op["responses"] if s.startswith("2")}
    assert successes == set(expected.success)
    for status in successes:
        content = op["responses"][status].get("content", {})
        if expected.response is None and not expected.open_names:
            assert content == {}, status
            continue
        assert set(content) == {"application/json"}, status
        name = ref_name(content["application/json"]["schema"])
        if expected.response is not None:
            assert name == expected.response


async def test_every_json_body_in_the_document_is_a_named_schema(
    document: dict[str, Any],
) -> None:
    for operation_id, (_, _, op) in operations(document).items():
        bodies = [op.get("requestBody", {}).get("content", {})]
        bodies += [resp.get("content", {}) for resp in op["responses"].values()]
        for content in bodies:
            for media, spec in content.items():
                if media.endswith("json"):
                    assert "$ref" in spec["schema"], (operation_id, media, spec)


def enum_refs(schema: dict[str, Any]) -> set[str]:
    """The components a schema refers to, directly or as one of its anyOf branches."""
    branches = schema.get("anyOf", [schema])
    return {b["$ref"].rsplit("/", 1)[-1] for b in branches if "$ref" in b}


SHARED_ENUMS = {
    # component: (values, the (schema, property) pairs that must refer to it)
    "SessionStrategy": ({"none", "truncation", "rolling_summary"},
                        [("Session", "strategy"), ("SessionConfig", "strategy"),
                         ("SessionContext", "strategy"), ("SessionContext", "mode")]),
    "SessionHealthState": ({"healthy", "retry", "degraded", "recovering"},
                           [("SessionHealth", "state")]),
    "TurnRole": ({"user", "assistant", "system", "tool"},
                 [("Turn", "role"), ("TurnCreate", "role"), ("AppendedTurn", "role")]),
    "FactRole": ({"fact", "summary"}, [("Memory", "fact_role")]),
    "ConsolidationStrategy": ({"simple", "llm", "dual_mode"},
                              [("ConsolidationRequest", "strategy"),
                               ("ConsolidationComposition", "strategy")]),
}


async def test_a_value_set_used_in_several_places_is_one_named_enum(
    document: dict[str, Any],
) -> None:
    # One enum per concept in a generated client, not one per field that carries it.
    schemas = document["components"]["schemas"]
    for name, (values, users) in SHARED_ENUMS.items():
        assert set(schemas[name]["enum"]) == values, name
        for model, prop in users:
            assert enum_refs(schemas[model]["properties"][prop]) == {name}, (model, prop)
    _, _, listing = operations(document)["listSessions"]
    params = {p["name"]: p["schema"] for p in listing["parameters"]}
    assert enum_refs(params["strategy"]) == {"SessionStrategy"}
    assert enum_refs(params["health"]) == {"SessionHealthState"}
    # The memories' filter was a pattern: a generated client typed it as any string.
    for operation_id in ("listMemories", "deleteMemories"):
        _, _, operation = operations(document)[operation_id]
        params = {p["name"]: p["schema"] for p in operation["parameters"]}
        assert enum_refs(params["fact_role"]) == {"FactRole"}, operation_id


async def test_the_document_says_a_blank_text_value_is_refused(document: dict[str, Any]) -> None:
    """Blank content, tags, categories and scope ids are 422s; the document said nothing
    of it, so a generated client's validation let them through."""
    schemas = document["components"]["schemas"]
    create = schemas["MemoryCreate"]["properties"]

    def strings(schema: dict[str, Any]) -> list[dict[str, Any]]:
        found = [s for s in schema.get("anyOf", [schema]) if s.get("type") == "string"]
        items = [s["items"] for s in schema.get("anyOf", [schema]) if "items" in s]
        return found + [i for i in items if i.get("type") == "string"]

    for name, refused in (("content", BLANK_REFUSED), ("category", BLANK_REFUSED),
                          ("tags", BLANK_REFUSED), ("source", BLANK_REFUSED),
                          ("user_id", ASCII_BLANK_REFUSED),
                          ("agent_id", ASCII_BLANK_REFUSED),
                          ("session_id", ASCII_BLANK_REFUSED),
                          ("namespace", ASCII_BLANK_REFUSED)):
        declared = strings(create[name])
        assert declared, name
        assert all(s.get("pattern") == refused for s in declared), name
    # A blank query and source were declared as minLength 1 alone (an exploratory probe).
    assert strings(schemas["SearchRequest"]["properties"]["query"])[0]["pattern"] == \
        BLANK_REFUSED
    # The pattern refuses what the service refuses, and no more.
    pattern = re.compile(BLANK_REFUSED)
    for blank in (" ", "\t\n", "\u3000", "\u00a0", "\u2028\u0085", "\u2007\u202f"):
        assert not pattern.search(blank), repr(blank)
    for kept in ("a", " a ", "\u200b", "\ufeff", "\u001f"):
        assert pattern.search(kept), repr(kept)


# Scope ids are kept as sent, and blank only of ASCII white space.
ASCII_BLANK_REFUSED = "[^ \\t\\n\\r\\f\\v]"
# Unicode's White_Space: what the service strips from content and refuses alone.
BLANK_REFUSED = ("[^\\t-\\r \\u0085\\u00a0\\u1680\\u2000-\\u200a\\u2028\\u2029"
                 "\\u202f\\u205f\\u3000]")


async def test_a_search_result_always_carries_its_explanation_field(
    document: dict[str, Any],
) -> None:
    """Always sent (null without `explain`), so required: a generated client's field is
    then not an optional that is never missing."""
    result = document["components"]["schemas"]["SearchResult"]
    assert "explanation" in result["required"]


# Errors -----------------------------------------------------------------------------------


async def test_every_error_response_declares_problem_json(document: dict[str, Any]) -> None:
    for operation_id, (_, _, op) in operations(document).items():
        for status, resp in op["responses"].items():
            if status[0] in "45":
                content = resp.get("content", {})
                assert PROBLEM_JSON in content, (operation_id, status)
                assert ref_name(content[PROBLEM_JSON]["schema"]) == "Problem"


async def test_every_response_declares_the_request_id_header(
    client: httpx.AsyncClient, document: dict[str, Any],
) -> None:
    """As the service sends it (app/service/request_id.py): on every answer, errors too."""
    header = document["components"]["headers"]["X-Request-ID"]
    assert header["schema"] == {"type": "string", "maxLength": 128}
    assert header["required"] is True
    for operation_id, (_, _, op) in operations(document).items():
        for status, resp in op["responses"].items():
            assert resp["headers"]["X-Request-ID"] == {
                "$ref": "#/components/headers/X-Request-ID"}, (operation_id, status)
    answered = await client.get("/v1/memories", headers={"X-Request-ID": "r" * 128})
    assert answered.headers["x-request-id"] == "r" * 128


async def test_a_keyed_operations_success_declares_the_replay_header(
    client: httpx.AsyncClient, document: dict[str, Any],
) -> None:
    """The README promised `Idempotent-Replayed: true`, which no answer declared (found by
    an exploratory probe)."""
    declared = sorted(
        (operation_id, status) for operation_id, (_, _, op) in operations(document).items()
        for status, resp in op["responses"].items()
        if "Idempotent-Replayed" in resp.get("headers", {}))
    # And on the 410 a key whose stored answer was erased gets, which is a replay too.
    assert declared == [("appendTurn", "201"), ("appendTurn", "410"),
                        ("createMemories", "201"), ("createMemories", "410"),
                        ("createMemory", "201"), ("createMemory", "410")]
    for _, _, op in operations(document).values():
        if "415" in op["responses"]:
            assert {"Accept-Encoding", "Accept-Patch"} <= set(op["responses"]["415"]["headers"])
    first = await client.post("/v1/memories", json={"content": "x"},
                              headers={"Idempotency-Key": "replayed-1"})
    again = await client.post("/v1/memories", json={"content": "x"},
                              headers={"Idempotency-Key": "replayed-1"})
    assert "idempotent-replayed" not in first.headers
    assert again.headers["idempotent-replayed"] == "true"


async def test_the_headers_answers_carry_are_declared(
    client: httpx.AsyncClient, document: dict[str, Any],
) -> None:
    """Found by an exploratory probe with generated clients: Retry-After (on 429 and some
    503s), WWW-Authenticate (401) and a run's Location were sent and declared nowhere, so a
    typed client had no field for them."""
    for operation_id, (_, _, op) in operations(document).items():
        for status, resp in op["responses"].items():
            headers = resp["headers"]
            if status == "429":
                assert headers["Retry-After"]["required"] is True, operation_id
            if status == "503":
                assert headers["Retry-After"]["required"] is False, operation_id
            if status == "401":
                assert headers["WWW-Authenticate"]["required"] is True, operation_id
            assert ("Location" in headers) == (
                operation_id == "runConsolidation" and status in ("200", "202")), (
                operation_id, status)
    run = await client.post("/v1/consolidations", json={"user_id": "nobody"})
    assert run.headers["location"] == f"/v1/consolidations/{run.json()['id']}"


async def test_the_service_endpoints_declare_the_414_and_431_a_long_target_or_head_gets(
    document: dict[str, Any],
) -> None:
    """The protocol answers them for any path (app/service/http_protocol.py); /healthz,
    /readyz and /metrics declared no error at all, or only 503."""
    for path in ("/healthz", "/readyz", "/metrics"):
        assert {"414", "431"} <= set(document["paths"][path]["get"]["responses"]), path


@pytest.mark.parametrize("operation_id", sorted(IMPLEMENTED))
async def test_operation_declares_the_errors_it_can_return(
    document: dict[str, Any], operation_id: str
) -> None:
    _, _, op = operations(document)[operation_id]
    declared = {int(s) for s in op["responses"] if s[0] in "45"}

    # Every /v1 call can be unauthenticated, its tenant suspended, invalid, past its
    # tenant's rate limit, fail unexpectedly, or meet an unreachable database.
    assert declared >= {401, 403, 422, 429, 500, 503, *CONTRACT[operation_id].errors}


@pytest.mark.parametrize(
    "operation_id", [op for op in EMBEDDING_OPERATIONS if op in IMPLEMENTED]
)
async def test_operations_that_embed_declare_every_embedding_provider_status(
    document: dict[str, Any], operation_id: str
) -> None:
    """An embeddings API that times out makes these answer 504 (see
    tests/integration/providers/test_openai_embedder.py); the document must say so."""
    _, _, op = operations(document)[operation_id]
    declared = {int(s) for s in op["responses"] if s[0] in "45"}

    assert declared >= EMBEDDING_PROVIDER_STATUSES, (
        f"{operation_id} does not declare {sorted(EMBEDDING_PROVIDER_STATUSES - declared)}"
    )


# Schemas ----------------------------------------------------------------------------------


async def test_the_contracts_schema_names_are_components(document: dict[str, Any]) -> None:
    names = set(document["components"]["schemas"])
    wanted = {"Problem"} | {
        name
        for operation_id in IMPLEMENTED
        for name in (CONTRACT[operation_id].request, CONTRACT[operation_id].response)
        if name is not None
    }

    assert wanted >= {"MemoryCreate", "MemoryBatchCreate", "MemoryUpdate", "Memory",
                      "MemoryBatch", "MemoryPage", "Problem"}
    assert names >= wanted


async def test_memory_has_every_field_of_the_contract(document: dict[str, Any]) -> None:
    memory = schema_named(document, "Memory")
    props = memory["properties"]

    assert set(props) >= CONTRACT_MEMORY_FIELDS
    for name in NULLABLE_MEMORY_FIELDS:
        assert accepts_null(props[name]), name
    for name in CONTRACT_MEMORY_FIELDS - NULLABLE_MEMORY_FIELDS:
        assert not accepts_null(props[name]), name
    assert set(schema_named(document, "FactRole")["enum"]) == {"fact", "summary"}
    assert props["id"]["format"] == "uuid"
    assert props["created_at"]["format"] == "date-time"
    assert props["summary_of"]["items"]["format"] == "uuid"


async def test_batch_and_page_wrap_memories(document: dict[str, Any]) -> None:
    batch = schema_named(document, "MemoryBatch")["properties"]
    page = schema_named(document, "MemoryPage")["properties"]
    batch_create = schema_named(document, "MemoryBatchCreate")["properties"]

    assert ref_name(batch["items"]["items"]) == "Memory"
    assert ref_name(page["items"]["items"]) == "Memory"
    assert accepts_null(page["next_cursor"])
    assert ref_name(batch_create["items"]["items"]) == "MemoryCreate"
    assert (batch_create["items"]["minItems"], batch_create["items"]["maxItems"]) == (1, 1000)


async def test_problem_has_the_rfc_9457_fields_and_field_errors(
    document: dict[str, Any],
) -> None:
    problem = schema_named(document, "Problem")

    assert set(problem["properties"]) >= {"type", "title", "status", "detail", "errors"}
    # "Problem bodies always carry detail."
    assert set(problem["required"]) >= {"type", "title", "status", "detail"}
    errors = problem["properties"]["errors"]
    variants = errors.get("anyOf", [errors])
    [array] = [v for v in variants if v.get("type") == "array"]
    field_error = schema_named(document, ref_name(array["items"]))
    assert set(field_error["properties"]) >= {"field", "message"}


BOUNDS = frozenset({"maxLength", "pattern", "maxItems"})


def unbounded(schema: dict[str, Any], where: str, doc: dict[str, Any],
              seen: set[str]) -> list[str]:
    """Every place under `schema` where a client may send a string, list or object with
    no stated maximum (a string's maxLength, enum or pattern; a list's maxItems; a free
    object's description saying "at most")."""
    if "$ref" in schema:
        name = ref_name(schema)
        if name in seen:
            return []
        seen.add(name)
        return unbounded(schema_named(doc, name), name, doc, seen)
    found: list[str] = []
    # A bound beside anyOf applies to each variant, as JSON Schema reads it.
    beside = {k: v for k, v in schema.items() if k in BOUNDS}
    for variant in schema.get("anyOf", []) + schema.get("oneOf", []) + schema.get("allOf", []):
        found += unbounded({**beside, **variant}, where, doc, seen)
    kind = schema.get("type")
    if kind == "string" and not {"maxLength", "enum", "const", "pattern", "format"} & set(schema):
        found.append(f"{where}: string")
    if kind == "array":
        if "maxItems" not in schema:
            found.append(f"{where}: list")
        found += unbounded(schema.get("items", {}), f"{where}[]", doc, seen)
    if kind == "object":
        for prop, sub in schema.get("properties", {}).items():
            found += unbounded(sub, f"{where}.{prop}", doc, seen)
        if "properties" not in schema and "at most" not in schema.get("description", ""):
            found.append(f"{where}: object")
    return found


async def test_every_string_list_and_object_a_client_sends_has_a_documented_maximum(
    document: dict[str, Any],
) -> None:
    # The contract: "every string, list and object has a documented maximum".
    found: list[str] = []
    seen: set[str] = set()
    for name, (method, path, op) in operations(document).items():
        for param in op.get("parameters", []):
            found += unbounded(param["schema"], f"{name} {param['name']}", document, seen)
        for media in op.get("requestBody", {}).get("content", {}).values():
            found += unbounded(media["schema"], f"{method} {path}", document, seen)

    assert seen >= {"MemoryCreate", "SearchRequest", "ConsolidationRequest"}
    assert found == []


async def test_metadata_states_the_limits_the_service_enforces(
    document: dict[str, Any],
) -> None:
    # JSON Schema has no keyword for a byte size or a depth: a client author learns them
    # from the description, which must carry the enforced values.
    for name in ("MemoryCreate", "MemoryUpdate"):
        metadata = schema_named(document, name)["properties"]["metadata"]
        variants = metadata.get("anyOf", [metadata])
        [obj] = [v for v in variants if v.get("type") == "object"]
        description = obj["description"]
        assert f"{METADATA_MAX_BYTES} bytes" in description, name
        assert f"{METADATA_MAX_DEPTH} levels" in description, name
        for key in RESERVED_METADATA_KEYS:
            assert key in description, name


async def test_memory_update_declares_what_a_patch_may_send(document: dict[str, Any]) -> None:
    # A PATCH names at least one field; only expires_at may be null (it clears the
    # expiry); the others are 422 when null, so a generated client must not offer null.
    update = schema_named(document, "MemoryUpdate")
    props = update["properties"]

    assert update["minProperties"] == 1
    assert not update.get("required")
    assert accepts_null(props["expires_at"])
    for name in ("content", "category", "tags", "importance", "metadata"):
        assert not accepts_null(props[name]), name
    assert props["content"]["maxLength"] == 32768
    assert props["tags"]["maxItems"] == 64


async def test_list_memories_pages_with_cursor_and_limit(document: dict[str, Any]) -> None:
    _, _, op = operations(document)["listMemories"]
    params = {p["name"]: p for p in op["parameters"] if p["in"] == "query"}

    assert "cursor" in params
    limit = params["limit"]["schema"]
    assert (limit["default"], limit["maximum"], limit["minimum"]) == (50, 500, 1)


async def test_every_optional_field_a_client_sends_that_may_not_be_null_declares_its_default(
    document: dict[str, Any],
) -> None:
    """Found by an exploratory contract probe: MemoryCreate's tags and metadata declared
    none (the server fills in [] and {}), a generator read them as defaulting to null,
    and its client sent "tags": null, which is 422. A PATCH body is left out: there an
    absent field means "unchanged", which no default says."""
    schemas = document["components"]["schemas"]
    sent: set[str] = set()
    for method, _, op in operations(document).values():
        for media in op.get("requestBody", {}).get("content", {}).values():
            if method != "patch":
                sent.add(media["schema"]["$ref"].rsplit("/", 1)[-1])
    missing = [f"{name}.{field}" for name in sorted(sent)
               for field, schema in schemas[name].get("properties", {}).items()
               if field not in schemas[name].get("required", []) and "default" not in schema
               and {"type": "null"} not in schema.get("anyOf", [])]

    assert sent >= {"MemoryCreate", "SearchRequest", "TurnCreate", "ConsolidationRequest"}
    assert missing == []


def integer_schemas(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        if node.get("type") == "integer":
            found.append((path, node))
        for key, value in node.items():
            found += integer_schemas(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found += integer_schemas(value, f"{path}[{i}]")
    return found


async def test_an_integer_a_32_bit_type_cannot_hold_declares_int64(
    document: dict[str, Any],
) -> None:
    """older_than_seconds goes to 100 years (3,153,600,000 s): a generated Java client
    typed it Integer, could not send such a value, and failed to read any run that named
    one (an exploratory probe)."""
    wide = [(path, schema) for path, schema in integer_schemas(document)
            if schema.get("maximum", 0) > 2**31 - 1]
    assert wide, "nothing checked"
    assert [path for path, schema in wide if schema.get("format") != "int64"] == []


async def test_a_tagged_union_is_one_named_schema_wherever_it_is_used(
    document: dict[str, Any],
) -> None:
    """Found by an exploratory probe with openapi-generator: written inline at each use,
    the selector and op unions became two classes each in a Java client, and a run's
    `composition.selector` could not be passed back as a new request's `selector`."""
    schemas = document["components"]["schemas"]

    def inline_unions(node: Any) -> int:
        if isinstance(node, dict):
            return int("discriminator" in node and "oneOf" in node) + sum(
                inline_unions(v) for v in node.values())
        if isinstance(node, list):
            return sum(inline_unions(v) for v in node)
        return 0

    properties = [schema.get("properties", {}) for schema in schemas.values()]
    assert sum(inline_unions(props) for props in properties) == 0
    request = schemas["ConsolidationRequest"]["properties"]
    composition = schemas["ConsolidationComposition"]["properties"]
    for prop, name in (("selector", "Selector"), ("op", "Op")):
        ref = {"$ref": f"#/components/schemas/{name}"}
        assert ref in request[prop]["anyOf"]
        assert composition[prop]["$ref"] == ref["$ref"]
        assert schemas[name]["discriminator"]["propertyName"] == "name"
