"""A summary expires with the first of its sources to expire: it holds each one's text.
The purge of an expired memory releases it as a delete does: a summary built from it goes
too, and what an expired summary had archived comes back."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import text

from app.memories.repository import MemoryRepository, purge_expired
from app.resources import Resources
from tests.conftest import TenantKey
from tests.integration.consolidation.conftest import consolidate, get_memory, memory, seed
from tests.integration.consolidation.test_modes_and_revert import active_ids
from tests.integration.search.test_term_stats import assert_consistent


def parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@pytest.mark.parametrize("mode", ["archive", "synthesize_only"])
async def test_a_summary_of_expiring_memories_expires_with_the_first(
    client: httpx.AsyncClient, mode: str
) -> None:
    # Found by an exploratory probe: the summary had no expiry, so search kept serving
    # "Temporary secret code ..." after every source had expired.
    soon = datetime.now(UTC) + timedelta(seconds=3)
    ends = [soon + timedelta(milliseconds=100 * i) for i in range(4)]
    await seed(client, [memory(f"temporary secret code {i} is 99{i}", i,
                               expires_at=end.isoformat()) for i, end in enumerate(ends)])

    run = await consolidate(client, user_id="u1", mode=mode)

    [group] = run["groups"]
    folded = group["folded_ids"]
    summary = await get_memory(client, group["summary_id"])
    sources = [await get_memory(client, i) for i in folded]
    assert parse(summary["expires_at"]) == min(parse(s["expires_at"]) for s in sources)
    await asyncio.sleep(max(0.0, (parse(summary["expires_at"]) - datetime.now(UTC))
                            .total_seconds()) + 0.3)
    assert (await client.get(f"/v1/memories/{group['summary_id']}")).status_code == 404
    found = await client.post("/v1/search", json={"query": "temporary secret code 990",
                                                  "user_id": "u1"})
    assert found.status_code == 200, found.text
    assert not [r for r in found.json()["results"] if "990" in r["memory"]["content"]]


async def test_a_summary_beside_sources_that_never_expire_expires_with_the_one_that_does(
    client: httpx.AsyncClient,
) -> None:
    """Found by an exploratory probe: one source that never expired made the summary
    never expire, and a card number stored for seconds stayed searchable in it for good."""
    later = datetime.now(UTC) + timedelta(days=1)
    await seed(client, [memory("note 0", 0, expires_at=(later + timedelta(hours=1)).isoformat()),
                        memory("note 1", 1),
                        memory("note 2", 2, expires_at=later.isoformat()),
                        memory("note 3", 3)])

    run = await consolidate(client, user_id="u1")

    [group] = run["groups"]
    assert parse((await get_memory(client, group["summary_id"]))["expires_at"]) == later


async def test_a_summary_of_memories_none_of_which_expire_never_expires(
    client: httpx.AsyncClient,
) -> None:
    await seed(client, [memory(f"note {i}", i) for i in range(4)])

    run = await consolidate(client, user_id="u1")

    [group] = run["groups"]
    assert (await get_memory(client, group["summary_id"]))["expires_at"] is None


async def test_an_expiry_set_on_a_source_later_caps_every_summary_built_from_it(
    client: httpx.AsyncClient,
) -> None:
    ids = await seed(client, [memory(f"note {i}", i) for i in range(3)]
                     + [memory("card number ORCA-4111", 3), memory("kept", 4, importance=0.95)])
    first = await consolidate(client, user_id="u1")
    summary = first["groups"][0]["summary_id"]
    await seed(client, [memory(f"later {i}", 10 + i, importance=0.9 if i == 0 else 0.5)
                        for i in range(3)])
    second = await consolidate(client, user_id="u1", include_summaries=True)
    [group] = second["groups"]
    assert summary in group["folded_ids"]
    above = group["summary_id"]
    end = datetime.now(UTC) + timedelta(hours=1)

    changed = await client.patch(f"/v1/memories/{ids[3]}", json={"expires_at": end.isoformat()})
    assert changed.status_code == 200, changed.text

    for built in (summary, above):
        assert parse((await get_memory(client, built))["expires_at"]) == end

    # Put off, and then cleared, the source's expiry lifts the cap it set, through the
    # summary of the summary too: no source of either expires any more.
    later = end + timedelta(days=1)
    assert (await client.patch(f"/v1/memories/{ids[3]}",
                               json={"expires_at": later.isoformat()})).status_code == 200
    for built in (summary, above):
        assert parse((await get_memory(client, built))["expires_at"]) == later
    cleared = await client.patch(f"/v1/memories/{ids[3]}", json={"expires_at": None})
    assert cleared.status_code == 200, cleared.text
    for built in (summary, above):
        assert (await get_memory(client, built))["expires_at"] is None


@pytest.mark.parametrize("mode", ["archive", "synthesize_only"])
async def test_a_summary_expires_with_its_first_source_as_a_source_expiry_is_put_off(
    client: httpx.AsyncClient, mode: str,
) -> None:
    """Found by an exploratory search probe: a source's expiry put off (or cleared) left
    its summary expiring at the old time. The summary went though no source had; in
    archive mode the three facts it had archived, which never expire, were out of search
    and listing until the purge, which then deleted the summary for good."""
    soon = datetime.now(UTC) + timedelta(minutes=5)
    other = soon + timedelta(hours=2)
    ids = await seed(client, [memory("Erin walks Toast at 7", 0, expires_at=soon.isoformat()),
                              memory("Toast eats salmon kibble", 1,
                                     expires_at=other.isoformat()),
                              memory("the vet is Dr Ames", 2),
                              memory("kept", 3, importance=0.9)])
    [group] = (await consolidate(client, user_id="u1", mode=mode))["groups"]
    summary = group["summary_id"]
    assert parse((await get_memory(client, summary))["expires_at"]) == soon

    later = soon + timedelta(days=30)
    assert (await client.patch(f"/v1/memories/{ids[0]}",
                               json={"expires_at": later.isoformat()})).status_code == 200
    # With the first of its sources to expire now.
    assert parse((await get_memory(client, summary))["expires_at"]) == other
    assert (await client.patch(f"/v1/memories/{ids[1]}",
                               json={"expires_at": None})).status_code == 200
    assert parse((await get_memory(client, summary))["expires_at"]) == later
    assert (await client.patch(f"/v1/memories/{ids[0]}",
                               json={"expires_at": None})).status_code == 200
    assert (await get_memory(client, summary))["expires_at"] is None
    # Brought forward again, the cap comes back.
    assert (await client.patch(f"/v1/memories/{ids[2]}",
                               json={"expires_at": soon.isoformat()})).status_code == 200
    assert parse((await get_memory(client, summary))["expires_at"]) == soon


async def test_a_summarys_own_sooner_expiry_stays_as_a_source_expiry_is_put_off(
    client: httpx.AsyncClient,
) -> None:
    end = datetime.now(UTC) + timedelta(hours=1)
    ids = await seed(client, [memory(f"note {i}", i, expires_at=end.isoformat())
                              for i in range(3)] + [memory("kept", 3, importance=0.9)])
    [group] = (await consolidate(client, user_id="u1"))["groups"]
    summary = group["summary_id"]
    own = end - timedelta(minutes=30)
    assert (await client.patch(f"/v1/memories/{summary}",
                               json={"expires_at": own.isoformat()})).status_code == 200

    for memory_id in ids[:3]:
        assert (await client.patch(f"/v1/memories/{memory_id}",
                                   json={"expires_at": None})).status_code == 200

    assert parse((await get_memory(client, summary))["expires_at"]) == own


async def test_a_summarys_own_expiry_is_kept_through_a_sooner_source_expiry_and_back(
    client: httpx.AsyncClient,
) -> None:
    """Found by a re-probe of 683c72b: a summary set to expire in 30 minutes, brought
    forward by a source set to 10, was put off with that source to its sources' first (2
    hours), or to never when the source's expiry was cleared, past what the client had
    set: its own expiry was not kept."""
    now = datetime.now(UTC)
    ids = await seed(client, [memory(f"note {i}", i) for i in range(3)]
                     + [memory("kept", 3, importance=0.9)])
    [group] = (await consolidate(client, user_id="u1", mode="synthesize_only"))["groups"]
    summary, source = group["summary_id"], ids[0]
    own = now + timedelta(minutes=30)

    async def patch(memory_id: str, expires_at: datetime | None) -> None:
        resp = await client.patch(f"/v1/memories/{memory_id}", json={
            "expires_at": None if expires_at is None else expires_at.isoformat()})
        assert resp.status_code == 200, resp.text

    async def expiry(memory_id: str) -> datetime | None:
        value = (await get_memory(client, memory_id))["expires_at"]
        return None if value is None else parse(value)

    await patch(summary, own)
    await patch(source, now + timedelta(minutes=10))
    assert await expiry(summary) == now + timedelta(minutes=10)
    await patch(source, None)
    assert await expiry(summary) == own
    await patch(source, now + timedelta(hours=2))
    assert await expiry(summary) == own
    await patch(source, now + timedelta(minutes=5))
    assert await expiry(summary) == now + timedelta(minutes=5)
    await patch(source, now + timedelta(hours=3))
    assert await expiry(summary) == own
    # Cleared by the client (no source expires before): only its sources' then.
    await patch(source, None)
    await patch(summary, None)
    assert await expiry(summary) is None
    await patch(source, now + timedelta(hours=4))
    assert await expiry(summary) == now + timedelta(hours=4)


async def expire_now(resources: Resources, memory_id: str) -> None:
    async with resources.engine.begin() as conn:
        await conn.execute(text(
            "UPDATE memories SET expires_at = now() - interval '1 second' WHERE id = :id"),
            {"id": memory_id})


async def test_the_purge_of_a_source_takes_its_summary_and_brings_the_others_back(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    ids = await seed(client, [memory("ships the parser on Friday", 0),
                              memory("the door code is 4417", 1),
                              memory("standup moved to 9:30", 2),
                              memory("Alice owns billing", 3, importance=0.9)])
    run = await consolidate(client, user_id="u1", mode="archive")
    [group] = run["groups"]
    assert ids[1] in group["folded_ids"]
    await expire_now(resources, ids[1])

    # The source, and the summary that went with it.
    assert await purge_expired(resources.engine) >= 2  # other tests' expired rows may go too

    assert (await client.get(f"/v1/memories/{group['summary_id']}")).status_code == 404
    assert await active_ids(client, user_id="u1") == {ids[0], ids[2], ids[3]}
    await assert_consistent(resources, tenant.tenant_id)


async def test_the_purge_of_an_expired_summary_brings_back_what_it_archived(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    ids = await seed(client, [memory(f"note {i}", i) for i in range(3)]
                     + [memory("kept", 3, importance=0.9)])
    run = await consolidate(client, user_id="u1", mode="archive")
    [group] = run["groups"]
    assert await active_ids(client, user_id="u1") == {ids[3], group["summary_id"]}
    await expire_now(resources, group["summary_id"])

    assert await purge_expired(resources.engine) >= 1

    assert await active_ids(client, user_id="u1") == set(ids)
    for memory_id in ids[:3]:
        back = await get_memory(client, memory_id)
        assert (back["archived_at"], back["consolidation_id"]) == (None, None)
    await assert_consistent(resources, tenant.tenant_id)


async def test_the_purge_gives_way_to_a_request_holding_a_summary_it_would_release(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    """A request holding a summary (a revert, which then waits for its sources) would
    deadlock with the purge, which holds an expired source and waits for the summary:
    the purge waits 200 ms at most, and takes the batch again in its next round."""
    ids = await seed(client, [memory(f"note {i}", i) for i in range(3)]
                     + [memory("kept", 3, importance=0.9)])
    run = await consolidate(client, user_id="u1", mode="archive")
    summary = run["groups"][0]["summary_id"]
    await expire_now(resources, ids[0])

    async with resources.engine.connect() as holder:
        await holder.execute(text("SELECT 1 FROM memories WHERE id = :id FOR UPDATE"),
                             {"id": summary})
        assert await purge_expired(resources.engine) == 0
        await holder.rollback()

    assert await purge_expired(resources.engine) >= 2  # the source, and its summary
    assert (await client.get(f"/v1/memories/{summary}")).status_code == 404
    assert await active_ids(client, user_id="u1") == {ids[1], ids[2], ids[3]}
    await assert_consistent(resources, tenant.tenant_id)


@pytest.mark.parametrize("wanted", [None, "later"])
async def test_a_summarys_own_expiry_may_not_outlive_its_first_source(
    client: httpx.AsyncClient, wanted: str | None,
) -> None:
    """Found by an exploratory re-probe: PATCHing the summary's expires_at to null (or
    past its sources') kept a source's text searchable after the source expired."""
    end = datetime.now(UTC) + timedelta(hours=1)
    await seed(client, [memory("card 4242", 0, expires_at=end.isoformat())]
               + [memory(f"note {i}", 1 + i) for i in range(3)])
    run = await consolidate(client, user_id="u1")
    summary = run["groups"][0]["summary_id"]
    value = None if wanted is None else (end + timedelta(minutes=1)).isoformat()

    refused = await client.patch(f"/v1/memories/{summary}", json={"expires_at": value})

    assert refused.status_code == 422, refused.text
    assert [e["field"] for e in refused.json()["errors"]] == ["expires_at"]
    assert parse((await get_memory(client, summary))["expires_at"]) == end
    sooner = (end - timedelta(minutes=1)).isoformat()
    allowed = await client.patch(f"/v1/memories/{summary}", json={"expires_at": sooner})
    assert allowed.status_code == 200, allowed.text
    # A fact's expiry has no such bound.
    fact = run["groups"][0]["kept_id"]
    assert (await client.patch(f"/v1/memories/{fact}", json={"expires_at": None})
            ).status_code == 200


async def test_a_summarys_expiry_set_as_a_source_expiry_is_set_is_checked_against_it(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    """Found by a concurrency probe: PATCHes of a summary's expiry and of its source's at
    once both answered 200 (16 of 60 pairs), the summary outliving the source by the
    time between: the summary's check read the sources before it waited for their
    family. The source's PATCH is held half-way here, as its transaction does it: the
    family, then the new expiry; the summary's must be checked against what it wrote."""
    await seed(client, [memory(f"note {i}", i) for i in range(3)]
               + [memory("kept", 3, importance=0.9)])
    [group] = (await consolidate(client, user_id="u1"))["groups"]
    summary, source = group["summary_id"], group["folded_ids"][0]
    soon = datetime.now(UTC) + timedelta(minutes=5)

    async with resources.sessionmaker() as patching_source:
        await MemoryRepository(patching_source, tenant.tenant_id).lock_families([source])
        await patching_source.execute(
            text("UPDATE memories SET expires_at = :at WHERE id = :id"),
            {"at": soon, "id": source})
        patching = asyncio.create_task(client.patch(
            f"/v1/memories/{summary}", json={"expires_at": (soon + timedelta(minutes=5))
                                             .isoformat()}))
        await asyncio.sleep(0.3)
        assert not patching.done()
        await patching_source.commit()
        answer = await asyncio.wait_for(patching, 10)

    assert answer.status_code == 422, answer.text
    assert [e["field"] for e in answer.json()["errors"]] == ["expires_at"]


async def test_a_summary_folding_one_whose_expiry_was_set_expires_with_it(
    client: httpx.AsyncClient,
) -> None:
    """Found by a concurrency probe: S's expiry was PATCHed sooner, then an archive run
    folded S into T, whose expiry came from the facts alone (none): T outlived S, in a
    state a PATCH of T's expiry refuses."""
    await seed(client, [memory(f"note {i}", i) for i in range(3)]
               + [memory("kept", 3, importance=0.9)])
    [first] = (await consolidate(client, user_id="u1", mode="synthesize_only"))["groups"]
    soon = datetime.now(UTC) + timedelta(hours=1)
    assert (await client.patch(f"/v1/memories/{first['summary_id']}",
                               json={"expires_at": soon.isoformat()})).status_code == 200

    [group] = (await consolidate(client, user_id="u1"))["groups"]

    assert first["summary_id"] in group["removed_ids"]
    folding = await get_memory(client, group["summary_id"])
    assert parse(folding["expires_at"]) == soon
    assert (await client.patch(f"/v1/memories/{group['summary_id']}",
                               json={"expires_at": soon.isoformat()})).status_code == 200
