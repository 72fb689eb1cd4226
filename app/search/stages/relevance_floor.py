"""Drops candidates nothing ties to the query: no full-text match and a cosine
similarity under the floor.

The vector list always holds the scope's nearest rows, however far they are, so
without a floor a query about something the store has never heard of ("the boiling
point of tungsten") answers with whatever is least unrelated. A row that matched a query
term in its content is kept whatever its similarity: the lexical match is the relation.
A match of a row's day words alone (each row's day number, month and year are indexed
with it) is not: "tungsten in 2026", "May I know...", "12 times 4" matched every row of
such a day. A row of a day the query names (`QueryAnalysis.dates`) is kept, as that day
is then the relation. A summary request keeps a summary of a row it keeps ("summarize
what you know about my health": the summary of the health facts may name no word of it and
sit under the floor, while a fact it covers passes): that summary is what it asks for, and
the summary coverage stage then lifts it by its sources. And a summary request with nothing
else in it ("recap", "tl;dr") ties to no row by its words or its vector: when nothing
passes, it keeps the summaries. The default
floor for the local model (0.25, `Settings.min_similarity`) comes from
bench/retrieval_eval.py (the README has the sweep): with all-MiniLM-L6-v2, 99% of the
evidence turns of its questions sit above 0.32, and up to 0.25 the floor cost no recall
while two thirds of the off-topic questions came back empty (the rest kept rows sharing a
word with them). A floor of -1 keeps every candidate.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

from app.search.stages.date_match import on_named_day
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

    def _kept_by(self, c: Candidate, days: frozenset[date]) -> str | None:
        if c.text_rank is not None and not c.text_day_only:
            return "text_match"
        # Placed in the vector list: a text-list row past its farthest row has its
        # similarity for explain, and keeps no place it was not given.
        if (c.vector_rank is not None and c.vector_similarity is not None
                and c.vector_similarity >= self.min_similarity):
            return "similarity"
        if days and on_named_day(c, days):
            return "named_day"
        return None

    def __call__(self, ctx: SearchContext, /) -> SearchContext:
        days = frozenset(ctx.query.dates)
        reasons = [(c, self._kept_by(c, days)) for c in ctx.candidates]
        if ctx.query.style == "summary":
            reasons = _with_summaries_of_kept(reasons)
        kept = [(c, why) for c, why in reasons if why is not None]
        if not kept and ctx.query.style == "summary":
            kept = [(c, "summary_request") for c in ctx.candidates if c.is_summary]
        if not ctx.explain:
            return ctx.with_candidates(tuple(c for c, _ in kept))
        return ctx.with_candidates(tuple(
            c.rescored(c.score, self.name, {"min_similarity": self.min_similarity,
                                            "kept_by": why})
            for c, why in kept
        ))


def _with_summaries_of_kept(reasons: list[tuple[Candidate, str | None]]
                            ) -> list[tuple[Candidate, str | None]]:
    """`reasons` with every summary of a kept row kept too ("source_kept"), through
    summaries of summaries."""
    kept = {c.memory_id for c, why in reasons if why is not None}
    added = True
    while added:
        added = False
        for i, (c, why) in enumerate(reasons):
            if why is None and c.is_summary and not kept.isdisjoint(c.covers):
                reasons[i] = (c, "source_kept")
                kept.add(c.memory_id)
                added = True
    return reasons
