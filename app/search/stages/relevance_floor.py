"""Drops candidates nothing ties to the query: no full-text match and a cosine
similarity under the floor.

The vector list always holds the scope's nearest rows, however far they are, so
without a floor a query about something the store has never heard of ("the boiling
point of tungsten") answers with whatever is least unrelated. A row that matched a query
term is kept whatever its similarity: the lexical match is the relation. The default
floor for the local model (0.25, `Settings.min_similarity`) comes from
bench/retrieval_eval.py (the README has the sweep): with all-MiniLM-L6-v2, 99% of the
evidence turns of its questions sit above 0.32, and up to 0.25 the floor cost no recall
while two thirds of the off-topic questions came back empty (the rest kept rows sharing a
word with them). A floor of -1 keeps every candidate.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.search.types import Candidate, SearchContext


@dataclass(frozen=True, slots=True)
class RelevanceFloor:
    min_similarity: float = -1.0

    @property
    def name(self) -> str:
        return "relevance_floor"

    def __post_init__(self) -> None:
        if not -1.0 <= self.min_similarity <= 1.0:
            raise ValueError("min_similarity must be a cosine similarity, in [-1, 1]")

    def _keeps(self, c: Candidate) -> bool:
        return c.text_rank is not None or (
            c.vector_similarity is not None and c.vector_similarity >= self.min_similarity)

    def __call__(self, ctx: SearchContext, /) -> SearchContext:
        kept = tuple(c for c in ctx.candidates if self._keeps(c))
        if not ctx.explain:
            return ctx.with_candidates(kept)
        return ctx.with_candidates(tuple(
            c.rescored(c.score, self.name, {
                "min_similarity": self.min_similarity,
                "kept_by": "text_match" if c.text_rank is not None else "similarity",
            })
            for c in kept
        ))
