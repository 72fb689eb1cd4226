"""A summary holds its sources' text as it was, so rewriting a source's text dissolves the
summaries built from it (directly, or through a later summary), and what they had
archived, the rewritten memory among them, comes back to the active set.

Found by exploratory probes: a secret stored by mistake, then corrected with PATCH (and
its history erased), went on answering searches from the summary of the old text; a
synthesize_only summary of a corrected fact kept serving the fact as it was."""

from __future__ import annotations

import httpx
import pytest

from app.resources import Resources
from tests.conftest import TenantKey
from tests.integration.consolidation.conftest import consolidate, get_memory, memory, seed
from tests.integration.consolidation.test_forgetting import fold_a_secret, searched
from tests.integration.consolidation.test_modes_and_revert import active_ids
from tests.integration.search.test_term_stats import assert_consistent

CORRECTED = "the door code is kept in the vault"


async def rewrite(client: httpx.AsyncClient, memory_id: str, **change: object
                  ) -> dict[str, object]:
    resp = await client.patch(f"/v1/memories/{memory_id}", json=change)
    assert resp.status_code == 200, resp.text
    answer: dict[str, object] = resp.json()
    return answer


@pytest.mark.parametrize("mode", ["archive", "synthesize_only"])
async def test_rewriting_a_source_dissolves_its_summary(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey, mode: str,
) -> None:
    ids, group = await fold_a_secret(client, mode)

    answer = await rewrite(client, ids[1], content=CORRECTED)
    history = await client.delete(f"/v1/memories/{ids[1]}/history")

    assert history.status_code == 200, history.text
    assert (answer["content"], answer["archived_at"]) == (CORRECTED, None)
    assert (await client.get(f"/v1/memories/{group['summary_id']}")).status_code == 404
    assert not any("4417" in c for c in await searched(client, "door code"))
    assert await active_ids(client, user_id="u1") == set(ids)
    for memory_id in ids:
        again = await get_memory(client, memory_id)
        assert (again["archived_at"], again["consolidation_id"]) == (None, None)
    await assert_consistent(resources, tenant.tenant_id)
    # The next run summarises the memories as they now read.
    rerun = await consolidate(client, user_id="u1", mode=mode)
    summary = await get_memory(client, rerun["groups"][0]["summary_id"])
    assert "vault" in summary["content"]
    assert "4417" not in summary["content"]


async def test_a_rewrite_that_changes_nothing_or_not_the_text_keeps_the_summary(
    client: httpx.AsyncClient,
) -> None:
    ids = await seed(client, [memory(f"note {i}", i) for i in range(4)])
    run = await consolidate(client, user_id="u1", mode="synthesize_only")
    summary_id = run["groups"][0]["summary_id"]

    await rewrite(client, ids[0], content="note 0")
    await rewrite(client, ids[1], importance=0.8, tags=["kept"], metadata={"k": "v"})

    assert (await get_memory(client, summary_id))["archived_at"] is None
    assert await active_ids(client, user_id="u1") == {*ids, summary_id}


async def test_rewriting_a_summary_dissolves_the_summary_that_folded_it(
    client: httpx.AsyncClient,
) -> None:
    await seed(client, [memory(f"note {i}", i) for i in range(4)])
    first = await consolidate(client, user_id="u1")
    summary = first["groups"][0]["summary_id"]
    await seed(client, [memory(f"later {i}", 10 + i, importance=0.9 if i == 0 else 0.5)
                        for i in range(3)])
    second = await consolidate(client, user_id="u1", include_summaries=True)
    later = second["groups"][0]["summary_id"]
    assert summary in second["groups"][0]["folded_ids"]

    answer = await rewrite(client, summary, content="notes 0 to 2, corrected")

    assert answer["archived_at"] is None
    assert (await client.get(f"/v1/memories/{later}")).status_code == 404
    # The first run's summary stands again for what it archived; its sources stay put.
    assert summary in await active_ids(client, user_id="u1")
    for source in first["groups"][0]["folded_ids"]:
        assert (await get_memory(client, source))["archived_at"] is not None


async def test_a_rewrite_of_a_missing_memory_is_404_and_dissolves_nothing(
    client: httpx.AsyncClient,
) -> None:
    await seed(client, [memory(f"note {i}", i) for i in range(4)])
    run = await consolidate(client, user_id="u1", mode="synthesize_only")

    resp = await client.patch("/v1/memories/01900000-0000-7000-8000-000000000000",
                              json={"content": "anything"})

    assert resp.status_code == 404
    assert (await get_memory(client, run["groups"][0]["summary_id"]))["archived_at"] is None


HERON = {"tags": ["heron", "confidential"], "metadata": {"doc": "heron"}, "category": "proj"}


async def fold_heron(client: httpx.AsyncClient, mode: str) -> tuple[list[str], str]:
    ids = await seed(client, [memory(text, i, **HERON) for i, text in enumerate(
        ["Project Heron launches in March", "Heron's lead is Lee", "Heron's vendor is Acme",
         "Project Heron's budget is 2 million"])])
    [group] = (await consolidate(client, user_id="u1", mode=mode))["groups"]
    summary = await get_memory(client, group["summary_id"])
    assert (summary["tags"], summary["metadata"], summary["category"]) == (
        HERON["tags"], HERON["metadata"], HERON["category"])
    assert ids[0] in group["folded_ids"]
    return ids, group["summary_id"]


@pytest.mark.parametrize("mode", ["archive", "synthesize_only"])
@pytest.mark.parametrize("change", [
    {"tags": ["heron", "public"]}, {"metadata": {"doc": "press"}}, {"metadata": {}},
    {"category": "press"},
])
async def test_a_source_relabelled_out_of_what_its_summary_says_dissolves_it(
    client: httpx.AsyncClient, resources: Resources, tenant: TenantKey, mode: str,
    change: dict[str, object],
) -> None:
    """Found by an exploratory search probe: a source re-tagged (or its metadata or
    category changed) left its summary carrying the labels they had shared, so a search
    filtered by `confidential` answered with the summary, and in it the text of a
    memory no longer tagged so."""
    ids, summary = await fold_heron(client, mode)

    await rewrite(client, ids[0], **change)

    assert (await client.get(f"/v1/memories/{summary}")).status_code == 404
    assert await active_ids(client, user_id="u1") == set(ids)
    found = await client.post("/v1/search", json={
        "query": "Project Heron launches", "user_id": "u1", "tags": ["confidential"],
        "metadata": {"doc": "heron"}, "categories": ["proj"]})
    assert found.status_code == 200, found.text
    assert not [r for r in found.json()["results"] if "March" in r["memory"]["content"]]
    await assert_consistent(resources, tenant.tenant_id)


async def test_a_label_added_or_changed_where_the_summary_says_nothing_keeps_it(
    client: httpx.AsyncClient,
) -> None:
    ids, summary = await fold_heron(client, "archive")

    await rewrite(client, ids[0], tags=["heron", "confidential", "reviewed"],
                  metadata={"doc": "heron", "page": 3}, importance=0.9)
    await rewrite(client, ids[1], tags=["confidential", "heron"])

    assert (await get_memory(client, summary))["archived_at"] is None
    assert await active_ids(client, user_id="u1") == {ids[3], summary}


async def test_a_relabel_dissolves_only_the_summaries_it_makes_untrue(
    client: httpx.AsyncClient,
) -> None:
    """S (synthesize_only, of A and B) says tag p of A; S2 (an archive run over tag x, of A
    and X) says x. A losing x makes S2 untrue, not S: S stays, as it was. Every summary
    built from A went (a re-probe of 3d69556)."""
    a, b, _ = await seed(client, [memory(f"pool fact {i}", i, tags=tags) for i, tags in
                                  enumerate((["p", "x"], ["p"], ["p"]))])
    s = (await consolidate(client, user_id="u1", mode="synthesize_only"))["groups"][0]
    assert s["folded_ids"] == [a, b]
    x, _ = await seed(client, [memory(f"pool fact {i}", i, tags=["p", "x"])
                               for i in range(3, 5)])
    s2 = (await consolidate(client, user_id="u1", tags=["x"]))["groups"][0]
    assert set(s2["folded_ids"]) == {a, x}
    assert (await get_memory(client, s2["summary_id"]))["tags"] == ["p", "x"]
    before = await get_memory(client, s["summary_id"])

    await rewrite(client, a, tags=["p"])

    assert (await client.get(f"/v1/memories/{s2['summary_id']}")).status_code == 404
    assert await get_memory(client, s["summary_id"]) == before
    assert (await get_memory(client, a))["archived_at"] is None
    assert (await get_memory(client, x))["archived_at"] is None
