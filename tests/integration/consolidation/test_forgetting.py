"""A deleted memory's text does not live on in a summary: the summaries built from it
(directly, or through a later summary) are deleted with it, and what they had archived
comes back to the active set.

Found by an exploratory probe: after `DELETE /v1/memories/M` (or a bulk delete, or an
erase of its history) the summary that folded M kept its text, and search kept answering
it; `summary_of` named the deleted id."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from app.consolidation.repository import GroupWriter
from app.memories.repository import MemoryRepository
from app.resources import Resources
from tests.conftest import TenantKey
from tests.integration.consolidation.conftest import consolidate, memory, seed
from tests.integration.consolidation.test_modes_and_revert import active_ids
from tests.integration.search.test_term_stats import assert_consistent


async def searched(client: httpx.AsyncClient, query: str) -> list[str]:
    found = await client.post("/v1/search", json={"query": query, "user_id": "u1"})
    assert found.status_code == 200, found.text
    return [r["memory"]["content"] for r in found.json()["results"]]


SECRET = "the door code is 4417"


async def fold_a_secret(client: httpx.AsyncClient, mode: str
                        ) -> tuple[list[str], dict[str, Any]]:
    """Four memories of u1, SECRET the second, folded by a run in `mode`: their ids, and
    the run's one group (its summary holds the secret)."""
    ids = await seed(client, [memory("ships the parser on Friday", 0),
                              memory(SECRET, 1),
                              memory("standup moved to 9:30", 2),
                              memory("Alice owns billing", 3, importance=0.9)])
    run = await consolidate(client, user_id="u1", mode=mode)
    [group] = run["groups"]
    assert ids[1] in group["folded_ids"]
    assert any("4417" in c for c in await searched(client, "door code"))
    return ids, group


@pytest.mark.parametrize("mode", ["archive", "synthesize_only"])
async def test_deleting_a_source_deletes_its_summary_and_brings_the_others_back(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey, mode: str,
) -> None:
    ids, group = await fold_a_secret(client, mode)

    assert (await client.delete(f"/v1/memories/{ids[1]}")).status_code == 204

    assert (await client.get(f"/v1/memories/{group['summary_id']}")).status_code == 404
    assert not any("4417" in c for c in await searched(client, "door code"))
    # The others the summary stood for are active again, as they were.
    assert await active_ids(client, user_id="u1") == {ids[0], ids[2], ids[3]}
    for memory_id in (ids[0], ids[2]):
        again = (await client.get(f"/v1/memories/{memory_id}")).json()
        assert (again["archived_at"], again["consolidation_id"]) == (None, None)
    await assert_consistent(resources, tenant.tenant_id)


async def test_a_summary_of_that_summary_goes_too(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    ids = await seed(client, [memory(f"note {i}", i) for i in range(3)]
                     + [memory(SECRET, 3), memory("kept", 4, importance=0.95)])
    first = await consolidate(client, user_id="u1")
    summary = first["groups"][0]["summary_id"]
    later = await seed(client, [memory(f"later {i}", 10 + i, importance=0.9 if i == 0 else 0.5)
                                for i in range(3)])
    second = await consolidate(client, user_id="u1", include_summaries=True)
    assert summary in second["groups"][0]["folded_ids"]

    assert (await client.delete(f"/v1/memories/{ids[3]}")).status_code == 204

    for gone in (summary, second["groups"][0]["summary_id"]):
        assert (await client.get(f"/v1/memories/{gone}")).status_code == 404
    # Every fact but the deleted one is active: the first run's and the second run's.
    assert await active_ids(client, user_id="u1") == {*ids[:3], ids[4], *later}
    assert not any("4417" in c for c in await searched(client, "door code"))
    await assert_consistent(resources, tenant.tenant_id)


async def test_a_bulk_delete_dissolves_the_summaries_of_what_it_deleted(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    # The summary keeps only the tags all its sources share: the bulk delete by tag does
    # not match it.
    ids = await seed(client, [memory("ships the parser on Friday", 0, tags=["work"]),
                              memory(SECRET, 1, tags=["private"]),
                              memory("standup moved to 9:30", 2, tags=["work"]),
                              memory("Alice owns billing", 3, importance=0.9)])
    run = await consolidate(client, user_id="u1")
    summary = run["groups"][0]["summary_id"]

    deleted = await client.delete("/v1/memories", params={"tags": "private"})

    assert deleted.status_code == 200, deleted.text
    # The matched memory and the summary that went with it (an exploratory re-probe found
    # the count left the summary out, where the answer's description says summaries too).
    assert deleted.json()["deleted"] == 2
    assert (await client.get(f"/v1/memories/{summary}")).status_code == 404
    assert await active_ids(client, user_id="u1") == {ids[0], ids[2], ids[3]}
    await assert_consistent(resources, tenant.tenant_id)


@pytest.mark.parametrize("how", ["by_id", "by_filter"])
async def test_deleting_a_summary_brings_back_what_it_archived(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey, how: str,
) -> None:
    """Found by an exploratory probe: the memories an archive-mode summary stood for stayed
    archived once it was deleted, out of search and listing, unless the run was reverted."""
    ids = await seed(client, [memory(f"note {i}", i) for i in range(3)]
                     + [memory("Alice owns billing", 3, importance=0.9),
                        memory("Bob's note", 4, user_id="u2")])
    run = await consolidate(client, user_id="u1", mode="archive")
    summary = run["groups"][0]["summary_id"]
    assert await active_ids(client, user_id="u1") == {ids[3], summary}

    if how == "by_id":
        assert (await client.delete(f"/v1/memories/{summary}")).status_code == 204
    else:
        deleted = await client.delete("/v1/memories",
                                      params={"user_id": "u1", "fact_role": "summary"})
        assert deleted.status_code == 200, deleted.text
        assert deleted.json()["deleted"] == 1

    assert await active_ids(client, user_id="u1") == set(ids[:4])
    assert await active_ids(client, user_id="u2") == {ids[4]}
    await assert_consistent(resources, tenant.tenant_id)


async def test_erasing_a_user_deletes_what_their_summaries_archived_too(
    client: httpx.AsyncClient,
) -> None:
    await seed(client, [memory(f"note {i}", i) for i in range(3)]
               + [memory("Alice owns billing", 3, importance=0.9)])
    await consolidate(client, user_id="u1", mode="archive")

    deleted = await client.delete("/v1/memories", params={"user_id": "u1"})

    assert deleted.json()["deleted"] == 5
    listed = await client.get("/v1/memories", params={"user_id": "u1",
                                                      "include_archived": "true"})
    assert listed.json()["items"] == []


async def test_a_delete_that_deadlocks_answers_503_and_changes_nothing(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    """The delete holds its memory and waits for the summary to dissolve; a transaction
    holding that summary then waits for the memory (as a revert does). PostgreSQL aborts
    the delete, which waited first: it changed nothing, so the answer says retry, not 500."""
    ids = await seed(client, [memory(f"note {i}", i) for i in range(3)]
                     + [memory("kept", 3, importance=0.9)])
    run = await consolidate(client, user_id="u1", mode="archive")
    summary = run["groups"][0]["summary_id"]

    async with resources.engine.connect() as holder:
        await holder.execute(text("SELECT 1 FROM memories WHERE id = :id FOR UPDATE"),
                             {"id": summary})
        deleting = asyncio.create_task(client.delete(f"/v1/memories/{ids[0]}"))
        await asyncio.sleep(0.3)  # the delete now waits for the summary
        await holder.execute(text("UPDATE memories SET importance = importance "
                                  "WHERE id = :id"), {"id": ids[0]})
        resp = await asyncio.wait_for(deleting, 10)
        await holder.rollback()

    assert resp.status_code == 503, resp.text
    assert resp.json()["type"].endswith("/database_busy")
    assert resp.headers["retry-after"] == "1"
    assert (await client.get(f"/v1/memories/{ids[0]}")).status_code == 200


async def folded_again(client: httpx.AsyncClient) -> tuple[str, dict[str, Any], str]:
    """A summary P (run 1), folded by run 2's summary, which is deleted (P comes back),
    then folded again by run 3's summary S3: (P, run 2, S3)."""
    await seed(client, [memory(f"note {i}", i) for i in range(3)]
               + [memory("kept", 3, importance=0.95)])
    first = await consolidate(client, user_id="u1")
    prior = first["groups"][0]["summary_id"]
    await seed(client, [memory(f"later {i}", 10 + i, importance=0.9 if i == 0 else 0.5)
                        for i in range(3)])
    second = await consolidate(client, user_id="u1", include_summaries=True)
    assert prior in second["groups"][0]["folded_ids"]
    assert (await client.delete(f"/v1/memories/{second['groups'][0]['summary_id']}")
            ).status_code == 204
    await seed(client, [memory(f"last {i}", 20 + i, importance=0.92 if i == 0 else 0.5)
                        for i in range(3)])
    third = await consolidate(client, user_id="u1", include_summaries=True)
    [group] = [g for g in third["groups"] if prior in g["folded_ids"]]
    return prior, second, group["summary_id"]


async def test_a_revert_leaves_archived_a_prior_summary_a_later_run_folded_again(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    """Found by an exploratory probe: reverting run 2 brought its prior summary back
    beside run 3's summary, which stands for it, and search served both."""
    prior, second, third = await folded_again(client)

    reverted = await client.post(f"/v1/consolidations/{second['id']}/revert")

    assert reverted.status_code == 200, reverted.text
    active = await active_ids(client, user_id="u1")
    assert third in active
    assert prior not in active
    await assert_consistent(resources, tenant.tenant_id)


async def test_deleting_a_summary_leaves_archived_a_prior_summary_another_folds(
    client: httpx.AsyncClient,
) -> None:
    """A synthesize-only summary X folds P; an archive run then archives P into S3;
    deleting X must not bring P back beside S3."""
    await seed(client, [memory(f"note {i}", i, tags=["t1"]) for i in range(3)]
               + [memory("kept", 3, importance=0.95, tags=["t1"])])
    first = await consolidate(client, user_id="u1")
    prior = first["groups"][0]["summary_id"]
    await seed(client, [memory("eagles", 10, importance=0.9), memory("frogs", 11)])
    synth = await consolidate(client, user_id="u1", include_summaries=True,
                              mode="synthesize_only")
    over = synth["groups"][0]["summary_id"]
    await seed(client, [memory("hats", 12, importance=0.97, tags=["t1"])])
    archived = await consolidate(client, user_id="u1", tags=["t1"], include_summaries=True,
                                 group_threshold=2)
    [group] = [g for g in archived["groups"] if prior in g["folded_ids"]]

    assert (await client.delete(f"/v1/memories/{over}")).status_code == 204

    active = await active_ids(client, user_id="u1")
    assert group["summary_id"] in active
    assert prior not in active


async def test_a_fact_and_its_summary_deleted_at_once_both_go_without_a_deadlock(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    """Found by an exploratory probe of two replicas: deleting a fact (the fact, then its
    summaries) and its summary (the summary, then its sources) at once deadlocked in 3-9
    of 20 pairs, the loser answering 503 after a second. An agent deleting the ids a
    search returned does just that."""
    for pair in range(6):
        user = f"u{pair}"
        await seed(client, [memory(f"note {i}", i, user_id=user) for i in range(3)]
                   + [memory("kept", 3, importance=0.9, user_id=user)])
        run = await consolidate(client, user_id=user)
        [group] = run["groups"]

        answers = await asyncio.gather(
            client.delete(f"/v1/memories/{group['removed_ids'][0]}"),
            client.delete(f"/v1/memories/{group['summary_id']}"))

        assert sorted(r.status_code for r in answers) in ([204, 204], [204, 404]), [
            r.text for r in answers]
        # The summary went either way; the other sources are back, the deleted one gone.
        assert await active_ids(client, user_id=user) == {
            group["kept_id"], *group["removed_ids"][1:]}
    await assert_consistent(resources, tenant.tenant_id)


async def test_a_user_erased_as_one_of_their_summaries_is_deleted_does_not_deadlock(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    """Stop 40's probe saw it: the filtered delete locked the user's rows in the order it
    found them, a delete of one of the summaries the summary and then what it archived,
    and at once they deadlocked (one answered 503 after a second). Here the summary's
    delete is held half-way, as a transaction of its own does it: the family, then the
    summary; the user's delete must wait for it, not take the sources meanwhile."""
    await seed(client, [memory(f"note {i}", i) for i in range(3)]
               + [memory("kept", 3, importance=0.9)])
    [group] = (await consolidate(client, user_id="u1", mode="archive"))["groups"]
    source, summary = group["removed_ids"][0], group["summary_id"]

    async with resources.sessionmaker() as deleting_summary:
        await MemoryRepository(deleting_summary, tenant.tenant_id).lock_families([summary])
        await deleting_summary.execute(
            text("SELECT 1 FROM memories WHERE id = :id FOR UPDATE"), {"id": summary})
        erasing = asyncio.create_task(client.delete("/v1/memories",
                                                    params={"user_id": "u1"}))
        await asyncio.sleep(0.3)
        assert not erasing.done()
        # What the summary's delete does next: bring back what it archived.
        await deleting_summary.execute(
            text("UPDATE memories SET archived_at = NULL WHERE id = :id"), {"id": source})
        await deleting_summary.commit()
        erased = await asyncio.wait_for(erasing, 10)

    assert erased.status_code == 200, erased.text
    assert erased.json()["deleted"] == 5
    assert await active_ids(client, user_id="u1") == set()
    await assert_consistent(resources, tenant.tenant_id)


async def test_a_user_erased_while_a_run_writes_one_of_their_groups_does_not_deadlock(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey,
) -> None:
    """A group's write locks its sources in id order, the filtered delete the user's rows
    in the order it finds them: with the group holding the newest of them and then
    taking an older one, the two waited for each other. The write is held half-way, as
    a run does it; the user's delete must wait for its family."""
    ids = await seed(client, [memory(f"note {i}", i) for i in range(4)])

    async with resources.engine.connect() as conn:
        raw = (await conn.get_raw_connection()).driver_connection
        writer = GroupWriter(raw, tenant.tenant_id)
        async with raw.transaction():
            assert [s.id for s in await writer.lock_sources([ids[3]])] == [uuid.UUID(ids[3])]
            erasing = asyncio.create_task(client.delete("/v1/memories",
                                                        params={"user_id": "u1"}))
            await asyncio.sleep(0.3)
            assert not erasing.done()
            await writer.lock_sources([ids[0]])  # a source the delete would hold by now
        erased = await asyncio.wait_for(erasing, 10)

    assert erased.status_code == 200, erased.text
    assert erased.json()["deleted"] == 4
    await assert_consistent(resources, tenant.tenant_id)


async def test_a_sources_expiry_set_as_its_summary_is_deleted_does_not_deadlock(
    client: httpx.AsyncClient,
) -> None:
    """Found by an exploratory re-probe: the PATCH (the source, then its summaries' cap)
    and the delete (the summary, then its sources) deadlocked in 4-6 of 20 pairs."""
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    for pair in range(6):
        user = f"u{pair}"
        await seed(client, [memory(f"note {i}", i, user_id=user) for i in range(3)]
                   + [memory("kept", 3, importance=0.9, user_id=user)])
        [group] = (await consolidate(client, user_id=user))["groups"]

        patched, deleted = await asyncio.gather(
            client.patch(f"/v1/memories/{group['removed_ids'][0]}",
                         json={"expires_at": later}),
            client.delete(f"/v1/memories/{group['summary_id']}"))

        assert (patched.status_code, deleted.status_code) == (200, 204), (
            patched.text, deleted.text)


async def test_a_revert_that_would_bring_a_summary_back_beside_a_newer_one_is_refused(
    client: httpx.AsyncClient,
) -> None:
    """Found by a concurrency probe: S1 summarised f2, f3; an archive run over another
    category folded S1 away; a later run summarised f2, f3 again (S2); reverting the
    archive run brought S1 back beside S2, two live summaries of the same memories."""
    f1, f2, f3, g = await seed(client, [
        memory("coffee with oat milk", 0, category="c", importance=0.9),
        memory("coffee at nine", 1, category="c", importance=0.1),
        memory("coffee beans from Kenya", 2, category="c", importance=0.1),
        memory("tea on Sundays", 3, category="other", importance=0.9)])
    [first] = (await consolidate(client, user_id="u1", mode="synthesize_only",
                                 group_threshold=2))["groups"]
    s1 = first["summary_id"]
    assert sorted(first["folded_ids"]) == sorted([f2, f3])
    assert (await client.patch(f"/v1/memories/{s1}", json={"category": "other"})
            ).status_code == 200
    folding = await consolidate(client, user_id="u1", mode="archive", group_threshold=2,
                                categories=["other"], include_summaries=True)
    assert s1 in folding["groups"][0]["removed_ids"]
    [second] = (await consolidate(client, user_id="u1", mode="synthesize_only",
                                  group_threshold=2))["groups"]
    s2 = second["summary_id"]

    refused = await client.post(f"/v1/consolidations/{folding['id']}/revert")

    assert refused.status_code == 409, refused.text
    assert s1 in refused.json()["detail"]
    assert s2 in refused.json()["detail"]
    assert await active_ids(client, user_id="u1") == {f1, f2, f3, g, s2,
                                                       folding["groups"][0]["summary_id"]}
    # With the newer summary gone, the revert goes through and S1 is back alone.
    assert (await client.delete(f"/v1/memories/{s2}")).status_code == 204
    assert (await client.post(f"/v1/consolidations/{folding['id']}/revert")).status_code == 200
    assert await active_ids(client, user_id="u1") == {f1, f2, f3, g, s1}
