"""archive vs synthesize_only, summaries and re-folding, revert, and tenant isolation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy import text

from app.resources import Resources
from tests.conftest import create_tenant_key, make_client
from tests.integration.consolidation.conftest import (
    BASE_TIME,
    consolidate,
    get_memory,
    memory,
    seed,
    summaries,
)


async def active_ids(client: httpx.AsyncClient, **params: str) -> set[str]:
    resp = await client.get("/v1/memories", params={"limit": 500, **params})
    return {m["id"] for m in resp.json()["items"]}


async def test_archive_mode_moves_sources_out_of_the_active_set(
    client: httpx.AsyncClient,
) -> None:
    ids = await seed(client, [memory(f"note {i}", i) for i in range(4)])

    result = await consolidate(client, user_id="u1", mode="archive")

    (group,) = result["groups"]
    assert result["deleted"] == 3
    assert await active_ids(client, user_id="u1") == {ids[3], group["summary_id"]}
    archived = await client.get("/v1/memories", params={"user_id": "u1",
                                                        "include_archived": "true"})
    assert len(archived.json()["items"]) == 5
    folded = await get_memory(client, ids[0])
    assert folded["archived_at"] is not None
    assert folded["consolidation_id"] == result["id"]


async def test_synthesize_only_keeps_sources_active_and_does_not_summarise_twice(
    client: httpx.AsyncClient,
) -> None:
    ids = await seed(client, [memory(f"note {i}", i) for i in range(4)])

    result = await consolidate(client, user_id="u1", mode="synthesize_only")

    (group,) = result["groups"]
    assert (result["consolidated"], result["created"], result["deleted"]) == (3, 1, 0)
    assert group["removed_ids"] == []
    assert group["folded_ids"] == ids[:3]
    assert await active_ids(client, user_id="u1") == {*ids, group["summary_id"]}
    assert (await get_memory(client, ids[0]))["consolidation_id"] is None
    # Memories a live summary already covers are not summarised again.
    again = await consolidate(client, user_id="u1", mode="synthesize_only")
    assert again["groups"] == []
    assert len(await summaries(client, user_id="u1")) == 1


async def test_an_expired_summary_no_longer_keeps_its_sources_from_the_next_run(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    """Found by an exploratory probe (from the code): an expired summary the purge had
    not yet removed still counted as covering its sources, in the choice of candidates
    and again when the group was written, so until the purge no synthesize_only run
    summarised them, while no search could see the summary."""
    ids = await seed(client, [memory(f"note {i}", i) for i in range(4)])
    first = (await consolidate(client, user_id="u1", mode="synthesize_only"))["groups"][0]
    async with resources.engine.begin() as conn:
        await conn.execute(text("UPDATE memories SET expires_at = now() - interval '1 second'"
                                " WHERE id = CAST(:id AS uuid)"), {"id": first["summary_id"]})

    again = await consolidate(client, user_id="u1", mode="synthesize_only")

    (group,) = again["groups"]
    assert group["folded_ids"] == ids[:3]
    assert group["summary_id"] != first["summary_id"]
    assert [s["id"] for s in await summaries(client, user_id="u1")] == [group["summary_id"]]


async def test_an_archive_run_folds_the_live_summary_of_what_it_archives(
    client: httpx.AsyncClient,
) -> None:
    """Found by two exploratory probes: an archive run over memories an automatic
    (synthesize_only) run had summarised left both summaries live, two answers for the
    same memories in every search."""
    ids = await seed(client, [memory(f"note {i}", i) for i in range(4)])
    synth = await consolidate(client, user_id="u1", mode="synthesize_only")
    earlier = synth["groups"][0]["summary_id"]
    dry = await consolidate(client, user_id="u1", mode="archive", dry_run=True)
    assert dry["groups"][0]["removed_ids"] == [*ids[:3], earlier]

    run = await consolidate(client, user_id="u1", mode="archive")

    (group,) = run["groups"]
    assert group["removed_ids"] == group["folded_ids"] == [*ids[:3], earlier]
    # Folded as a prior summary an include_summaries run folds, and counted alike.
    assert (run["consolidated"], run["deleted"]) == (4, 4)
    assert [s["id"] for s in await summaries(client, user_id="u1")] == [group["summary_id"]]
    assert await active_ids(client, user_id="u1") == {ids[3], group["summary_id"]}
    folded = await get_memory(client, earlier)
    assert folded["archived_at"] is not None
    assert folded["consolidation_id"] == synth["id"]  # its lineage, as a refolded summary's
    assert earlier in (await get_memory(client, group["summary_id"]))["summary_of"]

    resp = await client.post(f"/v1/consolidations/{run['id']}/revert")

    assert resp.status_code == 200, resp.text
    assert await active_ids(client, user_id="u1") == {*ids, earlier}


async def test_a_revert_is_refused_while_a_later_run_folds_a_summary_of_what_it_archived(
    client: httpx.AsyncClient,
) -> None:
    """Found by an exploratory re-probe: R1 archived A and B, then R2 archived C and D and
    folded the automatic summary of all four; reverting R1 brought A and B back while
    R2's summary still stood for them through the one it folded."""
    ids = await seed(client, [memory(t, i, tags=[tag]) for i, (t, tag) in enumerate(
        [("Alice likes apples", "t1"), ("Bob likes bananas", "t1"),
         ("Carol likes cherries", "t2"), ("Dave likes dates", "t2")])]
        + [memory("kept, very important", 4, importance=1.0)])
    synth = await consolidate(client, user_id="u1", mode="synthesize_only")
    earlier = synth["groups"][0]["summary_id"]
    assert synth["groups"][0]["folded_ids"] == ids[:4]
    await seed(client, [memory(f"{n} likes kiwis", 10 + i, tags=[tag], importance=1.0)
                        for i, (n, tag) in enumerate([("Kevin", "t1"), ("Ken", "t2")])])
    first = await consolidate(client, user_id="u1", tags=["t1"])
    second = await consolidate(client, user_id="u1", tags=["t2"])
    assert second["groups"][0]["removed_ids"] == [*ids[2:4], earlier]
    later = second["groups"][0]["summary_id"]

    refused = await client.post(f"/v1/consolidations/{first['id']}/revert")

    assert refused.status_code == 409, refused.text
    assert f"folded into summary {later} by run {second['id']}" in refused.json()["detail"]
    assert (await get_memory(client, ids[0]))["archived_at"] is not None
    # In the other order both go back to where they were.
    assert (await client.post(f"/v1/consolidations/{second['id']}/revert")).status_code == 200
    assert (await client.post(f"/v1/consolidations/{first['id']}/revert")).status_code == 200
    assert {*ids, earlier} <= await active_ids(client, user_id="u1")


async def test_a_summary_of_the_groups_own_members_is_folded_not_kept(
    client: httpx.AsyncClient,
) -> None:
    """Found by two exploratory probes. An include_summaries archive run kept the summary
    (the most important candidate) and archived it all the same, its record saying both;
    then, kept, it stayed live beside the new summary of the same memories (a concurrent
    write probe saw two live summaries of the same sources again and again)."""
    ids = await seed(client, [memory(f"note {i}", i) for i in range(4)])
    earlier = (await consolidate(client, user_id="u1",
                                 mode="synthesize_only"))["groups"][0]["summary_id"]
    assert (await get_memory(client, earlier))["summary_of"] == ids[:3]

    dry = await consolidate(client, user_id="u1", include_summaries=True, dry_run=True)
    run = await consolidate(client, user_id="u1", include_summaries=True)

    for group in (dry["groups"][0], run["groups"][0]):
        assert group["kept_id"] == ids[3]
        assert group["removed_ids"] == [*ids[:3], earlier]
    (live,) = await summaries(client, user_id="u1")
    assert live["id"] == run["groups"][0]["summary_id"]
    assert (await get_memory(client, earlier))["archived_at"] is not None
    assert await active_ids(client, user_id="u1") == {ids[3], live["id"]}


async def test_no_member_a_folded_summary_holds_is_kept_beside_the_new_summary(
    client: httpx.AsyncClient,
) -> None:
    """Two synthesize_only runs (as automatic runs are), the second with include_summaries:
    S stands for A and B, S3 for C, D and E. An archive run over all of them kept E in
    S3's place, and E stayed live beside the new summary holding its text through S3 (an
    exploratory probe). Every member is held by a summary the run folds, so none is kept."""
    a, b, c = await seed(client, [memory(f"gym note {i}", i) for i in range(3)])
    first = (await consolidate(client, user_id="u1", mode="synthesize_only"))["groups"][0]
    d, e = await seed(client, [memory(f"gym note {i}", i) for i in range(3, 5)])
    second = (await consolidate(client, user_id="u1", mode="synthesize_only",
                                include_summaries=True))["groups"][0]
    s, s3 = first["summary_id"], second["summary_id"]
    assert (await get_memory(client, s))["summary_of"] == [a, b]
    assert (await get_memory(client, s3))["summary_of"] == [c, d, e]

    run = await consolidate(client, user_id="u1", include_summaries=True)

    (group,) = run["groups"]
    assert group["kept_id"] is None
    assert set(group["removed_ids"]) == {a, b, c, d, e, s, s3}
    assert await active_ids(client, user_id="u1") == {group["summary_id"]}


async def test_a_member_a_folded_summary_holds_through_another_is_not_kept(
    client: httpx.AsyncClient,
) -> None:
    """A re-probe: S (live) stands for S3, archived, which stands for E (live). A run
    keeping the most important E and folding S left E's text in the new summary beside E:
    a summary's members are read through summaries of summaries."""
    e, c, d, k = await seed(client, [
        memory("Frank moved to Lisbon in 2021.", 0, importance=0.5),
        memory("Frank drinks coffee at 7.", 1), memory("Frank walks his dog Rex.", 2),
        memory("Frank keeps bees in Sintra.", 3, importance=0.95)])
    s3 = (await consolidate(client, user_id="u1", mode="synthesize_only"))["groups"][0]
    assert (await get_memory(client, s3["summary_id"]))["summary_of"] == [e, c, d]
    # Over what came after E only: S of C, D and S3, E left live.
    after_e = (BASE_TIME + timedelta(minutes=0.5)).isoformat()
    (s,) = (await consolidate(client, user_id="u1", include_summaries=True,
                              created_after=after_e))["groups"]
    assert set(s["folded_ids"]) == {c, d, s3["summary_id"]}
    assert (await client.patch(f"/v1/memories/{e}", json={"importance": 0.99})).status_code == 200

    (group,) = (await consolidate(client, user_id="u1", include_summaries=True))["groups"]

    assert group["kept_id"] == k
    assert set(group["folded_ids"]) == {e, s["summary_id"]}
    assert await active_ids(client, user_id="u1") == {k, group["summary_id"]}


async def test_an_entry_an_op_left_out_is_folded_with_the_summary_holding_it(
    client: httpx.AsyncClient,
) -> None:
    """A re-probe: concatenate packs entries oldest first under its cap; a long E no
    longer fit after C and D, the short S3 of C, D and E written after it did, and E
    stayed live beside the new summary holding its fact through S3."""
    filler = "he really liked it there and thought about it a lot. " * 74
    k, c, d, e = await seed(client, [
        memory("Frank keeps bees in Sintra.", 0, importance=0.95),
        memory("Frank drinks coffee at 7.", 1), memory("Frank walks his dog Rex.", 2),
        memory("Frank moved to Lisbon in 2021. " + filler, 3)])
    s3 = (await consolidate(client, user_id="u1", mode="synthesize_only",
                            op={"name": "extractive"}))["groups"][0]["summary_id"]
    assert set((await get_memory(client, s3))["summary_of"]) == {c, d, e}

    (group,) = (await consolidate(client, user_id="u1", include_summaries=True))["groups"]

    assert group["kept_id"] == k
    assert set(group["folded_ids"]) == {c, d, e, s3}
    assert await active_ids(client, user_id="u1") == {k, group["summary_id"]}


async def test_deleting_the_archive_summary_brings_back_the_summary_it_folded(
    client: httpx.AsyncClient,
) -> None:
    ids = await seed(client, [memory(f"note {i}", i) for i in range(4)])
    earlier = (await consolidate(client, user_id="u1",
                                 mode="synthesize_only"))["groups"][0]["summary_id"]
    later = (await consolidate(client, user_id="u1"))["groups"][0]["summary_id"]

    assert (await client.delete(f"/v1/memories/{later}")).status_code == 204

    assert await active_ids(client, user_id="u1") == {*ids, earlier}
    assert (await get_memory(client, earlier))["archived_at"] is None


async def test_a_summary_stays_live_while_one_of_its_sources_does(
    client: httpx.AsyncClient,
) -> None:
    """Folded only once every source of it is archived by a run, so it never stops
    serving a memory that nothing else stands for; then by the run that archives the
    last of them."""
    ids = await seed(client, [memory(f"note {i}", i, importance=0.8 if i == 2 else
                                     0.9 if i == 5 else 0.5) for i in range(6)])
    synth = await consolidate(client, user_id="u1", mode="synthesize_only")
    (synth_group,) = synth["groups"]
    earlier = synth_group["summary_id"]
    assert synth_group["folded_ids"] == ids[:5]
    window = (BASE_TIME + timedelta(minutes=2, seconds=30)).isoformat()

    first = await consolidate(client, user_id="u1", created_before=window)

    assert first["groups"][0]["removed_ids"] == ids[:2]
    assert (await get_memory(client, earlier))["archived_at"] is None

    second = await consolidate(client, user_id="u1")

    assert second["groups"][0]["removed_ids"] == [*ids[2:5], earlier]
    live = {s["id"] for s in await summaries(client, user_id="u1")}
    assert live == {first["groups"][0]["summary_id"], second["groups"][0]["summary_id"]}


async def test_a_summary_standing_for_a_memory_the_cap_archived_stays_live(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    """A memory the cap put away has no other summary standing for it."""
    ids = await seed(client, [memory(f"note {i}", i) for i in range(4)])
    earlier = (await consolidate(client, user_id="u1",
                                 mode="synthesize_only"))["groups"][0]["summary_id"]
    async with resources.sessionmaker() as session, session.begin():
        await session.execute(text("UPDATE memories SET archived_at = now() WHERE id = :id"),
                              {"id": ids[0]})
    run = await consolidate(client, user_id="u1")

    assert earlier not in run["groups"][0]["removed_ids"]
    assert (await get_memory(client, earlier))["archived_at"] is None


async def test_summaries_are_not_refolded_unless_asked(client: httpx.AsyncClient) -> None:
    await seed(client, [memory(f"note {i}", i) for i in range(4)])
    first = await consolidate(client, user_id="u1")
    await seed(client, [memory(f"later {i}", 10 + i) for i in range(3)])

    second = await consolidate(client, user_id="u1")

    summary_id = first["groups"][0]["summary_id"]
    assert summary_id not in second["groups"][0]["removed_ids"]
    assert (await get_memory(client, summary_id))["archived_at"] is None

    await seed(client, [memory(f"latest {i}", 20 + i) for i in range(3)])
    third = await consolidate(client, user_id="u1", include_summaries=True)
    folded = {i for g in third["groups"] for i in g["removed_ids"]}
    assert summary_id in folded
    refolded = await get_memory(client, summary_id)
    assert refolded["archived_at"] is not None
    # A folded summary keeps the run that wrote it as its lineage.
    assert refolded["consolidation_id"] == first["id"]


async def test_revert_restores_sources_and_deletes_summaries(
    client: httpx.AsyncClient,
) -> None:
    ids = await seed(client, [memory(f"note {i}", i, category=c)
                              for i, c in enumerate("aaabbb")])
    result = await consolidate(client, user_id="u1")
    assert result["created"] == 2

    resp = await client.post(f"/v1/consolidations/{result['id']}/revert")

    assert resp.status_code == 200, resp.text
    assert resp.json()["reverted_at"] is not None
    assert await active_ids(client, user_id="u1") == set(ids)
    restored = await get_memory(client, ids[0])
    assert (restored["archived_at"], restored["consolidation_id"]) == (None, None)
    for group in result["groups"]:
        assert (await client.get(f"/v1/memories/{group['summary_id']}")).status_code == 404
    again = await client.post(f"/v1/consolidations/{result['id']}/revert")
    assert again.status_code == 409
    assert "already reverted" in again.json()["detail"]


async def test_revert_is_refused_once_a_summary_was_consolidated_again(
    client: httpx.AsyncClient,
) -> None:
    await seed(client, [memory(f"note {i}", i) for i in range(4)])
    first = await consolidate(client, user_id="u1")
    # One newcomer outranks the summary (0.7), so the summary is folded, not kept.
    await seed(client, [memory(f"later {i}", 10 + i, importance=0.9 if i == 0 else 0.5)
                        for i in range(3)])
    second = await consolidate(client, user_id="u1", include_summaries=True)
    summary_id = first["groups"][0]["summary_id"]
    assert summary_id in second["groups"][0]["removed_ids"]

    resp = await client.post(f"/v1/consolidations/{first['id']}/revert")

    assert resp.status_code == 409
    assert summary_id in resp.json()["detail"]
    # Reverting the later run first makes the earlier one revertible.
    assert (await client.post(f"/v1/consolidations/{second['id']}/revert")).status_code == 200
    assert (await client.post(f"/v1/consolidations/{first['id']}/revert")).status_code == 200
    assert len(await active_ids(client, user_id="u1")) == 7


async def test_a_summary_folded_by_a_run_that_cannot_be_reverted_is_deleted_instead(
    client: httpx.AsyncClient,
) -> None:
    """Found by an exploratory probe: the 409 said to revert the later run first, which,
    synthesize_only, answered 409 itself; deleting its summary, the way out, went unsaid."""
    await seed(client, [memory(f"note {i}", i) for i in range(4)])
    first = await consolidate(client, user_id="u1")
    await seed(client, [memory(f"later {i}", 10 + i, importance=0.9 if i == 0 else 0.5)
                        for i in range(3)])
    second = await consolidate(client, user_id="u1", include_summaries=True,
                               mode="synthesize_only")
    later = second["groups"][0]["summary_id"]

    refused = await client.post(f"/v1/consolidations/{first['id']}/revert")
    dead_end = await client.post(f"/v1/consolidations/{second['id']}/revert")

    assert refused.status_code == 409
    assert f"or delete that summary (DELETE /v1/memories/{later})" in \
        refused.json()["detail"]
    assert dead_end.status_code == 409
    assert (await client.delete(f"/v1/memories/{later}")).status_code == 204
    assert (await client.post(f"/v1/consolidations/{first['id']}/revert")).status_code == 200
    assert len(await active_ids(client, user_id="u1")) == 7


async def test_revert_is_refused_while_a_summary_holds_a_clients_edit(
    client: httpx.AsyncClient,
) -> None:
    """A revert deletes the run's summaries: one a client has changed since is not
    deleted behind its back (it was, silently)."""
    ids = await seed(client, [memory(f"note {i}", i) for i in range(4)])
    run = await consolidate(client, user_id="u1")
    summary_id = run["groups"][0]["summary_id"]
    edited = await client.patch(f"/v1/memories/{summary_id}",
                                json={"content": "edited summary"})
    assert edited.status_code == 200, edited.text

    resp = await client.post(f"/v1/consolidations/{run['id']}/revert")

    assert resp.status_code == 409, resp.text
    assert summary_id in resp.json()["detail"]
    assert (await get_memory(client, summary_id))["content"] == "edited summary"
    assert await active_ids(client, user_id="u1") == {ids[3], summary_id}
    # Deleting the summary, as the answer says, lets the revert restore the sources.
    assert (await client.delete(f"/v1/memories/{summary_id}")).status_code == 204
    assert (await client.post(f"/v1/consolidations/{run['id']}/revert")).status_code == 200
    assert await active_ids(client, user_id="u1") == set(ids)


async def test_a_summarys_expiry_moved_by_its_sources_does_not_refuse_the_revert(
    client: httpx.AsyncClient,
) -> None:
    """Found by an exploratory re-probe: a source's expiry set later caps its summary's
    (the service's own change), and the revert then answered 409 as if a client had
    edited the summary."""
    ids = await seed(client, [memory(f"note {i}", i) for i in range(4)])
    run = await consolidate(client, user_id="u1")
    summary_id = run["groups"][0]["summary_id"]
    source = run["groups"][0]["folded_ids"][0]
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    capped = await client.patch(f"/v1/memories/{source}", json={"expires_at": later})
    assert capped.status_code == 200, capped.text
    assert (await get_memory(client, summary_id))["expires_at"] is not None

    resp = await client.post(f"/v1/consolidations/{run['id']}/revert")

    assert resp.status_code == 200, resp.text
    assert await active_ids(client, user_id="u1") == set(ids)


async def test_synthesize_only_and_dry_runs_cannot_be_reverted(
    client: httpx.AsyncClient,
) -> None:
    await seed(client, [memory(f"note {i}", i) for i in range(4)])
    dry = await consolidate(client, user_id="u1", dry_run=True)
    synth = await consolidate(client, user_id="u1", mode="synthesize_only")

    for run, reason in ((synth, "synthesize_only"), (dry, "dry run")):
        resp = await client.post(f"/v1/consolidations/{run['id']}/revert")
        assert resp.status_code == 409
        assert reason in resp.json()["detail"]


async def test_runs_are_confined_to_their_tenant(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    await seed(client, [memory(f"note {i}", i) for i in range(4)])
    run = await consolidate(client, user_id="u1")
    other = await create_tenant_key(resources)

    async with make_client(resources, other.headers) as stranger:
        assert (await stranger.get(f"/v1/consolidations/{run['id']}")).status_code == 404
        assert (await stranger.get("/v1/consolidations")).json()["items"] == []
        reverted = await stranger.post(f"/v1/consolidations/{run['id']}/revert")
        assert reverted.status_code == 404
        # Its own run on the same scope name sees none of the first tenant's memories.
        own = await consolidate(stranger, user_id="u1")
        assert own["candidates"] == 0

    assert (await client.get(f"/v1/consolidations/{run['id']}")).json()["reverted_at"] is None


async def test_runs_are_listed_newest_first_with_cursor_paging(
    client: httpx.AsyncClient,
) -> None:
    await seed(client, [memory(f"note {i}", i) for i in range(3)])
    made = [(await consolidate(client, user_id="u1", dry_run=True))["id"] for _ in range(5)]

    seen: list[str] = []
    cursor = None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await client.get("/v1/consolidations", params=params)).json()
        seen += [r["id"] for r in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert seen == made[::-1]


async def test_runs_are_listed_by_status_trigger_and_the_scope_they_named(
    client: httpx.AsyncClient,
) -> None:
    await seed(client, [memory(f"note {i}", i, user_id=u)
                        for u in ("u1", "u2") for i in range(3)])
    planned = [(await consolidate(client, user_id="u1", dry_run=True))["id"] for _ in range(3)]
    done = (await consolidate(client, user_id="u2"))["id"]

    async def listed(**params: object) -> list[str]:
        seen: list[str] = []
        cursor = None
        while True:  # a page of one, so paging goes through the filter too
            page = await client.get("/v1/consolidations", params={
                "limit": 1, **params, **({"cursor": cursor} if cursor else {})})
            assert page.status_code == 200, page.text
            seen += [r["id"] for r in page.json()["items"]]
            cursor = page.json()["next_cursor"]
            if cursor is None:
                return seen

    assert await listed(status="planned") == planned[::-1]
    assert await listed(status="succeeded") == [done]
    assert await listed(status="running") == []
    assert await listed(user_id="u2") == [done]
    assert await listed(user_id="u1", status="planned") == planned[::-1]
    assert await listed(user_id="u3") == []
    assert await listed(trigger="api") == [done, *planned[::-1]]
    assert await listed(trigger="auto") == []
    assert await listed(agent_id="a1") == []
    for params, field in (({"status": "done"}, "query.status"),
                          ({"trigger": "cron"}, "query.trigger"),
                          ({"user": "u1"}, "query.user"),
                          ({"user_id": ""}, "query.user_id")):
        resp = await client.get("/v1/consolidations", params=params)
        assert resp.status_code == 422, resp.text
        assert [e["field"] for e in resp.json()["errors"]] == [field]


async def test_an_archive_run_folds_a_live_summary_of_a_summary_it_folds(
    client: httpx.AsyncClient,
) -> None:
    """Two synthesize_only runs, as automatic runs are, the second with
    include_summaries: S1 stands for A, B and C, S2 for S1 and the memories after them.
    An archive run over all the facts folded S1 but left S2 live: it looked for
    summaries of what it archived one level down only, and S2 was served beside the
    run's own summary of the same memories."""
    ids = await seed(client, [memory(f"gym note {i}", i) for i in range(4)])
    s1 = (await consolidate(client, user_id="u1", mode="synthesize_only"))["groups"][0]
    ids += await seed(client, [memory("gym note 4", 4),
                               memory("gym note 5", 5, importance=1.0)])
    s2 = (await consolidate(client, user_id="u1", mode="synthesize_only",
                            include_summaries=True))["groups"][0]
    assert s1["summary_id"] in s2["folded_ids"]
    assert (await get_memory(client, s1["summary_id"]))["archived_at"] is None
    dry = await consolidate(client, user_id="u1", mode="archive", dry_run=True)

    run = await consolidate(client, user_id="u1", mode="archive")

    (group,) = run["groups"]
    folded = {*ids[:5], s1["summary_id"], s2["summary_id"]}
    assert set(group["removed_ids"]) == set(dry["groups"][0]["removed_ids"]) == folded
    assert [s["id"] for s in await summaries(client, user_id="u1")] == [group["summary_id"]]
    assert await active_ids(client, user_id="u1") == {ids[5], group["summary_id"]}

    resp = await client.post(f"/v1/consolidations/{run['id']}/revert")

    assert resp.status_code == 200, resp.text
    assert await active_ids(client, user_id="u1") == {*ids, s1["summary_id"],
                                                      s2["summary_id"]}


async def test_a_revert_is_not_refused_over_a_summary_older_than_the_run(
    client: httpx.AsyncClient,
) -> None:
    """A re-probe: S3, the last of three automatic summaries (each of the one before and
    later memories), also stood for the memory an archive run then kept, so it stayed
    live over S2, which the run folded. The revert was refused as if a later run had
    folded S2, though S3 predates the run and the revert brings back the state it was
    written in."""
    ids = await seed(client, [memory(f"gym note {i}", i) for i in range(4)])
    earlier = [(await consolidate(client, user_id="u1", mode="synthesize_only"))["groups"][0]]
    for first in (4, 6):
        ids += await seed(client, [memory(f"gym note {first}", first),
                                   memory(f"gym note {first + 1}", first + 1, importance=1.0)])
        earlier += (await consolidate(client, user_id="u1", mode="synthesize_only",
                                      include_summaries=True))["groups"]
    s1, s2, s3 = (group["summary_id"] for group in earlier)
    assert {s2, ids[5]} <= set(earlier[2]["folded_ids"])
    # The run keeps ids[5], which S3 stands for: S3 stays live over S2.
    assert (await client.patch(f"/v1/memories/{ids[7]}", json={"importance": 0.1})
            ).status_code == 200
    run = await consolidate(client, user_id="u1", mode="archive")
    (group,) = run["groups"]
    assert group["kept_id"] == ids[5]
    assert {s1, s2} <= set(group["removed_ids"])
    assert s3 in await active_ids(client, user_id="u1")

    resp = await client.post(f"/v1/consolidations/{run['id']}/revert")

    assert resp.status_code == 200, resp.text
    assert await active_ids(client, user_id="u1") == {*ids, s1, s2, s3}
