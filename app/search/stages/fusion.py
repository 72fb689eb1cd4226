"""Weighted reciprocal-rank fusion of the vector list and the full-text list."""

from __future__ import annotations

from dataclasses import dataclass

from app.search.types import Candidate, SearchContext, StageExplanation


@dataclass(frozen=True, slots=True)
class ReciprocalRankFusion:
    """score = (w_v / (k + vector_rank) + w_t / (k + text_rank)) / best_possible.

    A list a candidate is absent from contributes nothing. The sum is divided
    by what a candidate ranked first in every weighted list would get, so the
    fused score lies in [0, 1] whatever k and the weights are; that keeps the
    importance and recency weights of the next stage meaningful when k or the
    list weights are tuned.

    A query naming an identifier (`QueryAnalysis.identifiers`) weighs the text list
    `identifier_text_weight` when that is more: the text list finds the row holding the
    exact string, which the vector list cannot tell from its look-alikes (see
    query_identifiers). None keeps `text_weight` for every query.
    """

    k: float = 10.0
    vector_weight: float = 1.0
    text_weight: float = 0.75
    identifier_text_weight: float | None = None

    @property
    def name(self) -> str:
        return "fusion"

    def __post_init__(self) -> None:
        if self.k < 0:
            raise ValueError("k must be >= 0")
        if self.vector_weight < 0 or self.text_weight < 0 or (
                self.identifier_text_weight is not None and self.identifier_text_weight < 0):
            raise ValueError("list weights must be >= 0")
        if self.vector_weight + self.text_weight <= 0:
            raise ValueError("at least one list weight must be positive")

    def text_weight_for(self, ctx: SearchContext) -> float:
        if ctx.query.identifiers and self.identifier_text_weight is not None:
            return max(self.text_weight, self.identifier_text_weight)
        return self.text_weight

    def __call__(self, ctx: SearchContext, /) -> SearchContext:
        text_weight = self.text_weight_for(ctx)
        best = (self.vector_weight + text_weight) / (self.k + 1)
        return ctx.with_candidates(tuple(self._fuse(c, text_weight, best, ctx.explain)
                                         for c in ctx.candidates))

    def _fuse(self, c: Candidate, text_weight: float, best: float,
              explain: bool) -> Candidate:
        vector_term = self._term(self.vector_weight, c.vector_rank)
        text_term = self._term(text_weight, c.text_rank)
        rrf = vector_term + text_term
        score = rrf / best
        if not explain:
            return c.rescored(score)
        details: StageExplanation = {
            "vector_rank": c.vector_rank,
            "vector_similarity": c.vector_similarity,
            "vector_term": vector_term,
            "text_rank": c.text_rank,
            "text_score": c.text_score,
            "text_term": text_term,
            "text_weight": text_weight,
            "rrf": rrf,
            "score": score,
        }
        return c.rescored(score, self.name, details)

    def _term(self, weight: float, rank: float | None) -> float:
        if rank is None:
            return 0.0
        if rank < 1:
            raise ValueError(f"ranks are 1-based, got {rank}")
        return weight / (self.k + rank)
