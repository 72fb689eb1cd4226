"""Blends importance and recency into the fused relevance score."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, time

from app.search.types import Candidate, SearchContext

_SECONDS_PER_DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class ImportanceRecencyScoring:
    """score = relevance + importance_weight * importance + recency_weight * recency.

    recency = 0.5 ** (age_days / half_life_days): 1 for a memory written now,
    0.5 one half-life ago. Importance is clamped to [0, 1]. The weights are
    meant to be small next to relevance (the fused score, at most 1), so they
    reorder near-ties rather than override what the query asked for.

    A summary's age runs from the newest day it covers (noon UTC), not from when
    consolidation wrote it: its information is as old as its newest fact, and a
    summary written today of last year's facts is not fresh news.
    """

    importance_weight: float = 0.02
    recency_weight: float = 0.01
    recency_half_life_days: float = 30.0

    @property
    def name(self) -> str:
        return "scoring"

    def __post_init__(self) -> None:
        if self.importance_weight < 0 or self.recency_weight < 0:
            raise ValueError("weights must be >= 0")
        if not self.recency_half_life_days > 0:
            raise ValueError("recency_half_life_days must be > 0")

    def __call__(self, ctx: SearchContext, /) -> SearchContext:
        return ctx.with_candidates(
            tuple(self._score(c, ctx.now, ctx.explain) for c in ctx.candidates)
        )

    def recency(self, created_at: datetime, now: datetime) -> tuple[float, float]:
        """(age in days, recency factor); a timestamp in the future counts as age 0."""
        age_days = max(0.0, (now - created_at).total_seconds() / _SECONDS_PER_DAY)
        return age_days, math.pow(0.5, age_days / self.recency_half_life_days)

    def _score(self, c: Candidate, now: datetime, explain: bool) -> Candidate:
        importance = min(1.0, max(0.0, c.importance))
        age_days, recency = self.recency(_said_at(c), now)
        importance_term = self.importance_weight * importance
        recency_term = self.recency_weight * recency
        score = c.score + importance_term + recency_term
        if not explain:
            return c.rescored(score)
        return c.rescored(
            score,
            self.name,
            {
                "relevance": c.score,
                "importance": importance,
                "importance_term": importance_term,
                "age_days": age_days,
                "recency": recency,
                "recency_term": recency_term,
                "score": score,
            },
        )


def _said_at(c: Candidate) -> datetime:
    if c.covered_days:
        return datetime.combine(max(c.covered_days), time(12), tzinfo=UTC)
    return c.created_at
