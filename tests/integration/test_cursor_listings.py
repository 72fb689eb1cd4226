"""A cursor pages only the listing it came from: its endpoint and its filters. Given to
another, it is a 422 naming it, not a page from an unrelated place (an exploratory probe:
a runs' cursor on the memories' listing served 32 of 33 memories, and one user's cursor on
another user's listing an empty page)."""

from __future__ import annotations

import uuid

import httpx

from app.resources import Resources
from tests.conftest import create_tenant_key, make_client


async def _memories(client: httpx.AsyncClient, user: str, count: int) -> None:
    for i in range(count):
        made = await client.post("/v1/memories", json={
            "content": f"Fact number {i} of {user}", "user_id": user})
        assert made.status_code == 201, made.text


def _refused(resp: httpx.Response) -> None:
    assert resp.status_code == 422, resp.text
    assert resp.headers["content-type"] == "application/problem+json"
    [error] = resp.json()["errors"]
    assert error["field"] == "query.cursor"
    assert "another listing" in error["message"]


async def test_a_cursor_pages_its_own_listing_and_no_other(client: httpx.AsyncClient) -> None:
    fx, fy = (f"u-{uuid.uuid4().hex[:8]}" for _ in range(2))
    await _memories(client, fx, 3)
    await _memories(client, fy, 3)

    first = await client.get("/v1/memories", params={"user_id": fx, "limit": 1})
    cursor = first.json()["next_cursor"]
    assert cursor

    # Its own listing pages on, whatever the page size.
    rest = await client.get("/v1/memories", params={"user_id": fx, "limit": 5,
                                                    "cursor": cursor})
    assert rest.status_code == 200, rest.text
    assert len(rest.json()["items"]) == 2
    # Another user's, or the same user's with another filter, is refused.
    _refused(await client.get("/v1/memories", params={"user_id": fy, "cursor": cursor}))
    _refused(await client.get("/v1/memories", params={"user_id": fx, "cursor": cursor,
                                                      "include_archived": "true"}))
    _refused(await client.get("/v1/memories", params={"cursor": cursor}))

    # Another endpoint's.
    for user in (fx, fy):
        run = await client.post("/v1/consolidations", json={"user_id": user,
                                                            "dry_run": True})
        assert run.status_code == 200, run.text
    runs = await client.get("/v1/consolidations", params={"limit": 1})
    run_cursor = runs.json()["next_cursor"]
    assert run_cursor
    _refused(await client.get("/v1/memories", params={"cursor": run_cursor}))
    _refused(await client.get("/v1/consolidations", params={"cursor": cursor}))
    paged = await client.get("/v1/consolidations", params={"cursor": run_cursor})
    assert paged.status_code == 200, paged.text
    assert len(paged.json()["items"]) == 1


async def test_a_next_page_follows_its_filters_however_they_are_spelt(
    client: httpx.AsyncClient,
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    for i in range(3):
        made = await client.post("/v1/memories", json={
            "content": f"Tagged fact {i}", "user_id": user, "tags": ["a", "b"],
            "metadata": {"x": 1, "y": 2}})
        assert made.status_code == 201, made.text

    first = await client.get("/v1/memories", params={
        "user_id": user, "tags": ["a", "b"], "metadata": '{"x": 1, "y": 2}', "limit": 1})
    cursor = first.json()["next_cursor"]
    rest = await client.get("/v1/memories", params={
        "user_id": user, "tags": ["b", "a", "b"], "metadata": '{"y": 2, "x": 1.0}',
        "cursor": cursor})

    assert rest.status_code == 200, rest.text
    assert len(rest.json()["items"]) == 2


async def test_another_tenants_cursor_is_refused(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    """A re-probe: the same filters in another tenant took it, and skipped its rows."""
    other = await create_tenant_key(resources)
    async with make_client(resources, other.headers) as theirs:
        for c in (client, theirs):
            await _memories(c, "u", 2)
        first = await theirs.get("/v1/memories", params={"user_id": "u", "limit": 1})
        _refused(await client.get("/v1/memories", params={
            "user_id": "u", "cursor": first.json()["next_cursor"]}))


async def test_a_page_of_sessions_named_in_non_ascii_letters_is_followed(
    client: httpx.AsyncClient,
) -> None:
    """A re-probe: a session's id of 85 non-ASCII letters made a cursor past the 512
    characters the parameter took, so the listing stopped there."""
    user = f"u-{uuid.uuid4().hex[:8]}"
    for tail in ("x", "y"):
        sid = "\u00e9" * 250 + tail * 5
        made = await client.post(f"/v1/sessions/{sid}/turns", json={
            "role": "user", "content": "hello", "user_id": user})
        assert made.status_code == 201, made.text

    first = await client.get("/v1/sessions", params={"user_id": user, "limit": 1})
    rest = await client.get("/v1/sessions", params={
        "user_id": user, "cursor": first.json()["next_cursor"]})

    assert rest.status_code == 200, rest.text
    assert len(rest.json()["items"]) == 1
