"""What an API request asks that the service does not do is refused from its head, and
changes nothing (app/service/unsupported_asks.py). Found by an HTTP probe: a gzipped body
was "not valid UTF-8" and a plain one labelled gzip stored, a merge patch's nulls stored
as values, and a PATCH with an If-Match no tag could satisfy applied."""

from __future__ import annotations

import gzip
import json

import httpx
import pytest

from tests.integration.test_service_endpoints import assert_problem

MEMORY = {"content": "Alice prefers green tea.", "user_id": "asks"}


async def listed(client: httpx.AsyncClient) -> int:
    answer = await client.get("/v1/memories", params={"user_id": "asks"})
    assert answer.status_code == 200
    return len(answer.json()["items"])


@pytest.mark.parametrize(("coding", "body"), [
    ("gzip", gzip.compress(json.dumps(MEMORY).encode())),
    ("gzip", json.dumps(MEMORY).encode()),  # labelled, not compressed: was stored
    ("br", json.dumps(MEMORY).encode()),
    ("identity, deflate", json.dumps(MEMORY).encode()),
])
async def test_a_body_in_a_content_coding_is_415_and_stores_nothing(
    client: httpx.AsyncClient, coding: str, body: bytes,
) -> None:
    answer = await client.post("/v1/memories", content=body, headers={
        "Content-Type": "application/json", "Content-Encoding": coding})

    problem = assert_problem(answer, 415)
    assert answer.headers["accept-encoding"] == "identity"
    assert repr(coding) in problem["detail"]
    assert await listed(client) == 0


async def test_an_identity_coding_is_read(client: httpx.AsyncClient) -> None:
    answer = await client.post("/v1/memories", json=MEMORY,
                               headers={"Content-Encoding": "Identity"})
    assert answer.status_code == 201, answer.text


async def test_a_transfer_coding_besides_chunked_is_501(client: httpx.AsyncClient) -> None:
    answer = await client.post("/v1/memories", json=MEMORY,
                               headers={"Transfer-Encoding": "gzip, chunked"})
    assert_problem(answer, 501)
    assert await listed(client) == 0


@pytest.mark.parametrize("kind", ["application/merge-patch+json",
                                  "application/json-patch+json; charset=utf-8"])
async def test_a_patch_document_of_another_format_is_415_and_changes_nothing(
    client: httpx.AsyncClient, kind: str,
) -> None:
    created = (await client.post("/v1/memories", json={
        **MEMORY, "metadata": {"a": 1, "b": 2}})).json()

    answer = await client.patch(f"/v1/memories/{created['id']}",
                                content=json.dumps({"metadata": {"a": None}}),
                                headers={"Content-Type": kind})

    assert_problem(answer, 415)
    assert answer.headers["accept-patch"] == "application/json"
    stored = (await client.get(f"/v1/memories/{created['id']}")).json()
    assert stored["metadata"] == {"a": 1, "b": 2}
    assert stored["updated_at"] == created["updated_at"]


async def test_if_match_with_a_tag_is_412_and_with_a_star_goes_on(
    client: httpx.AsyncClient,
) -> None:
    created = (await client.post("/v1/memories", json=MEMORY)).json()
    path = f"/v1/memories/{created['id']}"

    refused = await client.patch(path, json={"importance": 0.9},
                                 headers={"If-Match": '"definitely-not-current"'})
    assert assert_problem(refused, 412)["type"].endswith("/precondition_failed")
    deleted = await client.delete(path, headers={"If-Match": 'W/"1"'})
    assert_problem(deleted, 412)
    assert (await client.get(path)).json()["importance"] == created["importance"]

    applied = await client.patch(path, json={"importance": 0.9}, headers={"If-Match": "*"})
    assert applied.status_code == 200, applied.text
    assert applied.json()["importance"] == 0.9


async def test_a_read_with_a_bodys_headers_but_no_body_is_served(
    client: httpx.AsyncClient,
) -> None:
    """A re-probe: a client sending its compression header on every request had every
    read refused 415; an empty If-Match, no condition at all, was a 412."""
    for headers in ({"Content-Encoding": "gzip"},
                    {"Content-Type": "application/merge-patch+json"},
                    {"If-Match": ""}):
        answer = await client.get("/v1/memories", params={"user_id": "asks"},
                                  headers=headers)
        assert answer.status_code == 200, (headers, answer.text)
