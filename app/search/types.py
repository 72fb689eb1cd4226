"""Value types the pipeline passes between stages: candidates, the analysed query, the context.

Everything here is frozen: a stage never mutates what it was given, it returns a
new context built with `dataclasses.replace`, so each stage can be tested alone
and a context seen by one stage is never changed behind its back by the next.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date, datetime
from typing import Literal

QueryStyle = Literal["summary", "regular"]

FACT = "fact"
SUMMARY = "summary"

ExplanationValue = float | int | bool | str | None
StageExplanation = dict[str, ExplanationValue]
Explanation = dict[str, StageExplanation]


@dataclass(frozen=True, slots=True)
class Candidate:
    """One memory that came out of candidate retrieval, with its scores so far.

    Ranks are 1-based positions in the vector list and in the full-text list;
    `None` means the memory was not in that list.
    """

    memory_id: uuid.UUID
    # The service's memory row; the pipeline never looks inside it.
    payload: object = field(hash=False)
    importance: float
    created_at: datetime
    fact_role: str
    vector_rank: float | None = None
    vector_similarity: float | None = None
    text_rank: float | None = None
    text_score: float | None = None
    # A summary's: the days of the facts it covers (its created_at is when it was written).
    covered_days: tuple[date, ...] = ()
    # A summary's: the ids of the memories it was built from (`summary_of`).
    covers: tuple[uuid.UUID, ...] = ()
    # It is in the full-text list only through the day words indexed with it (its day
    # number, month, year): no word of its content matched the query.
    text_day_only: bool = False
    score: float = 0.0
    explanation: Explanation = field(default_factory=dict, hash=False)

    @property
    def is_summary(self) -> bool:
        return self.fact_role == SUMMARY

    def rescored(
        self, score: float, stage: str | None = None, details: StageExplanation | None = None
    ) -> Candidate:
        """A copy with a new score and, when `details` is given, `stage`'s explanation added.

        The explanation dict is copied, never updated in place, so earlier
        contexts keep the explanation they had.
        """
        explanation = self.explanation
        if stage is not None and details is not None:
            explanation = {**explanation, stage: details}
        return _built(self.memory_id, self.payload, self.importance, self.created_at,
                      self.fact_role, self.vector_rank, self.vector_similarity,
                      self.text_rank, self.text_score, self.covered_days, self.covers,
                      self.text_day_only, score, explanation)

    @classmethod
    def retrieved(
        cls, memory_id: uuid.UUID, payload: object, importance: float, created_at: datetime,
        fact_role: str, vector_rank: float | None, vector_similarity: float | None,
        text_rank: float | None, text_score: float | None,
        covered_days: tuple[date, ...] = (), covers: tuple[uuid.UUID, ...] = (),
        text_day_only: bool = False,
    ) -> Candidate:
        """A candidate as retrieval found it (score 0, no explanation); the same as the
        constructor, for the ~120 candidates of every search."""
        return _built(memory_id, payload, importance, created_at, fact_role, vector_rank,
                      vector_similarity, text_rank, text_score, covered_days, covers,
                      text_day_only, 0.0, {})


def _slot_setter(name: str) -> Callable[[Candidate, object], None]:
    # The slot's own descriptor: object.__setattr__ looks the name up on the type first,
    # for every field of every copy.
    setter: Callable[[Candidate, object], None] = Candidate.__dict__[name].__set__
    return setter


_new = object.__new__
(_set_memory_id, _set_payload, _set_importance, _set_created_at, _set_fact_role,
 _set_vector_rank, _set_vector_similarity, _set_text_rank, _set_text_score,
 _set_covered_days, _set_covers, _set_text_day_only, _set_score, _set_explanation) = (
    _slot_setter(name) for name in (
        "memory_id", "payload", "importance", "created_at", "fact_role", "vector_rank",
        "vector_similarity", "text_rank", "text_score", "covered_days", "covers",
        "text_day_only", "score", "explanation"))


def _built(
    memory_id: uuid.UUID, payload: object, importance: float, created_at: datetime,
    fact_role: str, vector_rank: float | None, vector_similarity: float | None,
    text_rank: float | None, text_score: float | None, covered_days: tuple[date, ...],
    covers: tuple[uuid.UUID, ...], text_day_only: bool, score: float,
    explanation: Explanation,
) -> Candidate:
    # Slot by slot, past the frozen __init__ (which binds keywords, then sets each field
    # through object.__setattr__): every stage rescores every candidate (~120 a search),
    # and that constructor was ~60% of the pipeline's time; setting through the slots'
    # descriptors is ~3x faster again than object.__setattr__ by name. Candidate has no
    # validation to skip; a unit test checks every field is set.
    c: Candidate = _new(Candidate)
    _set_memory_id(c, memory_id)
    _set_payload(c, payload)
    _set_importance(c, importance)
    _set_created_at(c, created_at)
    _set_fact_role(c, fact_role)
    _set_vector_rank(c, vector_rank)
    _set_vector_similarity(c, vector_similarity)
    _set_text_rank(c, text_rank)
    _set_text_score(c, text_score)
    _set_covered_days(c, covered_days)
    _set_covers(c, covers)
    _set_text_day_only(c, text_day_only)
    _set_score(c, score)
    _set_explanation(c, explanation)
    return c


@dataclass(frozen=True, slots=True)
class QueryAnalysis:
    """The query as the pipeline sees it: text, style and (for dense retrieval) its vector."""

    text: str
    style: QueryStyle
    embedding: tuple[float, ...] | None = field(default=None, repr=False)
    # The calendar days the query names (app/search/stages/query_dates.py).
    dates: tuple[date, ...] = ()
    # The identifiers it names, lower-cased (app/search/stages/query_identifiers.py).
    identifiers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SearchContext:
    """What flows through the stages: the query, the candidates, and the request's parameters."""

    query: QueryAnalysis
    candidates: tuple[Candidate, ...]
    top_k: int
    now: datetime
    include_summaries: bool = True
    explain: bool = False
    # Candidates the collapse of duplicates left out as copies of one it kept.
    collapsed: int = 0

    def __post_init__(self) -> None:
        if self.top_k < 1:
            raise ValueError("top_k must be at least 1")
        # Recency subtracts created_at from now; a naive `now` would fail on the
        # first aware timestamp, so refuse it up front.
        if self.now.tzinfo is None:
            raise ValueError("now must be timezone-aware")

    def with_candidates(self, candidates: tuple[Candidate, ...]) -> SearchContext:
        return replace(self, candidates=candidates)
