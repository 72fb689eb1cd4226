"""Orders candidates by final score and keeps the first top_k."""

from __future__ import annotations

from dataclasses import dataclass

from app.search.types import Candidate, SearchContext


def order_key(c: Candidate) -> tuple[float, float, int]:
    # Highest score first; on a tie the newer memory, then the smaller id, so
    # equal scores still give one stable order across requests.
    return (-c.score, -c.created_at.timestamp(), c.memory_id.int)


@dataclass(frozen=True, slots=True)
class CutToTopK:
    @property
    def name(self) -> str:
        return "cut"

    def __call__(self, ctx: SearchContext, /) -> SearchContext:
        ordered = sorted(ctx.candidates, key=order_key)[: ctx.top_k]
        if ctx.explain:
            ordered = [
                c.rescored(c.score, self.name, {"rank": i}) for i, c in enumerate(ordered, 1)
            ]
        return ctx.with_candidates(tuple(ordered))
