"""The summary-coverage stage, alone: for a summary-style query a summary gains the scores of
the sources it was built from that retrieval found."""

from __future__ import annotations

import pytest

from app.search.stages.summary_coverage import SummaryCoverage
from app.search.types import QueryStyle, SearchContext

from .builders import by_number, make_candidate, make_context


def _podcast_and_trip(style: QueryStyle = "summary", explain: bool = True) -> SearchContext:
    # Summary 10 covers the podcast conversation (facts 1, 2), summary 20 the trip (3, 4).
    # The query matched the podcast facts best, but summary 20's own text scored higher.
    return make_context(
        make_candidate(1, score=0.5),
        make_candidate(2, score=0.2),
        make_candidate(3, score=0.05),
        make_candidate(10, score=0.1, fact_role="summary", covers=(1, 2, 5)),
        make_candidate(20, score=0.3, fact_role="summary", covers=(3, 4)),
        style=style,
        explain=explain,
    )


def test_a_summary_gains_its_best_source_score_times_the_weight() -> None:
    out = by_number(SummaryCoverage(weight=1.0, depth=1)(_podcast_and_trip()))
    assert out[10].score == pytest.approx(0.1 + 0.5)
    assert out[20].score == pytest.approx(0.3 + 0.05)
    assert out[10].explanation["summary_coverage"] == {
        "covered_candidates": 2, "lift": pytest.approx(0.5), "score": pytest.approx(0.6)}


def test_depth_sums_that_many_of_the_best_sources_and_weight_scales_them() -> None:
    out = by_number(SummaryCoverage(weight=0.5, depth=2)(_podcast_and_trip()))
    assert out[10].score == pytest.approx(0.1 + 0.5 * (0.5 + 0.2))
    # Only one of summary 20's sources is a candidate: depth takes what there is.
    assert out[20].score == pytest.approx(0.3 + 0.5 * 0.05)


def test_facts_and_uncovered_summaries_keep_their_scores() -> None:
    ctx = make_context(
        make_candidate(1, score=0.5),
        make_candidate(10, score=0.1, fact_role="summary", covers=(7, 8)),
        style="summary",
    )
    out = by_number(SummaryCoverage()(ctx))
    assert out[1].score == 0.5
    assert out[10].score == 0.1
    assert out[10].explanation["summary_coverage"]["covered_candidates"] == 0


def test_a_summary_of_summaries_counts_the_summaries_it_covers() -> None:
    ctx = make_context(
        make_candidate(10, score=0.4, fact_role="summary", covers=(1,)),
        make_candidate(30, score=0.1, fact_role="summary", covers=(10, 30)),
        style="summary",
    )
    out = by_number(SummaryCoverage()(ctx))
    # Scores are read as the stage found them, not as it lifts them, and a summary never
    # counts itself.
    assert out[30].score == pytest.approx(0.1 + 0.4)
    assert out[10].score == pytest.approx(0.4)


def test_regular_queries_are_left_alone() -> None:
    quiet = _podcast_and_trip(style="regular", explain=False)
    assert SummaryCoverage()(quiet) is quiet
    explained = by_number(SummaryCoverage()(_podcast_and_trip(style="regular")))
    assert explained[10].score == 0.1
    assert explained[10].explanation["summary_coverage"] == {
        "covered_candidates": 0, "lift": 0.0, "score": 0.1}


def test_a_weight_of_zero_turns_it_off() -> None:
    quiet = _podcast_and_trip(explain=False)
    assert SummaryCoverage(weight=0.0)(quiet) is quiet
    assert by_number(SummaryCoverage(weight=0.0)(_podcast_and_trip()))[10].score == 0.1


def test_without_explain_the_scores_are_the_same() -> None:
    stage = SummaryCoverage(weight=1.0, depth=2)
    quiet = stage(_podcast_and_trip(explain=False))
    loud = stage(_podcast_and_trip())
    assert [c.score for c in quiet.candidates] == pytest.approx(
        [c.score for c in loud.candidates])
    assert all(c.explanation == {} for c in quiet.candidates)


@pytest.mark.parametrize(("weight", "depth", "message"), [(-0.1, 1, "weight"),
                                                          (1.0, 0, "depth")])
def test_bad_settings_are_refused(weight: float, depth: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SummaryCoverage(weight=weight, depth=depth)
