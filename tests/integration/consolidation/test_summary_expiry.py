"""A summary of memories that expire expires with the last of them."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.integration.consolidation.conftest import consolidate, get_memory, memory, seed


def parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


@pytest.mark.parametrize("mode", ["archive", "synthesize_only"])
async def test_a_summary_of_expiring_memories_expires_with_the_last(
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
    assert parse(summary["expires_at"]) == max(parse(s["expires_at"]) for s in sources)
    await asyncio.sleep(max(0.0, (parse(summary["expires_at"]) - datetime.now(UTC))
                            .total_seconds()) + 0.3)
    assert (await client.get(f"/v1/memories/{group['summary_id']}")).status_code == 404
    found = await client.post("/v1/search", json={"query": "temporary secret code",
                                                  "user_id": "u1"})
    assert found.status_code == 200, found.text
    assert found.json()["results"] == []


async def test_a_summary_of_memories_one_of_which_never_expires_never_expires(
    client: httpx.AsyncClient,
) -> None:
    later = (datetime.now(UTC) + timedelta(days=1)).isoformat()
    await seed(client, [memory("note 0", 0, expires_at=later), memory("note 1", 1),
                        memory("note 2", 2, expires_at=later), memory("note 3", 3)])

    run = await consolidate(client, user_id="u1")

    [group] = run["groups"]
    assert (await get_memory(client, group["summary_id"]))["expires_at"] is None
