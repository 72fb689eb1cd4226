"""Keeps summaries from crowding out the facts they were built from.

A summary sits close to every fact it covers, so for a specific question it
would outrank the fact that answers it. For `regular` queries each summary's
score is multiplied by `factor` (< 1; a factor >= 1 changes nothing); for
`summary` queries summaries keep their score, times an optional `boost`.
`include_summaries=false` drops summaries altogether.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.search.types import Candidate, SearchContext


@dataclass(frozen=True, slots=True)
class SummaryDownweight:
    factor: float = 0.5
    boost: float = 1.0

    @property
    def name(self) -> str:
        return "summary_downweight"

    def __post_init__(self) -> None:
        if self.factor < 0:
            raise ValueError("factor must be >= 0")
        if self.boost < 1:
            raise ValueError("boost must be >= 1 (use factor to lower summaries)")

    def __call__(self, ctx: SearchContext, /) -> SearchContext:
        kept = ctx.candidates
        if not ctx.include_summaries:
            kept = tuple(c for c in kept if not c.is_summary)
        regular = ctx.query.style == "regular"
        multiplier = min(self.factor, 1.0) if regular else self.boost
        if multiplier == 1.0 and not ctx.explain:
            return ctx.with_candidates(kept)
        return ctx.with_candidates(
            tuple(self._apply(c, multiplier, regular, ctx.explain) for c in kept)
        )

    def _apply(self, c: Candidate, multiplier: float, regular: bool, explain: bool) -> Candidate:
        changed = c.is_summary and multiplier != 1.0
        if not explain:
            return c.rescored(c.score * multiplier) if changed else c
        score = c.score * multiplier if changed else c.score
        return c.rescored(
            score,
            self.name,
            {
                "is_summary": c.is_summary,
                # "applied" reports the down-weight only; a boost is reported apart.
                "applied": changed and regular,
                "boosted": changed and not regular,
                "multiplier": multiplier if changed else 1.0,
                "score_before": c.score,
                "score": score,
            },
        )
