"""Small builders of candidates and contexts for the stage tests."""

from __future__ import annotations

import uuid
from datetime import UTC, date, datetime, timedelta

from app.search.types import Candidate, QueryAnalysis, QueryStyle, SearchContext

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def make_candidate(
    n: int,
    *,
    vector_rank: int | None = None,
    text_rank: int | None = None,
    score: float = 0.0,
    importance: float = 0.5,
    age_days: float = 0.0,
    fact_role: str = "fact",
    covered_days: tuple[date, ...] = (),
    covers: tuple[int, ...] = (),
) -> Candidate:
    """Candidate number `n`, with a predictable id so ties sort predictably."""
    return Candidate(
        memory_id=uuid.UUID(int=n),
        payload={"n": n},
        importance=importance,
        created_at=NOW - timedelta(days=age_days),
        fact_role=fact_role,
        vector_rank=vector_rank,
        vector_similarity=None if vector_rank is None else 1.0 - vector_rank / 100,
        text_rank=text_rank,
        text_score=None if text_rank is None else 1.0 / text_rank,
        covered_days=covered_days,
        covers=tuple(uuid.UUID(int=i) for i in covers),
        score=score,
    )


def make_context(
    *candidates: Candidate,
    style: QueryStyle = "regular",
    top_k: int = 10,
    include_summaries: bool = True,
    explain: bool = True,
    dates: tuple[date, ...] = (),
    identifiers: tuple[str, ...] = (),
) -> SearchContext:
    return SearchContext(
        query=QueryAnalysis(text="query", style=style, dates=dates, identifiers=identifiers),
        candidates=tuple(candidates),
        top_k=top_k,
        now=NOW,
        include_summaries=include_summaries,
        explain=explain,
    )


def by_number(ctx: SearchContext) -> dict[int, Candidate]:
    return {c.memory_id.int: c for c in ctx.candidates}


def order(ctx: SearchContext) -> list[int]:
    return [c.memory_id.int for c in ctx.candidates]
