"""Ordering and cutting to top_k, alone."""

from __future__ import annotations

from app.search.stages.cut import CutToTopK

from .builders import make_candidate, make_context, order


def test_keeps_the_top_k_by_score() -> None:
    ctx = make_context(
        make_candidate(1, score=0.2),
        make_candidate(2, score=0.9),
        make_candidate(3, score=0.5),
        make_candidate(4, score=0.7),
        top_k=3,
    )
    assert order(CutToTopK()(ctx)) == [2, 4, 3]


def test_ties_go_to_the_newer_memory_then_the_smaller_id() -> None:
    ctx = make_context(
        make_candidate(4, score=0.5, age_days=2),
        make_candidate(3, score=0.5, age_days=1),
        make_candidate(2, score=0.5, age_days=2),
        make_candidate(1, score=0.4, age_days=0),
    )
    assert order(CutToTopK()(ctx)) == [3, 2, 4, 1]


def test_fewer_candidates_than_top_k_returns_them_all() -> None:
    ctx = make_context(make_candidate(1, score=0.1), make_candidate(2, score=0.3), top_k=10)
    assert order(CutToTopK()(ctx)) == [2, 1]


def test_no_candidates_gives_an_empty_result() -> None:
    assert CutToTopK()(make_context()).candidates == ()


def test_explain_records_the_final_rank() -> None:
    ctx = make_context(make_candidate(1, score=0.1), make_candidate(2, score=0.3))
    out = CutToTopK()(ctx)
    assert [c.explanation["cut"]["rank"] for c in out.candidates] == [1, 2]


def test_without_explain_nothing_is_recorded() -> None:
    out = CutToTopK()(make_context(make_candidate(1, score=0.1), explain=False))
    assert out.candidates[0].explanation == {}
