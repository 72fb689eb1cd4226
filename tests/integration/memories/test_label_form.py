"""Tags and categories are one label however their accents were typed: composed (NFC) on
write and in every filter (an exploratory probe: "café" typed on a Mac was another tag)."""

from __future__ import annotations

import uuid

import httpx

NFC, NFD = "caf\u00e9", "cafe\u0301"


async def test_a_decomposed_tag_or_category_is_the_composed_one(
    client: httpx.AsyncClient,
) -> None:
    user = f"u-{uuid.uuid4().hex[:8]}"
    made = await client.post("/v1/memories", json={
        "content": "We met at the cafe by the river", "user_id": user,
        "tags": [NFD, NFC, "x"], "category": NFD})
    assert made.status_code == 201, made.text
    assert made.json()["tags"] == [NFC, "x"]  # one tag, however typed
    assert made.json()["category"] == NFC

    for spelling in (NFC, NFD):
        listed = await client.get("/v1/memories", params={"user_id": user, "tags": spelling})
        assert [m["id"] for m in listed.json()["items"]] == [made.json()["id"]], spelling
        by_category = await client.get("/v1/memories", params={"user_id": user,
                                                               "categories": spelling})
        assert len(by_category.json()["items"]) == 1, spelling
        found = await client.post("/v1/search", json={
            "query": "met river", "user_id": user, "tags": [spelling],
            "categories": [spelling]})
        assert [r["memory"]["id"] for r in found.json()["results"]] == [made.json()["id"]]

    patched = await client.patch(f"/v1/memories/{made.json()['id']}",
                                 json={"tags": [NFD], "category": NFD})
    assert (patched.json()["tags"], patched.json()["category"]) == ([NFC], NFC)

    deleted = await client.request("DELETE", "/v1/memories",
                                   params={"user_id": user, "tags": NFD})
    assert deleted.json()["deleted"] == 1


async def test_a_summary_keeps_a_tag_its_sources_typed_two_ways(
    client: httpx.AsyncClient,
) -> None:
    """A summary carries the tags all its sources share: compared as typed, NFC and NFD
    shared none."""
    user = f"u-{uuid.uuid4().hex[:8]}"
    for i, tag in enumerate((NFC, NFD, NFC)):
        made = await client.post("/v1/memories", json={
            "content": f"Alice ordered coffee number {i} on 3 May.", "user_id": user,
            "tags": [tag]})
        assert made.status_code == 201, made.text

    run = await client.post("/v1/consolidations", json={
        "user_id": user, "tags": [NFD], "op": {"name": "extractive"}})

    assert run.status_code == 200, run.text
    [group] = run.json()["groups"]
    summary = await client.get(f"/v1/memories/{group['summary_id']}")
    assert summary.json()["tags"] == [NFC]
    # All three in the group: one kept, the others archived into the summary.
    assert len({group["kept_id"], *group["removed_ids"]}) == 3


async def test_a_label_that_composing_lengthens_past_the_limit_is_kept_as_sent(
    client: httpx.AsyncClient,
) -> None:
    """U+0958 (DEVANAGARI QA) is excluded from composition: NFC writes it as two. Composed,
    100 of them would not fit the category's column, and a filter refused for it left
    such labels stored before beyond reach (a re-probe)."""
    long = "\u0958" * 60
    made = await client.post("/v1/memories", json={"content": "x", "tags": [long],
                                                   "category": long})
    assert made.status_code == 201, made.text
    assert (made.json()["tags"], made.json()["category"]) == ([long], long)
    for params in ({"tags": long}, {"categories": long}):
        listed = await client.get("/v1/memories", params=params)
        assert [m["id"] for m in listed.json()["items"]] == [made.json()["id"]]
