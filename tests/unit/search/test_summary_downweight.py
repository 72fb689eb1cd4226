"""The summary down-weight, alone."""

from __future__ import annotations

import pytest

from app.search.stages.summary_downweight import SummaryDownweight
from app.search.types import Candidate, QueryStyle

from .builders import by_number, make_candidate, make_context, order


def _fact_and_summary() -> tuple[Candidate, Candidate]:
    return (
        make_candidate(1, score=0.6),
        make_candidate(2, score=0.8, fact_role="summary"),
    )


def test_regular_query_halves_summaries_and_leaves_facts() -> None:
    out = by_number(SummaryDownweight()(make_context(*_fact_and_summary())))
    assert out[1].score == pytest.approx(0.6)
    assert out[2].score == pytest.approx(0.4)
    assert out[2].explanation["summary_downweight"] == pytest.approx(
        {
            "is_summary": True,
            "applied": True,
            "boosted": False,
            "multiplier": 0.5,
            "score_before": 0.8,
            "score": 0.4,
        }
    )
    assert out[1].explanation["summary_downweight"]["applied"] is False
    assert out[1].explanation["summary_downweight"]["is_summary"] is False


@pytest.mark.parametrize("factor", [1.0, 1.5, 3.0])
def test_a_factor_of_one_or_more_is_a_no_op(factor: float) -> None:
    out = by_number(SummaryDownweight(factor=factor)(make_context(*_fact_and_summary())))
    assert out[2].score == pytest.approx(0.8)
    assert out[2].explanation["summary_downweight"]["applied"] is False
    assert out[2].explanation["summary_downweight"]["multiplier"] == 1.0


def test_summary_query_leaves_summaries_alone_by_default() -> None:
    ctx = make_context(*_fact_and_summary(), style="summary")
    out = by_number(SummaryDownweight(factor=0.1)(ctx))
    assert out[2].score == pytest.approx(0.8)
    assert out[2].explanation["summary_downweight"]["applied"] is False
    assert out[2].explanation["summary_downweight"]["boosted"] is False


def test_summary_query_applies_the_optional_boost_to_summaries_only() -> None:
    ctx = make_context(*_fact_and_summary(), style="summary")
    out = by_number(SummaryDownweight(boost=1.5)(ctx))
    assert out[1].score == pytest.approx(0.6)
    assert out[2].score == pytest.approx(1.2)
    assert out[2].explanation["summary_downweight"]["boosted"] is True
    assert out[2].explanation["summary_downweight"]["applied"] is False


@pytest.mark.parametrize("style", ["regular", "summary"])
def test_include_summaries_false_removes_them(style: QueryStyle) -> None:
    ctx = make_context(
        *_fact_and_summary(),
        make_candidate(3, score=0.1),
        style=style,
        include_summaries=False,
    )
    assert order(SummaryDownweight()(ctx)) == [1, 3]


def test_without_explain_nothing_is_recorded() -> None:
    out = SummaryDownweight()(make_context(*_fact_and_summary(), explain=False))
    assert [c.explanation for c in out.candidates] == [{}, {}]
    assert [c.score for c in out.candidates] == pytest.approx([0.6, 0.4])


@pytest.mark.parametrize("kwargs", [{"factor": -0.5}, {"boost": 0.9}])
def test_bad_parameters_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must"):
        SummaryDownweight(**kwargs)
