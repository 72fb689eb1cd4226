"""Date-times at the edges of what a client's clock writes: past the microsecond, a leap
second, and the two mistakes whose words used to be pydantic's."""

from __future__ import annotations

import uuid

import httpx
import pytest

from tests.integration.memories.test_validation import assert_validation_problem

AT = "2026-01-01T10:00:00.123456Z"
# Seven digits, as .NET's "o" format and Java's Instant write: a moment after AT.
JUST_AFTER = "2026-01-01T10:00:00.1234567Z"


async def _memory_at(client: httpx.AsyncClient, user: str) -> str:
    made = await client.post("/v1/memories", json={
        "content": "the precise moment of the launch", "user_id": user, "created_at": AT})
    assert made.status_code == 201, made.text
    assert made.json()["created_at"] == AT
    return str(made.json()["id"])


async def test_a_bound_past_the_microsecond_keeps_what_was_created_before_it(
    client: httpx.AsyncClient,
) -> None:
    """Truncated to .123456, `created_before=.1234567` left out a memory created at
    .123456, before the bound the client sent (an exploratory probe)."""
    user = f"u-{uuid.uuid4().hex[:8]}"
    kept = await _memory_at(client, user)

    listed = await client.get("/v1/memories", params={"user_id": user,
                                                      "created_before": JUST_AFTER})
    found = await client.post("/v1/search", json={
        "query": "precise moment launch", "user_id": user, "created_before": JUST_AFTER})
    # A group takes three, in a user of their own.
    for _ in range(3):
        await _memory_at(client, f"{user}-c")
    previewed = await client.post("/v1/consolidations", json={
        "user_id": f"{user}-c", "created_before": JUST_AFTER, "dry_run": True})

    assert [m["id"] for m in listed.json()["items"]] == [kept]
    assert [r["memory"]["id"] for r in found.json()["results"]] == [kept]
    assert previewed.status_code == 200, previewed.text
    assert previewed.json()["candidates"] == 3

    # A bound at the memory's own instant, however many zeros it is written with, still
    # leaves it out (created_at < bound), and a lower bound past the microsecond too.
    for bound in (AT, "2026-01-01T10:00:00.1234560Z"):
        none = await client.get("/v1/memories", params={"user_id": user,
                                                        "created_before": bound})
        assert none.json()["items"] == [], bound
    after = await client.get("/v1/memories", params={"user_id": user,
                                                     "created_after": JUST_AFTER})
    assert after.json()["items"] == []

    deleted = await client.request("DELETE", "/v1/memories", params={
        "user_id": user, "created_before": JUST_AFTER})
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["deleted"] == 1
    assert (await client.get(f"/v1/memories/{kept}")).status_code == 404


async def test_a_leap_second_is_taken_as_the_last_microsecond_before_it(
    client: httpx.AsyncClient,
) -> None:
    made = await client.post("/v1/memories", json={
        "content": "the leap second", "created_at": "2016-12-31T23:59:60Z"})
    assert made.status_code == 201, made.text
    assert made.json()["created_at"] == "2016-12-31T23:59:59.999999Z"

    # A bound at the leap second keeps what came before it (a re-probe: taken as
    # :59.999999, it had left out the memory of that very instant) ...
    for bound in ("2016-12-31T23:59:60Z", "2016-12-31T23:59:60.5Z",
                  "2017-01-01T00:00:00Z"):
        listed = await client.get("/v1/memories", params={
            "created_after": "2016-12-31T23:59:59Z", "created_before": bound})
        assert listed.status_code == 200, listed.text
        assert [m["id"] for m in listed.json()["items"]] == [made.json()["id"]], bound
    # ... and a lower bound at it leaves it out, the same instant.
    after = await client.get("/v1/memories", params={"created_after": "2016-12-31T23:59:60Z"})
    assert after.json()["items"] == []


@pytest.mark.parametrize("moment", [
    "2016-12-31T10:17:60+01:00",  # a leap second falls at 23:59:60 UTC only
    "2016-12-31T23:59:600Z", "2016-12-31T23:59:6012345Z",  # not a time at all
])
async def test_a_second_60_that_is_no_leap_second_is_422(
    client: httpx.AsyncClient, moment: str,
) -> None:
    made = await client.post("/v1/memories", json={"content": "x", "created_at": moment})
    assert_validation_problem(made, "created_at")


@pytest.mark.parametrize(("moment", "says"), [
    ("2026-01-01", "a date alone"),
    # `?created_after=2026-01-01T10:00:00+05:30` unencoded: the '+' arrives as a blank.
    ("2026-01-01T10:00:00 05:30", "%2B"),
])
async def test_a_date_alone_or_an_unencoded_plus_is_told_as_such(
    client: httpx.AsyncClient, moment: str, says: str,
) -> None:
    listed = await client.get("/v1/memories", params={"created_after": moment})
    body = assert_validation_problem(listed, "query.created_after")
    assert says in body["errors"][0]["message"], body
    made = await client.post("/v1/memories", json={"content": "x", "created_at": moment})
    body = assert_validation_problem(made, "created_at")
    assert says in body["errors"][0]["message"], body
