"""Weighted reciprocal-rank fusion, alone."""

from __future__ import annotations

import pytest

from app.search.stages.fusion import ReciprocalRankFusion

from .builders import by_number, make_candidate, make_context


def test_first_in_both_lists_scores_one_and_first_in_one_list_scores_half() -> None:
    ctx = make_context(
        make_candidate(1, vector_rank=1, text_rank=1),
        make_candidate(2, vector_rank=1),
        make_candidate(3, text_rank=1),
        make_candidate(4, vector_rank=2, text_rank=3),
    )
    fused = by_number(ReciprocalRankFusion(k=60, text_weight=1.0)(ctx))
    assert fused[1].score == pytest.approx(1.0)
    assert fused[2].score == pytest.approx(0.5)
    assert fused[3].score == pytest.approx(0.5)
    # (1/62 + 1/63) / (2/61)
    assert fused[4].score == pytest.approx(0.976062, abs=1e-6)


def test_list_weights_scale_each_list() -> None:
    ctx = make_context(make_candidate(1, vector_rank=2), make_candidate(2, text_rank=2))
    fused = by_number(ReciprocalRankFusion(k=10, vector_weight=1.0, text_weight=2.0)(ctx))
    # best possible = 3/11; vector: (1/12)/(3/11) = 11/36; text: (2/12)/(3/11) = 22/36
    assert fused[1].score == pytest.approx(11 / 36)
    assert fused[2].score == pytest.approx(22 / 36)


def test_a_zero_weight_ignores_that_list() -> None:
    ctx = make_context(make_candidate(1, vector_rank=1, text_rank=50))
    fused = by_number(ReciprocalRankFusion(k=60, text_weight=0.0)(ctx))
    assert fused[1].score == pytest.approx(1.0)


def test_defaults_weight_the_text_list_at_three_quarters() -> None:
    ctx = make_context(make_candidate(1, vector_rank=1), make_candidate(2, text_rank=1))
    fused = by_number(ReciprocalRankFusion()(ctx))
    # best possible = 1.75 / 11
    assert fused[1].score == pytest.approx(1 / 1.75)
    assert fused[2].score == pytest.approx(0.75 / 1.75)


def test_a_candidate_in_neither_list_scores_zero() -> None:
    fused = by_number(ReciprocalRankFusion()(make_context(make_candidate(1, score=0.7))))
    assert fused[1].score == 0.0


def test_explanation_records_ranks_terms_and_score() -> None:
    ctx = make_context(make_candidate(1, vector_rank=2, text_rank=4))
    details = ReciprocalRankFusion(k=60, text_weight=1.0)(ctx).candidates[0].explanation["fusion"]
    assert details["vector_rank"] == 2
    assert details["vector_similarity"] == pytest.approx(0.98)
    assert details["vector_term"] == pytest.approx(1 / 62)
    assert details["text_rank"] == 4
    assert details["text_score"] == pytest.approx(0.25)
    assert details["text_term"] == pytest.approx(1 / 64)
    assert details["rrf"] == pytest.approx(1 / 62 + 1 / 64)
    assert details["score"] == pytest.approx((1 / 62 + 1 / 64) / (2 / 61))


def test_without_explain_no_explanation_is_built() -> None:
    ctx = make_context(make_candidate(1, vector_rank=1), explain=False)
    out = ReciprocalRankFusion(k=60, text_weight=1.0)(ctx)
    assert out.candidates[0].explanation == {}
    assert out.candidates[0].score == pytest.approx(0.5)


def test_input_context_is_left_unchanged() -> None:
    ctx = make_context(make_candidate(1, vector_rank=1))
    ReciprocalRankFusion()(ctx)
    assert ctx.candidates[0].score == 0.0
    assert ctx.candidates[0].explanation == {}


def test_ranks_are_one_based() -> None:
    with pytest.raises(ValueError, match="1-based"):
        ReciprocalRankFusion()(make_context(make_candidate(1, vector_rank=0)))


@pytest.mark.parametrize(
    ("k", "vector_weight", "text_weight"), [(-1.0, 1.0, 1.0), (60, -0.1, 1.0), (60, 0.0, 0.0)]
)
def test_bad_parameters_are_refused(k: float, vector_weight: float, text_weight: float) -> None:
    with pytest.raises(ValueError, match="must"):
        ReciprocalRankFusion(k=k, vector_weight=vector_weight, text_weight=text_weight)


def test_a_query_naming_an_identifier_weighs_the_text_list_more() -> None:
    # The probe's case: the row holding the invoice number, 14th in the vector list and
    # first in the text list, against a look-alike first in the vector list.
    named = (make_candidate(1, vector_rank=14, text_rank=1),
             make_candidate(2, vector_rank=1, text_rank=21))
    fusion = ReciprocalRankFusion(k=2, text_weight=0.5, identifier_text_weight=2.0)

    plain = by_number(fusion(make_context(*named)))
    coded = by_number(fusion(make_context(*named, identifiers=("inv-2024-0042",))))

    assert plain[2].score > plain[1].score
    assert coded[1].score > coded[2].score
    # (1/16 + 2/3) / (3/3): still in [0, 1].
    assert coded[1].score == pytest.approx(1 / 16 + 2 / 3)
    assert coded[1].explanation["fusion"]["text_weight"] == 2.0
    assert plain[1].explanation["fusion"]["text_weight"] == 0.5


def test_an_identifier_weight_below_the_text_weight_or_none_changes_nothing() -> None:
    ctx = make_context(make_candidate(1, vector_rank=1), make_candidate(2, text_rank=1),
                       identifiers=("lh1234",))
    base = by_number(ReciprocalRankFusion(k=2, text_weight=0.5)(ctx))
    lower = by_number(ReciprocalRankFusion(k=2, text_weight=0.5,
                                           identifier_text_weight=0.1)(ctx))
    assert {n: c.score for n, c in base.items()} == {n: c.score for n, c in lower.items()}
    with pytest.raises(ValueError, match="list weights"):
        ReciprocalRankFusion(identifier_text_weight=-1.0)
