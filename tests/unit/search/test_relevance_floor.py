"""The relevance floor alone: vector-only candidates under the floor go, full-text matches
of their content stay whatever their similarity (a match of their day words alone does
not, unless the query names that day), a summary request keeps the summaries of the rows
it keeps, a bare summary request keeps the summaries when nothing else stays, and -1 keeps
everything."""

from __future__ import annotations

from dataclasses import replace
from datetime import date

import pytest

from app.search.stages.relevance_floor import RelevanceFloor
from app.search.types import Candidate

from .builders import NOW, make_candidate, make_context, order


def similar(n: int, similarity: float, *, text_rank: int | None = None,
            day_only: bool = False, fact_role: str = "fact",
            covers: tuple[int, ...] = ()) -> Candidate:
    return replace(make_candidate(n, vector_rank=n, text_rank=text_rank, fact_role=fact_role,
                                  covers=covers),
                   vector_similarity=similarity, text_day_only=day_only)


def test_drops_vector_only_candidates_under_the_floor() -> None:
    ctx = make_context(similar(1, 0.62), similar(2, 0.30), similar(3, 0.2999), similar(4, -0.1))

    assert order(RelevanceFloor(min_similarity=0.3)(ctx)) == [1, 2]


def test_keeps_a_full_text_match_whatever_its_similarity() -> None:
    ctx = make_context(similar(1, 0.05, text_rank=1), make_candidate(2, text_rank=2),
                       similar(3, 0.05))

    assert order(RelevanceFloor(min_similarity=0.3)(ctx)) == [1, 2]


def test_nothing_related_is_an_empty_result() -> None:
    ctx = make_context(similar(1, 0.21), similar(2, 0.18), similar(3, 0.02))

    assert RelevanceFloor(min_similarity=0.3)(ctx).candidates == ()


def test_minus_one_keeps_every_candidate_and_leaves_them_unchanged() -> None:
    candidates = (similar(1, -1.0), similar(2, 0.0), make_candidate(3, text_rank=1))
    ctx = make_context(*candidates, explain=False)

    assert RelevanceFloor(min_similarity=-1.0)(ctx).candidates == candidates


def test_explain_says_why_each_candidate_stayed() -> None:
    out = RelevanceFloor(min_similarity=0.3)(
        make_context(similar(1, 0.5), similar(2, 0.1, text_rank=1)))

    first, second = out.candidates
    assert first.explanation["relevance_floor"] == {"min_similarity": 0.3,
                                                     "kept_by": "similarity"}
    assert second.explanation["relevance_floor"] == {"min_similarity": 0.3,
                                                      "kept_by": "text_match"}
    assert first.score == 0.0


@pytest.mark.parametrize("floor", [-1.01, 1.5])
def test_a_floor_outside_the_cosine_range_is_refused(floor: float) -> None:
    with pytest.raises(ValueError, match="cosine"):
        RelevanceFloor(min_similarity=floor)


def test_a_match_of_the_day_words_alone_is_no_tie_to_the_query() -> None:
    """"tungsten in 2026": every row of a 2026 day matched its year."""
    ctx = make_context(similar(1, 0.05, text_rank=1, day_only=True),
                       similar(2, 0.05, text_rank=2), similar(3, 0.40, text_rank=3,
                                                             day_only=True))

    out = RelevanceFloor(min_similarity=0.3)(ctx)

    assert order(out) == [2, 3]
    assert [c.explanation["relevance_floor"]["kept_by"] for c in out.candidates] == [
        "text_match", "similarity"]


def test_only_a_row_the_vector_list_placed_is_kept_by_its_similarity() -> None:
    """A day-word match past the vector list's farthest row carries its similarity (for
    explain) but no vector place: its similarity keeps it no more than its day words."""
    unplaced = replace(similar(1, 0.40, text_rank=1, day_only=True), vector_rank=None)

    out = RelevanceFloor(min_similarity=0.3)(make_context(unplaced, similar(2, 0.40)))

    assert order(out) == [2]


def test_a_row_of_a_day_the_query_names_is_kept() -> None:
    day = NOW.date()  # make_candidate's rows are written at NOW
    ctx = make_context(similar(1, 0.05, text_rank=1, day_only=True), dates=(day,))
    other = make_context(similar(1, 0.05, text_rank=1, day_only=True),
                         dates=(date(1999, 1, 1),))

    out = RelevanceFloor(min_similarity=0.3)(ctx)

    assert order(out) == [1]
    assert out.candidates[0].explanation["relevance_floor"]["kept_by"] == "named_day"
    assert RelevanceFloor(min_similarity=0.3)(other).candidates == ()


def test_a_bare_summary_request_keeps_the_summaries_when_nothing_else_stays() -> None:
    rows = (similar(1, 0.1), similar(2, 0.1, fact_role="summary"),
            similar(3, 0.05, fact_role="summary"))

    summary = RelevanceFloor(min_similarity=0.3)(make_context(*rows, style="summary"))
    regular = RelevanceFloor(min_similarity=0.3)(make_context(*rows))

    assert order(summary) == [2, 3]
    assert {c.explanation["relevance_floor"]["kept_by"] for c in summary.candidates} == {
        "summary_request"}
    assert regular.candidates == ()


def test_a_summary_request_with_a_related_row_keeps_the_floor() -> None:
    ctx = make_context(similar(1, 0.5), similar(2, 0.1, fact_role="summary"), style="summary")

    assert order(RelevanceFloor(min_similarity=0.3)(ctx)) == [1]


def test_a_summary_request_keeps_the_summary_of_a_row_it_keeps() -> None:
    """"summarize what you know about my health": the health facts' summary sits under the
    floor while one of its facts passes; a summary of another fact, and a fact under the
    floor, still go. Through a summary of that summary too."""
    rows = (similar(1, 0.4), similar(2, 0.1), similar(3, 0.1),
            similar(4, 0.2, fact_role="summary", covers=(1, 2)),
            similar(5, 0.1, fact_role="summary", covers=(3,)),
            similar(6, 0.1, fact_role="summary", covers=(4,)))

    out = RelevanceFloor(min_similarity=0.3)(make_context(*rows, style="summary"))
    regular = RelevanceFloor(min_similarity=0.3)(make_context(*rows))

    assert order(out) == [1, 4, 6]
    assert [c.explanation["relevance_floor"]["kept_by"] for c in out.candidates] == [
        "similarity", "source_kept", "source_kept"]
    assert order(regular) == [1]
