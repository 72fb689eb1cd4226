"""Lifts, for a summary-style query, the summaries whose sources the query found.

"Give me an overview of our chat about Isabel's podcast" asks for the summary of the
conversation about the podcast, but a summary's own text may not say so: it keeps some
of a conversation's sentences, and every summary of the same two people carries the
same names and the same kind of words. The memories it was built from (`summary_of`)
say it better: when they are among the candidates, their scores measure how much of
what the query asks about the summary covers. So, for summary-style queries only, each
summary gets `weight` times the sum of its `depth` best-scoring covered candidates
added to its score (after fusion, scoring and the date match; before the boost).

Regular queries are left alone: there the facts are the answer, and lifting their
summary would put it back above them. Only sources that are still searchable count: an
archive-mode consolidation's sources are archived, so its summary gets nothing and
competes on its own text and days, as without this stage.
"""

from __future__ import annotations

import heapq
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from app.search.types import Candidate, SearchContext


@dataclass(frozen=True, slots=True)
class SummaryCoverage:
    weight: float = 1.0
    depth: int = 2

    @property
    def name(self) -> str:
        return "summary_coverage"

    def __post_init__(self) -> None:
        if self.weight < 0:
            raise ValueError("weight must be >= 0")
        if self.depth < 1:
            raise ValueError("depth must be >= 1")

    def __call__(self, ctx: SearchContext, /) -> SearchContext:
        active = ctx.query.style == "summary" and self.weight > 0
        if not active and not ctx.explain:
            return ctx
        scores: Mapping[uuid.UUID, float] = (
            {c.memory_id: c.score for c in ctx.candidates} if active else {})
        return ctx.with_candidates(tuple(self._apply(c, scores, ctx.explain)
                                         for c in ctx.candidates))

    def _apply(self, c: Candidate, scores: Mapping[uuid.UUID, float],
               explain: bool) -> Candidate:
        found = [scores[i] for i in c.covers if i in scores and i != c.memory_id]
        lift = self.weight * sum(heapq.nlargest(self.depth, found)) if found else 0.0
        score = c.score + lift
        if not explain:
            return c.rescored(score) if lift else c
        return c.rescored(score, self.name, {
            "covered_candidates": len(found),
            "lift": lift,
            "score": score,
        })
