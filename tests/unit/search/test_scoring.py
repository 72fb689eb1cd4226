"""Importance and recency blending, alone."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.search.stages.scoring import ImportanceRecencyScoring

from .builders import NOW, by_number, make_candidate, make_context, order


def test_score_adds_weighted_importance_and_recency() -> None:
    stage = ImportanceRecencyScoring(
        importance_weight=0.1, recency_weight=0.2, recency_half_life_days=10
    )
    ctx = make_context(
        make_candidate(1, score=0.5, importance=0.8, age_days=0),
        make_candidate(2, score=0.5, importance=0.8, age_days=10),
        make_candidate(3, score=0.5, importance=0.8, age_days=20),
    )
    scored = by_number(stage(ctx))
    assert scored[1].score == pytest.approx(0.5 + 0.08 + 0.2)
    assert scored[2].score == pytest.approx(0.5 + 0.08 + 0.1)
    assert scored[3].score == pytest.approx(0.5 + 0.08 + 0.05)


def test_explanation_lists_every_term() -> None:
    stage = ImportanceRecencyScoring(
        importance_weight=0.02, recency_weight=0.01, recency_half_life_days=30
    )
    ctx = make_context(make_candidate(1, score=0.4, importance=0.5, age_days=30))
    details = stage(ctx).candidates[0].explanation["scoring"]
    assert details == pytest.approx(
        {
            "relevance": 0.4,
            "importance": 0.5,
            "importance_term": 0.01,
            "age_days": 30.0,
            "recency": 0.5,
            "recency_term": 0.005,
            "score": 0.415,
        }
    )


@pytest.mark.parametrize(("raw", "clamped"), [(1.7, 1.0), (-0.2, 0.0), (0.3, 0.3)])
def test_importance_is_clamped_to_unit_range(raw: float, clamped: float) -> None:
    stage = ImportanceRecencyScoring(importance_weight=1.0, recency_weight=0.0)
    out = stage(make_context(make_candidate(1, importance=raw)))
    assert out.candidates[0].score == pytest.approx(clamped)


def test_a_future_timestamp_counts_as_brand_new() -> None:
    stage = ImportanceRecencyScoring(importance_weight=0.0, recency_weight=1.0)
    candidate = make_candidate(1, age_days=-3)
    assert candidate.created_at == NOW + timedelta(days=3)
    assert stage(make_context(candidate)).candidates[0].score == pytest.approx(1.0)


def test_zero_weights_leave_relevance_alone() -> None:
    stage = ImportanceRecencyScoring(importance_weight=0.0, recency_weight=0.0)
    out = stage(make_context(make_candidate(1, score=0.37, importance=1.0)))
    assert out.candidates[0].score == pytest.approx(0.37)


def test_recency_breaks_a_relevance_tie_in_favour_of_the_newer() -> None:
    stage = ImportanceRecencyScoring()
    out = stage(
        make_context(
            make_candidate(1, score=0.6, age_days=90), make_candidate(2, score=0.6, age_days=1)
        )
    )
    scores = by_number(out)
    assert scores[2].score > scores[1].score
    assert order(out) == [1, 2]  # scoring reorders nothing; the cut stage sorts


def test_small_default_weights_do_not_overturn_a_clear_relevance_gap() -> None:
    # 0.5 vs 0.45 is the gap between rank 1 and rank ~8 of one list at k=60.
    out = by_number(
        ImportanceRecencyScoring()(
            make_context(
                make_candidate(1, score=0.50, importance=0.0, age_days=365),
                make_candidate(2, score=0.45, importance=1.0, age_days=0),
            )
        )
    )
    assert out[1].score > out[2].score


def test_without_explain_no_explanation_is_built() -> None:
    out = ImportanceRecencyScoring()(make_context(make_candidate(1), explain=False))
    assert out.candidates[0].explanation == {}


@pytest.mark.parametrize(
    "kwargs",
    [{"importance_weight": -0.1}, {"recency_weight": -1.0}, {"recency_half_life_days": 0.0}],
)
def test_bad_parameters_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must"):
        ImportanceRecencyScoring(**kwargs)


def test_a_summary_is_as_old_as_the_newest_day_it_covers() -> None:
    stage = ImportanceRecencyScoring(importance_weight=0, recency_weight=0.2,
                                     recency_half_life_days=10)
    # Both written now; the first covers facts of 9 and 10 days ago (noon UTC, as NOW).
    covering = make_candidate(1, score=0.5, fact_role="summary", covered_days=(
        (NOW - timedelta(days=10)).date(), (NOW - timedelta(days=9)).date()))
    orphan = make_candidate(2, score=0.5, fact_role="summary")

    scored = by_number(stage(make_context(covering, orphan)))

    assert scored[1].explanation["scoring"]["age_days"] == pytest.approx(9)
    assert scored[1].score == pytest.approx(0.5 + 0.2 * 0.5 ** 0.9)
    # Without covered days (its facts deleted before migration 0010): its own age.
    assert scored[2].explanation["scoring"]["age_days"] == pytest.approx(0)
