"""Every refused input answers 422 problem+json naming the bad field, and writes nothing."""

from __future__ import annotations

import base64
import codecs
import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

PROBLEM_JSON = "application/problem+json"


def assert_validation_problem(resp: httpx.Response, field: str) -> dict[str, Any]:
    """A 422 problem+json whose `errors` names `field`."""
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"] == PROBLEM_JSON
    assert "Traceback" not in resp.text
    body = resp.json()
    assert body["status"] == 422
    assert body["title"] == "Validation error"
    assert body["type"].endswith("/validation_error")
    assert isinstance(body["detail"], str)
    assert body["detail"]
    assert isinstance(body["errors"], list)
    assert body["errors"]
    for error in body["errors"]:
        assert set(error) == {"field", "message"}, error
        assert isinstance(error["field"], str)
        assert error["field"]
        assert isinstance(error["message"], str)
        assert error["message"]
    fields = [error["field"] for error in body["errors"]]
    assert field in fields, fields
    return body


async def assert_nothing_written(client: httpx.AsyncClient) -> None:
    listed = await client.get("/v1/memories", params={"include_archived": "true"})
    assert listed.status_code == 200
    assert listed.json() == {"items": [], "next_cursor": None}


async def create(client: httpx.AsyncClient, **fields: Any) -> dict[str, Any]:
    resp = await client.post("/v1/memories", json={"content": "a valid memory", **fields})
    assert resp.status_code == 201, resp.text
    return resp.json()


def raw_json(text: str) -> dict[str, Any]:
    """Keyword arguments posting `text` verbatim as a JSON body."""
    return {"content": text.encode(), "headers": {"content-type": "application/json"}}


def forged_cursor(created_at: str, memory_id: str) -> str:
    raw = json.dumps([created_at, memory_id], separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


# --- create: one bad field each -------------------------------------------------------------

BAD_CREATE_BODIES = [
    pytest.param({"content": ""}, "content", id="empty-content"),
    pytest.param({"content": "   \n\t  "}, "content", id="whitespace-only-content"),
    pytest.param({"content": "x" * 32769}, "content", id="content-over-32768"),
    pytest.param({"content": "a\x00b"}, "content", id="nul-in-content"),
    pytest.param({}, "content", id="content-missing"),
    pytest.param({"content": "x", "metadata": {"k": "a\x00b"}}, "metadata",
                 id="nul-in-metadata-value"),
    pytest.param({"content": "x", "metadata": {"k\x00": "v"}}, "metadata",
                 id="nul-in-metadata-key"),
    pytest.param({"content": "x", "metadata": {"k": {"deep": ["ok", "x\x00"]}}}, "metadata",
                 id="nul-in-nested-metadata-value"),
    pytest.param({"content": "x", "importance": -0.01}, "importance", id="importance-below-0"),
    pytest.param({"content": "x", "importance": 1.01}, "importance", id="importance-above-1"),
    pytest.param({"content": "x", "importance": "NaN"}, "importance", id="importance-NaN-string"),
    pytest.param({"content": "x", "importance": "nan"}, "importance", id="importance-nan-string"),
    pytest.param({"content": "x", "importance": "Infinity"}, "importance",
                 id="importance-Infinity-string"),
    pytest.param({"content": "x", "importance": "-inf"}, "importance",
                 id="importance-minus-inf-string"),
    pytest.param({"content": "x", "importance": True}, "importance", id="importance-true"),
    pytest.param({"content": "x", "importance": "0.5"}, "importance", id="importance-string"),
    pytest.param({"content": "x", "metadata": {"summary_of": []}}, "metadata",
                 id="reserved-metadata-summary_of"),
    pytest.param({"content": "x", "metadata": {"fact_role": "fact"}}, "metadata",
                 id="reserved-metadata-fact_role"),
    pytest.param({"content": "x", "metadata": {"blob": "x" * 16400}}, "metadata",
                 id="metadata-over-16KiB"),
    pytest.param({"content": "x", "metadata": {"blob": "\u00e9" * 9000}}, "metadata",
                 id="metadata-over-16KiB-in-utf8-bytes"),
    pytest.param({"content": "x", "fact_role": "summary"}, "fact_role",
                 id="unknown-field-fact_role"),
    pytest.param({"content": "x", "summary_of": [str(uuid.uuid4())]}, "summary_of",
                 id="unknown-field-summary_of"),
    pytest.param({"content": "x", "foo": 1}, "foo", id="unknown-field-foo"),
    pytest.param({"content": "x", "id": str(uuid.uuid4())}, "id", id="unknown-field-id"),
    pytest.param({"content": "x", "created_at": "2025-01-01T12:00:00"}, "created_at",
                 id="naive-created_at"),
    pytest.param({"content": "x", "expires_at": "2030-01-01T12:00:00"}, "expires_at",
                 id="naive-expires_at"),
    # Seconds are not a date-time: pydantic alone would read 3600 as 1970-01-01T01:00Z.
    pytest.param({"content": "x", "expires_at": 3600}, "expires_at", id="number-expires_at"),
    pytest.param({"content": "x", "expires_at": "1893456000"}, "expires_at",
                 id="digits-expires_at"),
    pytest.param({"content": "x", "created_at": 0}, "created_at", id="number-created_at"),
    pytest.param({"content": "x", "created_at": 1.7e9}, "created_at",
                 id="float-created_at"),
    pytest.param({"content": "x", "created_at": True}, "created_at", id="bool-created_at"),
    pytest.param({"content": "x", "tags": [f"t{i}" for i in range(65)]}, "tags",
                 id="65-tags"),
    pytest.param({"content": "x", "tags": ["ok", "t" * 101]}, "tags.1", id="tag-too-long"),
    pytest.param({"content": "x", "tags": ["   "]}, "tags.0", id="blank-tag"),
    pytest.param({"content": "x", "category": "c" * 101}, "category", id="category-too-long"),
    pytest.param({"content": "x", "user_id": "u" * 256}, "user_id", id="user_id-too-long"),
    pytest.param({"content": "x", "user_id": "  "}, "user_id", id="blank-user_id"),
    # Kept exactly by jsonb and read back as 309 digits: a 16 KB object read as 620 KB.
    pytest.param({"content": "x", "metadata": {"v": [1.0, 1e308]}}, "metadata",
                 id="metadata-number-of-309-digits"),
    pytest.param({"content": "x", "metadata": {"v": 5e-324}}, "metadata",
                 id="metadata-number-of-324-decimals"),
    # Taken whole before (JavaScript reads it as Infinity).
    pytest.param({"content": "x", "metadata": {"v": 10**41}}, "metadata",
                 id="metadata-integer-of-42-digits"),
    pytest.param({"content": "x", "namespace": "\t\n"}, "namespace", id="blank-namespace"),
    pytest.param({"content": "x", "source": "summary"}, "source", id="source-summary-reserved"),
    pytest.param({"content": "x", "source": " summary "}, "source",
                 id="source-summary-reserved-after-trim"),
]


@pytest.mark.parametrize(("payload", "field"), BAD_CREATE_BODIES)
async def test_create_with_a_bad_field_is_422_naming_it_and_writes_nothing(
    client: httpx.AsyncClient, payload: dict[str, Any], field: str
) -> None:
    resp = await client.post("/v1/memories", json=payload)
    assert_validation_problem(resp, field)
    await assert_nothing_written(client)


BAD_RAW_BODIES = [
    pytest.param('{"content": "abc\\ud800def"}', "content", id="lone-high-surrogate-content"),
    pytest.param('{"content": "abc\\udc00"}', "content", id="lone-low-surrogate-content"),
    pytest.param('{"content": "x", "tags": ["\\ud800"]}', "tags.0", id="lone-surrogate-tag"),
    pytest.param('{"content": "x", "metadata": {"k": "\\ud800"}}', "metadata",
                 id="lone-surrogate-metadata-value"),
    pytest.param('{"content": "x", "metadata": {"\\ud800": 1}}', "metadata",
                 id="lone-surrogate-metadata-key"),
    pytest.param('{"content": "x", "importance": NaN}', "importance",
                 id="importance-NaN-literal"),
    pytest.param('{"content": "x", "importance": Infinity}', "importance",
                 id="importance-Infinity-literal"),
]


@pytest.mark.parametrize(("text", "field"), BAD_RAW_BODIES)
async def test_create_with_unstorable_raw_json_is_422_naming_the_field_and_writes_nothing(
    client: httpx.AsyncClient, text: str, field: str
) -> None:
    resp = await client.post("/v1/memories", **raw_json(text))
    assert_validation_problem(resp, field)
    await assert_nothing_written(client)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"content": "x", "metadata": {"score": NaN}}', id="NaN"),
        pytest.param('{"content": "x", "metadata": {"score": Infinity}}', id="Infinity"),
        pytest.param('{"content": "x", "metadata": {"scores": [-Infinity]}}', id="-Infinity"),
        pytest.param('{"content": "x", "metadata": {"big": 1e400}}', id="overflowing-1e400"),
    ],
)
async def test_create_with_non_finite_number_in_metadata_is_422_not_500(
    client: httpx.AsyncClient, text: str
) -> None:
    # Python's JSON parser accepts NaN/Infinity (and turns 1e400 into inf); PostgreSQL's
    # jsonb does not, so they must be refused as invalid input, not fail the INSERT.
    resp = await client.post("/v1/memories", **raw_json(text))
    assert_validation_problem(resp, "metadata")
    await assert_nothing_written(client)


async def test_create_with_deeply_nested_metadata_is_422_not_500(
    client: httpx.AsyncClient,
) -> None:
    # 300 levels of nesting is 600 bytes, far under the 16 KiB size bound.
    text = '{"content": "x", "metadata": {"k": ' + "[" * 300 + "]" * 300 + "}}"
    resp = await client.post("/v1/memories", **raw_json(text))
    assert_validation_problem(resp, "metadata")
    await assert_nothing_written(client)


@pytest.mark.parametrize("field", ["created_at", "expires_at"])
@pytest.mark.parametrize("moment", [
    # Valid RFC 3339, but outside year 1..9999 once converted to UTC.
    "0001-01-01T00:00:00+01:00", "9999-12-31T23:00:00-05:00",
    # The first and last representable instants, which asyncpg writes as -infinity and
    # infinity: a memory created at -infinity had no day for its text index (a 500).
    "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z", "0001-01-01T01:00:00+01:00",
])
async def test_create_with_datetime_outside_the_representable_range_is_422_not_500(
    client: httpx.AsyncClient, field: str, moment: str
) -> None:
    resp = await client.post("/v1/memories", json={"content": "x", field: moment})
    assert_validation_problem(resp, field)
    await assert_nothing_written(client)
    batch = await client.post("/v1/memories/batch",
                              json={"items": [{"content": "y"}, {"content": "x", field: moment}]})
    assert_validation_problem(batch, f"items.1.{field}")
    await assert_nothing_written(client)


@pytest.mark.parametrize(("field", "moment"), [
    ("created_at", "0001-01-01T00:00:00.000001Z"), ("expires_at", "9999-12-31T23:59:59.999998Z"),
])
async def test_create_just_inside_the_range_is_stored_as_sent(
    client: httpx.AsyncClient, field: str, moment: str
) -> None:
    resp = await client.post("/v1/memories", json={"content": "x", field: moment})
    assert resp.status_code == 201, resp.text
    assert resp.json()[field] == moment
    got = await client.get(f"/v1/memories/{resp.json()['id']}")
    assert got.json()[field] == moment


async def test_a_creation_time_in_the_future_is_422_naming_the_field(
    client: httpx.AsyncClient,
) -> None:
    """Found by a contract probe: a memory created in year 9000 headed every newest-first
    listing and took the full recency bonus in search until then."""
    soon = (datetime.now(UTC) + timedelta(minutes=1)).isoformat()
    later = (datetime.now(UTC) + timedelta(minutes=10)).isoformat()

    resp = await client.post("/v1/memories", json={"content": "x", "created_at": later})
    batch = await client.post("/v1/memories/batch", json={
        "items": [{"content": "y"}, {"content": "x", "created_at": "9000-01-01T00:00:00Z"},
                  {"content": "z", "created_at": later}]})

    assert_validation_problem(resp, "created_at")
    assert_validation_problem(batch, "items.1.created_at")
    assert [e["field"] for e in batch.json()["errors"]] == ["items.1.created_at",
                                                            "items.2.created_at"]
    # Named beside the other bad fields (found by an exploratory probe: it was checked
    # after them, so a bad importance elsewhere hid it until fixed).
    both = await client.post("/v1/memories/batch", json={
        "items": [{"content": "x", "created_at": later}, {"content": "y", "importance": 3}]})
    one = await client.post("/v1/memories", json={"content": "x", "created_at": later,
                                                  "importance": 5})
    assert_validation_problem(both, "items.0.created_at")
    assert {e["field"] for e in both.json()["errors"]} == {"items.0.created_at",
                                                           "items.1.importance"}
    assert {e["field"] for e in one.json()["errors"]} == {"created_at", "importance"}
    await assert_nothing_written(client)
    # A client's clock a little ahead of the service's is taken.
    skewed = await client.post("/v1/memories", json={"content": "x", "created_at": soon})
    assert skewed.status_code == 201, skewed.text
    # As now: kept as sent, it was later than the updated_at of the same write (a probe).
    assert skewed.json()["created_at"] == skewed.json()["updated_at"]


async def test_filters_at_the_instants_stored_as_infinity_are_422(
    client: httpx.AsyncClient,
) -> None:
    listed = await client.get("/v1/memories", params={"created_after": "0001-01-01T00:00:00Z"})
    assert_validation_problem(listed, "query.created_after")
    searched = await client.post("/v1/search", json={
        "query": "x", "created_before": "9999-12-31T23:59:59.999999Z"})
    assert_validation_problem(searched, "created_before")


# --- create: boundaries that must be accepted ----------------------------------------------


async def test_create_with_content_of_exactly_32768_chars_is_accepted(
    client: httpx.AsyncClient,
) -> None:
    body = await create(client, content="x" * 32768)
    assert len(body["content"]) == 32768
    got = await client.get(f"/v1/memories/{body['id']}")
    assert len(got.json()["content"]) == 32768


async def test_create_counts_content_length_in_characters_after_trimming(
    client: httpx.AsyncClient,
) -> None:
    body = await create(client, content="  " + "\u00e9" * 32768 + "\n")
    assert body["content"] == "\u00e9" * 32768


async def test_create_with_64_tags_and_100_char_tag_is_accepted(
    client: httpx.AsyncClient,
) -> None:
    tags = [f"t{i}" for i in range(63)] + ["t" * 100]
    body = await create(client, tags=tags)
    assert body["tags"] == tags


async def test_create_with_metadata_just_under_16KiB_is_accepted(
    client: httpx.AsyncClient,
) -> None:
    body = await create(client, metadata={"blob": "x" * 16000})
    assert body["metadata"] == {"blob": "x" * 16000}


async def test_create_with_importance_bounds_0_and_1_is_accepted(
    client: httpx.AsyncClient,
) -> None:
    assert (await create(client, importance=0))["importance"] == 0
    assert (await create(client, importance=1))["importance"] == 1


# --- batch ----------------------------------------------------------------------------------


async def test_batch_with_zero_items_is_422_naming_items(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/memories/batch", json={"items": []})
    assert_validation_problem(resp, "items")
    await assert_nothing_written(client)


async def test_batch_with_1001_items_is_422_naming_items_and_writes_nothing(
    client: httpx.AsyncClient,
) -> None:
    items = [{"content": f"item {i}"} for i in range(1001)]
    resp = await client.post("/v1/memories/batch", json={"items": items})
    assert_validation_problem(resp, "items")
    await assert_nothing_written(client)


async def test_batch_with_exactly_1000_items_is_accepted(client: httpx.AsyncClient) -> None:
    items = [{"content": f"item {i}"} for i in range(1000)]
    resp = await client.post("/v1/memories/batch", json={"items": items})
    assert resp.status_code == 201, resp.text
    assert len(resp.json()["items"]) == 1000


async def test_batch_without_items_key_is_422_naming_items(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/memories/batch", json={"content": "not a batch"})
    assert_validation_problem(resp, "items")
    await assert_nothing_written(client)


@pytest.mark.parametrize(
    ("bad_item", "field"),
    [
        pytest.param({"content": "   "}, "items.3.content", id="blank-content"),
        pytest.param({"content": "a\x00"}, "items.3.content", id="nul-content"),
        pytest.param({"content": "x", "importance": 2}, "items.3.importance", id="importance"),
        pytest.param({"content": "x", "metadata": {"fact_role": "x"}}, "items.3.metadata",
                     id="reserved-metadata"),
        pytest.param({"content": "x", "foo": 1}, "items.3.foo", id="unknown-field"),
    ],
)
async def test_batch_with_bad_item_3_is_422_naming_it_and_writes_nothing(
    client: httpx.AsyncClient, bad_item: dict[str, Any], field: str
) -> None:
    items: list[dict[str, Any]] = [{"content": f"good item {i}"} for i in range(6)]
    items[3] = bad_item
    resp = await client.post("/v1/memories/batch", json={"items": items})
    body = assert_validation_problem(resp, field)
    assert [e["field"] for e in body["errors"]] == [field]
    await assert_nothing_written(client)


# --- update ---------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["content", "importance", "tags", "category", "metadata"])
async def test_patch_with_null_for_a_required_field_is_422_and_changes_nothing(
    client: httpx.AsyncClient, field: str
) -> None:
    created = await create(client, tags=["a"], metadata={"k": "v"}, category="notes",
                           importance=0.7)
    resp = await client.patch(f"/v1/memories/{created['id']}", json={field: None})
    assert_validation_problem(resp, field)
    assert (await client.get(f"/v1/memories/{created['id']}")).json() == created


async def test_patch_with_empty_body_is_422_and_changes_nothing(
    client: httpx.AsyncClient,
) -> None:
    created = await create(client)
    resp = await client.patch(f"/v1/memories/{created['id']}", json={})
    assert_validation_problem(resp, "body")
    assert (await client.get(f"/v1/memories/{created['id']}")).json() == created


@pytest.mark.parametrize("field", ["fact_role", "summary_of", "source", "user_id", "foo"])
async def test_patch_with_unknown_or_unchangeable_field_is_422_and_changes_nothing(
    client: httpx.AsyncClient, field: str
) -> None:
    created = await create(client)
    resp = await client.patch(f"/v1/memories/{created['id']}",
                              json={"content": "changed", field: "x"})
    assert_validation_problem(resp, field)
    assert (await client.get(f"/v1/memories/{created['id']}")).json() == created


@pytest.mark.parametrize(
    ("change", "field"),
    [
        pytest.param({"content": "  "}, "content", id="blank-content"),
        pytest.param({"content": "x\x00"}, "content", id="nul-content"),
        pytest.param({"importance": -1}, "importance", id="importance"),
        pytest.param({"metadata": {"summary_of": []}}, "metadata", id="reserved-metadata"),
        pytest.param({"expires_at": "2030-01-01T00:00:00"}, "expires_at", id="naive-expires_at"),
        pytest.param({"expires_at": 86400}, "expires_at", id="number-expires_at"),
        pytest.param({"tags": ["t"] * 65}, "tags", id="65-tags"),
    ],
)
async def test_patch_with_an_invalid_value_is_422_and_changes_nothing(
    client: httpx.AsyncClient, change: dict[str, Any], field: str
) -> None:
    created = await create(client)
    resp = await client.patch(f"/v1/memories/{created['id']}", json=change)
    assert_validation_problem(resp, field)
    assert (await client.get(f"/v1/memories/{created['id']}")).json() == created


async def test_patch_with_nan_in_metadata_is_422_and_changes_nothing(
    client: httpx.AsyncClient,
) -> None:
    created = await create(client)
    resp = await client.patch(f"/v1/memories/{created['id']}",
                              **raw_json('{"metadata": {"score": NaN}}'))
    assert_validation_problem(resp, "metadata")
    assert (await client.get(f"/v1/memories/{created['id']}")).json() == created


# --- path and query -------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["GET", "PATCH", "DELETE"])
@pytest.mark.parametrize("bad_id", ["not-a-uuid", "123", "0190b2a4-zzzz-7000-8000-000000000000"])
async def test_bad_uuid_in_path_is_422_naming_memory_id(
    client: httpx.AsyncClient, method: str, bad_id: str
) -> None:
    kwargs: dict[str, Any] = {"json": {"content": "x"}} if method == "PATCH" else {}
    resp = await client.request(method, f"/v1/memories/{bad_id}", **kwargs)
    assert_validation_problem(resp, "path.memory_id")


@pytest.mark.parametrize(
    ("params", "field"),
    [
        pytest.param({"limit": "0"}, "query.limit", id="limit-0"),
        pytest.param({"limit": "501"}, "query.limit", id="limit-501"),
        pytest.param({"limit": "ten"}, "query.limit", id="limit-not-int"),
        pytest.param({"foo": "bar"}, "query.foo", id="unknown-param"),
        pytest.param({"tag": "x"}, "query.tag", id="misspelt-param"),
        pytest.param({"fact_role": "opinion"}, "query.fact_role", id="bad-fact_role"),
        pytest.param({"include_archived": "maybe"}, "query.include_archived",
                     id="bad-include_archived"),
        pytest.param({"user_id": "a\x00b"}, "query.user_id", id="nul-in-user_id"),
    ],
)
async def test_list_with_a_bad_query_parameter_is_422_naming_it(
    client: httpx.AsyncClient, params: dict[str, str], field: str
) -> None:
    resp = await client.get("/v1/memories", params=params)
    assert_validation_problem(resp, field)


@pytest.mark.parametrize(("method", "path", "query", "field"), [
    ("GET", "/v1/memories", "user_id=a&user_id=b", "user_id"),
    ("DELETE", "/v1/memories", "user_id=a&user_id=b", "user_id"),
    ("GET", "/v1/memories", "limit=5&tags=x&limit=6", "limit"),
    ("GET", "/v1/sessions", "agent_id=a&agent_id=a", "agent_id"),
    ("GET", "/v1/consolidations", "status=failed&status=succeeded", "status"),
])
async def test_a_single_valued_query_parameter_given_twice_is_422_naming_it(
    client: httpx.AsyncClient, method: str, path: str, query: str, field: str
) -> None:
    # Rather than one of the values silently used: a delete of `user_id=a&user_id=b`
    # deleted b's memories alone.
    resp = await client.post("/v1/memories", json={"content": "x", "user_id": "b"})
    assert resp.status_code == 201, resp.text
    assert_validation_problem(await client.request(method, f"{path}?{query}"), f"query.{field}")
    listed = await client.get("/v1/memories", params={"user_id": "b"})
    assert len(listed.json()["items"]) == 1


async def test_a_list_query_parameter_repeats(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/memories", json={"content": "x", "tags": ["a", "b"]})
    assert resp.status_code == 201, resp.text
    listed = await client.get("/v1/memories?tags=a&tags=b")
    assert listed.status_code == 200, listed.text
    assert [m["id"] for m in listed.json()["items"]] == [resp.json()["id"]]


async def test_a_repeated_parameter_of_a_path_with_an_id_is_422(
    client: httpx.AsyncClient,
) -> None:
    created = (await client.post("/v1/memories", json={"content": "x"})).json()
    resp = await client.get(f"/v1/memories/{created['id']}/history?limit=1&limit=2")
    assert_validation_problem(resp, "query.limit")


async def test_list_limit_bounds_1_and_500_are_accepted(client: httpx.AsyncClient) -> None:
    for limit in ("1", "500"):
        resp = await client.get("/v1/memories", params={"limit": limit})
        assert resp.status_code == 200
        assert resp.json() == {"items": [], "next_cursor": None}


@pytest.mark.parametrize(
    "cursor",
    [
        pytest.param("!!!not-base64!!!", id="garbage"),
        pytest.param(base64.urlsafe_b64encode(b"not json").decode(), id="not-json"),
        pytest.param(base64.urlsafe_b64encode(b"[]").decode(), id="empty-list"),
        pytest.param(base64.urlsafe_b64encode(b"5").decode(), id="number"),
        pytest.param(forged_cursor("yesterday", str(uuid.uuid4())), id="bad-timestamp"),
        pytest.param(forged_cursor("2025-01-01T00:00:00", str(uuid.uuid4())),
                     id="naive-timestamp"),
        pytest.param(forged_cursor("2025-01-01T00:00:00+00:00", "not-a-uuid"), id="bad-id"),
        pytest.param("A" * 600, id="too-long"),
        pytest.param(forged_cursor("0001-01-01T00:00:00+01:00", str(uuid.uuid4())),
                     id="timestamp-before-year-1-in-utc"),
    ],
)
async def test_list_with_a_bad_cursor_is_422_naming_cursor(
    client: httpx.AsyncClient, cursor: str
) -> None:
    await create(client)
    resp = await client.get("/v1/memories", params={"cursor": cursor})
    assert resp.status_code == 422, resp.text
    fields = {e["field"] for e in resp.json()["errors"]}
    assert fields, resp.text
    assert fields <= {"cursor", "query.cursor"}, fields
    assert_validation_problem(resp, fields.pop())


# --- body encoding and headers --------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        pytest.param('{"content": ', id="truncated"),
        pytest.param('{"content": "x",}', id="trailing-comma"),
        pytest.param("{'content': 'x'}", id="single-quotes"),
    ],
)
async def test_malformed_json_body_is_422_problem_naming_body(
    client: httpx.AsyncClient, text: str
) -> None:
    resp = await client.post("/v1/memories", **raw_json(text))
    assert_validation_problem(resp, "body")
    await assert_nothing_written(client)


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("POST", "/v1/memories", b'{"content": "caf\xe9"}', id="create-latin-1"),
        pytest.param("POST", "/v1/memories/batch", b'{"items": [{"content": "\xff"}]}',
                     id="batch"),
        pytest.param("PATCH", "/v1/memories/{id}", b'{"content": "\xc3\x28"}', id="patch"),
        pytest.param("POST", "/v1/search", b'{"query": "caf\xe9"}', id="search"),
        pytest.param("POST", "/v1/consolidations", b'{"user_id": "\xe9"}', id="consolidation"),
    ],
)
async def test_a_body_that_is_not_utf8_is_422_naming_body_and_changes_nothing(
    client: httpx.AsyncClient, method: str, path: str, body: bytes
) -> None:
    created = await create(client)
    resp = await client.request(method, path.format(id=created["id"]), content=body,
                                headers={"content-type": "application/json"})
    problem = assert_validation_problem(resp, "body")
    assert "UTF-8" in problem["detail"]
    assert (await client.get(f"/v1/memories/{created['id']}")).json() == created
    listed = (await client.get("/v1/memories")).json()["items"]
    assert [m["id"] for m in listed] == [created["id"]]


# Python's parser, given bytes, guesses UTF-16 and UTF-32 from a BOM or the NULs of the
# first characters, so each of these was read and stored (a probe).
NOT_UTF8_ENCODINGS = [
    pytest.param(codecs.BOM_UTF16_LE, "utf-16-le", id="utf-16-le-bom"),
    pytest.param(codecs.BOM_UTF16_BE, "utf-16-be", id="utf-16-be-bom"),
    pytest.param(b"", "utf-16-le", id="utf-16-le"),
    pytest.param(b"", "utf-16-be", id="utf-16-be"),
    pytest.param(codecs.BOM_UTF32_LE, "utf-32-le", id="utf-32-le-bom"),
    pytest.param(codecs.BOM_UTF32_BE, "utf-32-be", id="utf-32-be-bom"),
    pytest.param(b"", "utf-32-le", id="utf-32-le"),
    pytest.param(b"", "utf-32-be", id="utf-32-be"),
]


def encoded(body: dict[str, Any], bom: bytes, encoding: str) -> dict[str, Any]:
    return {"content": bom + json.dumps(body).encode(encoding),
            "headers": {"content-type": "application/json"}}


@pytest.mark.parametrize(("bom", "encoding"), NOT_UTF8_ENCODINGS)
async def test_a_create_in_utf16_or_utf32_is_422_naming_body_and_stores_nothing(
    client: httpx.AsyncClient, bom: bytes, encoding: str
) -> None:
    resp = await client.post("/v1/memories", **encoded({"content": "café"}, bom, encoding))
    problem = assert_validation_problem(resp, "body")
    assert "not valid UTF-8" in problem["detail"]
    await assert_nothing_written(client)


@pytest.mark.parametrize(("bom", "encoding"), NOT_UTF8_ENCODINGS)
async def test_a_search_in_utf16_or_utf32_is_422_naming_body(
    client: httpx.AsyncClient, bom: bytes, encoding: str
) -> None:
    resp = await client.post("/v1/search", **encoded({"query": "café"}, bom, encoding))
    problem = assert_validation_problem(resp, "body")
    assert "not valid UTF-8" in problem["detail"]


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        pytest.param("POST", "/v1/memories/batch", {"items": [{"content": "x"}]}, id="batch"),
        pytest.param("PATCH", "/v1/memories/{id}", {"content": "changed"}, id="patch"),
        pytest.param("POST", "/v1/consolidations", {"user_id": "u"}, id="consolidation"),
        pytest.param("POST", "/v1/sessions/s/turns", {"role": "user", "content": "hi"},
                     id="turn"),
    ],
)
async def test_every_body_in_utf16_is_422_naming_body_and_changes_nothing(
    client: httpx.AsyncClient, method: str, path: str, body: dict[str, Any]
) -> None:
    created = await create(client)
    resp = await client.request(method, path.format(id=created["id"]),
                                **encoded(body, b"", "utf-16-le"))
    problem = assert_validation_problem(resp, "body")
    assert "not valid UTF-8" in problem["detail"]
    assert (await client.get(f"/v1/memories/{created['id']}")).json() == created
    listed = (await client.get("/v1/memories")).json()["items"]
    assert [m["id"] for m in listed] == [created["id"]]
    assert (await client.get("/v1/sessions")).json()["items"] == []
    assert (await client.get("/v1/consolidations")).json()["items"] == []


async def test_a_utf8_body_may_begin_with_a_bom(client: httpx.AsyncClient) -> None:
    """RFC 8259 8.1 lets a parser ignore one; it is not part of the text."""
    resp = await client.post("/v1/memories", content=codecs.BOM_UTF8 + '{"content": "café"}'
                             .encode(), headers={"content-type": "application/json"})
    assert resp.status_code == 201, resp.text
    assert resp.json()["content"] == "café"


DEEP = '{"a": ' * 5000 + "1" + "}" * 5000
LONG_INT = "9" * 5000


@pytest.mark.parametrize(
    ("method", "path", "body", "says"),
    [
        pytest.param("POST", "/v1/memories", f'{{"content": "x", "metadata": {DEEP}}}',
                     "nested too deeply", id="create-deep"),
        pytest.param("POST", "/v1/memories",
                     f'{{"content": "x", "metadata": {{"n": {LONG_INT}}}}}',
                     "too many digits", id="create-long-integer"),
        pytest.param("PATCH", "/v1/memories/{id}", f'{{"importance": {LONG_INT}}}',
                     "too many digits", id="patch-long-integer"),
        pytest.param("POST", "/v1/search", f'{{"query": "x", "top_k": {LONG_INT}}}',
                     "too many digits", id="search-long-integer"),
        pytest.param("POST", "/v1/search", f'{{"query": "x", "metadata": {DEEP}}}',
                     "nested too deeply", id="search-deep"),
        pytest.param("POST", "/v1/consolidations", f'{{"user_id": "u", "metadata": {DEEP}}}',
                     "nested too deeply", id="consolidation-deep"),
    ],
)
async def test_json_the_parser_refuses_is_422_naming_body_and_changes_nothing(
    client: httpx.AsyncClient, method: str, path: str, body: str, says: str
) -> None:
    """Python's JSON parser refuses some valid JSON (nesting past its recursion limit,
    integers past 4300 digits): FastAPI answered those with a bare 400 that no operation
    declares."""
    created = await create(client)
    resp = await client.request(method, path.format(id=created["id"]), content=body,
                                headers={"content-type": "application/json"})
    problem = assert_validation_problem(resp, "body")
    assert says in problem["detail"]
    assert (await client.get(f"/v1/memories/{created['id']}")).json() == created
    listed = (await client.get("/v1/memories")).json()["items"]
    assert [m["id"] for m in listed] == [created["id"]]


@pytest.mark.parametrize(
    "content_type",
    ["text/plain", "application/x-www-form-urlencoded", "application/xml",
     # Found by an exploratory probe: with none the error said the body "should be a
     # valid dictionary", as if its JSON were wrong.
     None],
)
async def test_body_with_wrong_content_type_is_422_problem_and_writes_nothing(
    client: httpx.AsyncClient, content_type: str | None
) -> None:
    headers = {} if content_type is None else {"content-type": content_type}
    resp = await client.post("/v1/memories", content=b'{"content": "x"}', headers=headers)
    if content_type is None:
        assert "content-type" not in resp.request.headers
    problem = assert_validation_problem(resp, "body")
    assert problem["errors"] == [{"field": "body", "message": "must be JSON, sent with "
                                                              "Content-Type: application/json"}]
    await assert_nothing_written(client)


@pytest.mark.parametrize("content_type", ["application/json; charset=utf-8",
                                          "application/problem+json", "APPLICATION/JSON"])
async def test_json_content_types_are_read_as_json(
    client: httpx.AsyncClient, content_type: str
) -> None:
    resp = await client.post("/v1/memories", content=b'{"content": "x"}',
                             headers={"content-type": content_type})
    assert resp.status_code == 201, resp.text
    bad = await client.post("/v1/memories", content=b'{"content": ""}',
                            headers={"content-type": content_type})
    assert assert_validation_problem(bad, "content")["errors"][0]["field"] == "content"


@pytest.mark.parametrize("text", ['["content", "x"]', '"x"', "null", "42"])
async def test_json_body_that_is_not_an_object_is_422_naming_body(
    client: httpx.AsyncClient, text: str
) -> None:
    resp = await client.post("/v1/memories", **raw_json(text))
    assert_validation_problem(resp, "body")
    await assert_nothing_written(client)


@pytest.mark.parametrize(
    "key",
    [
        pytest.param("k" * 256, id="256-chars"),
        pytest.param("", id="empty"),
        pytest.param("has space", id="space"),
    ],
)
@pytest.mark.parametrize("path", ["/v1/memories", "/v1/memories/batch"])
async def test_bad_idempotency_key_is_422_naming_the_header_and_writes_nothing(
    client: httpx.AsyncClient, key: str, path: str
) -> None:
    payload: dict[str, Any] = {"content": "x"}
    if path.endswith("batch"):
        payload = {"items": [payload]}
    resp = await client.post(path, json=payload, headers={"Idempotency-Key": key})
    assert_validation_problem(resp, "header.Idempotency-Key")
    await assert_nothing_written(client)


@pytest.mark.parametrize("path", ["/v1/memories", "/v1/memories/batch",
                                  "/v1/sessions/s1/turns"])
async def test_an_idempotency_key_given_twice_is_422_naming_the_header_and_writes_nothing(
    client: httpx.AsyncClient, path: str
) -> None:
    """Which of the two the client meant is unknown (the first was used, silently)."""
    payload: dict[str, Any] = {"content": "x"}
    if path.endswith("batch"):
        payload = {"items": [payload]}
    elif path.endswith("turns"):
        payload = {"role": "user", "content": "x"}
    resp = await client.post(path, json=payload,
                             headers=[("Idempotency-Key", "d1"), ("Idempotency-Key", "d2")])
    problem = assert_validation_problem(resp, "header.Idempotency-Key")
    assert "more than once" in problem["detail"]
    await assert_nothing_written(client)
    assert (await client.get("/v1/sessions")).json()["items"] == []


async def test_idempotency_key_of_255_chars_is_accepted(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/memories", json={"content": "x"},
                             headers={"Idempotency-Key": "k" * 255})
    assert resp.status_code == 201, resp.text


@pytest.mark.parametrize(
    ("method", "url", "field"),
    [
        pytest.param("POST", "/v1/sessions/%FF/turns", "path.session_id", id="turn-latin-1"),
        pytest.param("POST", "/v1/sessions/caf%E9/turns", "path.session_id",
                     id="turn-latin-1-word"),
        pytest.param("POST", "/v1/sessions/%ED%A0%80/turns", "path.session_id",
                     id="turn-encoded-surrogate"),
        pytest.param("GET", "/v1/memories?user_id=caf%E9", "query.user_id", id="list"),
        pytest.param("GET", "/v1/memories?tags=a&tags=%C3", "query.tags", id="list-tags"),
        pytest.param("DELETE", "/v1/memories?user_id=caf%E9", "query.user_id",
                     id="delete-matching"),
        pytest.param("GET", "/v1/sessions?user_id=%FF", "query.user_id", id="list-sessions"),
    ],
)
async def test_percent_escapes_that_are_not_utf8_are_422_naming_the_parameter(
    client: httpx.AsyncClient, method: str, url: str, field: str
) -> None:
    """Starlette reads each bad byte as U+FFFD, so `caf%E9` and `caf%E8` named one
    session, one user's memories."""
    kept = await create(client, user_id="caf\ufffd")
    resp = await client.request(method, url, json={"role": "user", "content": "hi"}
                                if method == "POST" else None)
    problem = assert_validation_problem(resp, field)
    assert "UTF-8" in problem["detail"]
    assert (await client.get("/v1/sessions")).json()["items"] == []
    assert (await client.get(f"/v1/memories/{kept['id']}")).status_code == 200


# (`/v1/sessions/a%2Fb/turns` matches no route once decoded: a 404, as any unknown path.)
@pytest.mark.parametrize("url", ["/v1/sessions/conc%2Fturns", "/v1/sessions/conc%2fevents"])
async def test_an_encoded_slash_in_an_id_is_422_naming_the_path(
    client: httpx.AsyncClient, url: str,
) -> None:
    """The path is routed decoded: GET /v1/sessions/conc%2Fturns (the session
    "conc/turns") answered session conc's turns, a body of another schema about another
    session."""
    await client.post("/v1/sessions/conc/turns", json={"role": "user", "content": "hi"})

    resp = await client.get(url)

    problem = assert_validation_problem(resp, "path")
    assert "'/'" in problem["errors"][0]["message"]


async def test_percent_escaped_utf8_is_read_as_the_text_it_encodes(
    client: httpx.AsyncClient,
) -> None:
    """Including U+FFFD itself, escaped as UTF-8."""
    for escaped, text in (("caf%C3%A9", "café"), ("%EF%BF%BD", "\ufffd")):
        created = await client.post(f"/v1/sessions/{escaped}/turns",
                                    json={"role": "user", "content": "hi", "user_id": text})
        assert created.status_code == 201, created.text
        assert created.json()["session_id"] == text
        listed = await client.get(f"/v1/sessions?user_id={escaped}")
        assert listed.status_code == 200, listed.text
        assert [s["session_id"] for s in listed.json()["items"]] == [text]
    memory = await create(client, user_id="café", tags=["a b"])
    resp = await client.get("/v1/memories?user_id=caf%C3%A9&tags=a+b")
    assert resp.status_code == 200, resp.text
    assert [m["id"] for m in resp.json()["items"]] == [memory["id"]]


async def test_metadata_numbers_within_the_bound_read_back_equal(
    client: httpx.AsyncClient,
) -> None:
    numbers = {"big": 1e39, "small": 1e-7, "inexact": 0.30000000000000004, "int": 2**62}
    created = await client.post("/v1/memories", json={"content": "x", "metadata": numbers})
    assert created.status_code == 201, created.text

    read = (await client.get(f"/v1/memories/{created.json()['id']}")).json()

    # The same numbers; jsonb writes an integral one without a fraction, so 1e39 reads
    # back as the integer 10**39, the same double.
    assert {k: float(v) for k, v in read["metadata"].items()} == {
        k: float(v) for k, v in numbers.items()}
    assert read["metadata"]["int"] == 2**62
    # And it goes back as read: a PATCH of what a GET gave is within the bounds.
    again = await client.patch(f"/v1/memories/{read['id']}", json={"metadata": read["metadata"]})
    assert again.status_code == 200, again.text
    # The create answer says what the read says (found by an exploratory probe: 1e+16, a
    # float to a client's parser, against the read's integer), and so do the others.
    assert created.json()["metadata"] == read["metadata"]
    assert isinstance(created.json()["metadata"]["big"], int)
    changed = await client.patch(f"/v1/memories/{read['id']}",
                                 json={"metadata": {"n": [1.5e16, -2e20, 0.5]}})
    assert changed.json()["metadata"] == {"n": [15000000000000000, -200000000000000000000, 0.5]}
    assert (await client.get(f"/v1/memories/{read['id']}")).json()["metadata"] == \
        changed.json()["metadata"]


async def test_metadata_is_measured_as_compact_json(client: httpx.AsyncClient) -> None:
    """Found by an exploratory probe: the bound was measured with a space after every
    comma and colon, so 1,500 keys of 15,001 bytes of compact JSON were refused as
    18,000."""
    metadata = {f"k{i:04d}": 1 for i in range(1500)}
    assert len(json.dumps(metadata, separators=(",", ":")).encode()) == 15_001

    made = await client.post("/v1/memories", json={"content": "x", "metadata": metadata})

    assert made.status_code == 201, made.text
    assert made.json()["metadata"] == metadata
    # And a 40-digit integer is still a number it takes.
    big = await client.post("/v1/memories", json={"content": "y",
                                                  "metadata": {"v": 10**39}})
    assert big.status_code == 201, big.text
    assert big.json()["metadata"] == {"v": 10**39}



@pytest.mark.parametrize(("payload", "field"), [
    ({"content": "   "}, "content"),
    ({"content": "x", "tags": ["ok", " \t "]}, "tags.1"),
    ({"content": "x", "category": "\u3000"}, "category"),
    ({"content": "\u0085\u2007"}, "content"),
])
async def test_blank_text_is_said_to_be_blank(
    client: httpx.AsyncClient, payload: dict[str, Any], field: str,
) -> None:
    # It was "String should have at least 1 character", of a string of three.
    resp = await client.post("/v1/memories", json=payload)

    assert_validation_problem(resp, field)
    assert resp.json()["errors"][0]["message"] == "must not be blank (white space only)"
    await assert_nothing_written(client)


async def test_a_scope_id_of_unicode_white_space_stays_reachable(
    client: httpx.AsyncClient,
) -> None:
    """Scope ids are kept as sent and blank only of ASCII white space: refusing an id of an
    ideographic space alone would strand what is stored under it, which no read, filter or
    delete could then name (a re-probe)."""
    made = await client.post("/v1/memories", json={"content": "x", "user_id": "\u3000"})
    assert made.status_code == 201, made.text
    assert made.json()["user_id"] == "\u3000"

    listed = await client.get("/v1/memories", params={"user_id": "\u3000"})
    assert [m["id"] for m in listed.json()["items"]] == [made.json()["id"]]
    deleted = await client.request("DELETE", "/v1/memories", params={"user_id": "\u3000"})
    assert deleted.json()["deleted"] == 1
