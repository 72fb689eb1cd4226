"""Raises the memories written on a day the query names ("what did Tom say on 8 May 2023").

A memory's `created_at` is when it was said, and a query that names a day most often
asks what was said that day, so a memory of that day (UTC) gets `weight` added to its
score. A bonus, not a filter: the query may name the day a memory written earlier is
about ("is the dentist on 8 May?"), and that memory must still outrank the day's
unrelated ones. Added, not multiplied, and small next to the fused score (at most 1).
Full-text search matches the day too (each row's date is indexed as words), but as three
common words among the query's others.

A summary's day is not its `created_at` (when consolidation wrote it, perhaps months
later) but the days of the facts it covers (`covered_days`, migration 0010): "what did we
discuss on 8 May 2023" is lifted to the summary of that day's conversation.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, date

from app.search.types import Candidate, SearchContext


@dataclass(frozen=True, slots=True)
class DateMatch:
    weight: float = 0.3

    @property
    def name(self) -> str:
        return "date_match"

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise ValueError("weight must be >= 0")

    def __call__(self, ctx: SearchContext, /) -> SearchContext:
        days = ctx.query.dates
        if not ctx.explain and (not days or self.weight == 0):
            return ctx
        named = frozenset(days)
        return ctx.with_candidates(tuple(self._apply(c, named, ctx.explain)
                                         for c in ctx.candidates))

    def _apply(self, c: Candidate, days: Collection[date], explain: bool) -> Candidate:
        matched = on_named_day(c, days)
        score = c.score + self.weight if matched else c.score
        if not explain:
            return c.rescored(score) if matched else c
        return c.rescored(score, self.name, {"matched": matched, "score": score})


def on_named_day(c: Candidate, days: Collection[date]) -> bool:
    """Whether the memory is of one of `days`: a summary by the days it covers, a fact by
    its creation day (UTC)."""
    if c.covered_days:
        return any(day in days for day in c.covered_days)
    return c.created_at.astimezone(UTC).date() in days
