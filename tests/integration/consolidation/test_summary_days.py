"""A summary's days are the days of the facts it covers, not the day it was written
(migration 0010): consolidation records them, and the full-text vector holds their words."""

from __future__ import annotations

import uuid
from datetime import date
from typing import Any

import httpx
from sqlalchemy import text

from app.resources import Resources
from tests.integration.consolidation.conftest import consolidate, memory, seed

DAY = 24 * 60  # minutes


async def days_and_words(resources: Resources, memory_id: str) -> tuple[list[date], list[str]]:
    """The row's covered days, and its day words: the full-text entries of weight D (the
    content's are A)."""
    async with resources.sessionmaker() as session:
        row = (await session.execute(
            text("SELECT covered_days, ARRAY(SELECT w FROM unnest(tsvector_to_array("
                 "ts_filter(tsv, '{d}'))) AS w ORDER BY w) AS words "
                 "FROM memories WHERE id = :id"),
            {"id": uuid.UUID(memory_id)})).one()
    return list(row.covered_days), list(row.words)


def folded(result: dict[str, Any]) -> tuple[str, list[str]]:
    (group,) = result["groups"]
    return group["summary_id"], group["folded_ids"]


async def test_a_summary_covers_its_sources_days_through_summaries_of_summaries(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    # 1 January twice, then 2 and 3 January; the newest (kept) is not folded.
    await seed(client, [memory(f"note {i}", m) for i, m in
                        enumerate((0, 60, DAY + 5, 2 * DAY + 5))])
    first_id, first_folded = folded(await consolidate(client, user_id="u1"))
    assert len(first_folded) == 3

    first_days, first_words = await days_and_words(resources, first_id)

    assert first_days == [date(2026, 1, 1), date(2026, 1, 2)]
    # The day words are the covered days', not those of the day consolidation ran.
    assert first_words == ["1", "2", "2026", "januari"]

    # A later run folds the first summary with newer facts (one newcomer outranks the
    # summary's 0.7, so the summary is folded, not kept): its days carry over.
    await seed(client, [memory(f"later {i}", 9 * DAY + i, importance=0.9 if i == 0 else 0.5)
                        for i in range(3)])
    second_id, second_folded = folded(await consolidate(client, user_id="u1",
                                                        include_summaries=True))
    assert first_id in second_folded

    second_days, _ = await days_and_words(resources, second_id)
    # The first summary's two days, the kept note's 3 January, the newcomers' 10 January.
    assert second_days == [date(2026, 1, d) for d in (1, 2, 3, 10)]


async def test_a_fact_covers_no_days_and_keeps_its_own_day_words(
    client: httpx.AsyncClient, resources: Resources,
) -> None:
    (fact_id,) = await seed(client, [memory("a fact", 3 * DAY)])

    days, words = await days_and_words(resources, fact_id)

    assert days == []
    assert words == ["2026", "4", "januari"]
