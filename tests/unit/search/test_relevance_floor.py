"""The relevance floor alone: vector-only candidates under the floor go, full-text matches
stay whatever their similarity, and -1 keeps everything."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.search.stages.relevance_floor import RelevanceFloor
from app.search.types import Candidate

from .builders import make_candidate, make_context, order


def similar(n: int, similarity: float, *, text_rank: int | None = None) -> Candidate:
    return replace(make_candidate(n, vector_rank=n, text_rank=text_rank),
                   vector_similarity=similarity)


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
