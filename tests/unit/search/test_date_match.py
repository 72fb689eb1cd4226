"""The date-match stage, alone: a memory written on a day the query names gains the weight."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.search.stages.date_match import DateMatch

from .builders import NOW, by_number, make_candidate, make_context, order

TODAY = NOW.date()


def test_a_memory_of_a_named_day_gains_the_weight() -> None:
    ctx = make_context(
        make_candidate(1, score=0.5, age_days=0),
        make_candidate(2, score=0.6, age_days=1),
        make_candidate(3, score=0.4, age_days=3),
        dates=(TODAY, TODAY - timedelta(days=3)),
    )
    scored = by_number(DateMatch(weight=0.3)(ctx))
    assert scored[1].score == pytest.approx(0.8)
    assert scored[2].score == pytest.approx(0.6)
    assert scored[3].score == pytest.approx(0.7)
    assert order(DateMatch(weight=0.3)(ctx)) == [1, 2, 3]  # the order is the cut's job


def test_the_day_is_the_utc_day_of_created_at() -> None:
    # NOW is 12:00 UTC; 13 hours earlier is the day before in UTC.
    ctx = make_context(make_candidate(1, score=0.5, age_days=13 / 24), dates=(TODAY,))
    assert DateMatch(weight=0.3)(ctx).candidates[0].score == pytest.approx(0.5)


def test_a_query_that_names_no_day_changes_nothing() -> None:
    ctx = make_context(make_candidate(1, score=0.5), explain=False)
    assert DateMatch(weight=0.3)(ctx) is ctx
    explained = DateMatch(weight=0.3)(make_context(make_candidate(1, score=0.5)))
    assert explained.candidates[0].explanation["date_match"] == {"matched": False,
                                                                 "score": 0.5}


def test_explain_says_whether_the_day_matched() -> None:
    ctx = make_context(make_candidate(1, score=0.5), make_candidate(2, score=0.5, age_days=2),
                       dates=(TODAY,))
    scored = by_number(DateMatch(weight=0.25)(ctx))
    assert scored[1].explanation["date_match"] == {"matched": True, "score": 0.75}
    assert scored[2].explanation["date_match"] == {"matched": False, "score": 0.5}


def test_weight_zero_is_off_and_negative_is_refused() -> None:
    ctx = make_context(make_candidate(1, score=0.5), dates=(TODAY,), explain=False)
    assert DateMatch(weight=0)(ctx) is ctx
    with pytest.raises(ValueError, match="weight"):
        DateMatch(weight=-0.1)


def test_a_summary_matches_by_the_days_it_covers_not_the_day_it_was_written() -> None:
    last_week = (TODAY - timedelta(days=8), TODAY - timedelta(days=7))
    ctx = make_context(
        # Written today, about last week.
        make_candidate(1, score=0.2, fact_role="summary", covered_days=last_week),
        # A summary whose facts were deleted before migration 0010 covers no day: its own.
        make_candidate(2, score=0.2, fact_role="summary"),
        dates=(TODAY - timedelta(days=7),), explain=False,
    )
    scored = by_number(DateMatch(weight=0.3)(ctx))
    assert scored[1].score == pytest.approx(0.5)
    assert scored[2].score == pytest.approx(0.2)

    today = by_number(DateMatch(weight=0.3)(make_context(*ctx.candidates, dates=(TODAY,))))
    assert today[1].explanation["date_match"] == {"matched": False, "score": 0.2}
    assert today[2].explanation["date_match"] == {"matched": True, "score": 0.5}
